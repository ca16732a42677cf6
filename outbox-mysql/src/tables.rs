//! The outbox's tables on MySQL/MariaDB, and the row the store reads.

use chrono::NaiveDateTime;
use diesel_outbox_sql::{json_text, utf8_key};

use crate::timestamp;

diesel_outbox_sql::outbox_schema! {
    backend = diesel::mysql::Mysql,
    bigint = BigInt,
    int = Integer,
    text = Text,
    bytes = Binary,
    json = Text,
    json_doc = " (read as text)",
    key = Binary,
    key_doc = ": UTF-8 in a `VARBINARY(255)` column, so the database compares it byte \
        for byte; written as text, read as bytes",
    time = Datetime,
    time_doc = " (UTC)",
    json_rust = String,
    key_rust = Vec<u8>,
    time_rust = NaiveDateTime,
    json_read = json_text,
    key_read = utf8_key,
    time_read = timestamp::column,
}
