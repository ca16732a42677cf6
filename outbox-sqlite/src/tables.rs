//! The outbox's tables on SQLite, and the row the store reads.

use diesel_outbox_sql::{json_text, utf8_key};

use crate::timestamp;

diesel_outbox_sql::outbox_schema! {
    backend = diesel::sqlite::Sqlite,
    bigint = BigInt,
    int = Integer,
    text = Text,
    bytes = Binary,
    json = Text,
    json_doc = " (read as text)",
    key = Binary,
    key_doc = ": UTF-8 text compared byte for byte; read as bytes, so a key another \
        program wrote that is not UTF-8 fails its own row only",
    time = BigInt,
    time_doc = " (microseconds since the epoch, UTC)",
    json_rust = String,
    key_rust = Vec<u8>,
    time_rust = i64,
    json_read = json_text,
    key_read = utf8_key,
    time_read = timestamp::column,
}
