//! The outbox's tables on PostgreSQL, and the row the store reads.

use chrono::{DateTime, Utc};
use diesel_outbox_sql::as_is;

diesel_outbox_sql::outbox_schema! {
    backend = diesel::pg::Pg,
    bigint = BigInt,
    int = Integer,
    text = Text,
    bytes = Binary,
    json = Jsonb,
    json_doc = "",
    key = Text,
    key_doc = "",
    time = Timestamptz,
    time_doc = "",
    json_rust = serde_json::Value,
    key_rust = String,
    time_rust = DateTime<Utc>,
    json_read = as_is,
    key_read = as_is,
    time_read = as_is,
}
