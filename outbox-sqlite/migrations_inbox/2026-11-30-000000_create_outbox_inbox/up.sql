-- The inbox for SQLite 3.35+: one row per message a consumer applied, written in the consumer's
-- own transaction together with the message's effect (docs/consuming.md). Its own migration set,
-- so a service that only consumes applies just this table.
--
-- Names and ids compare byte for byte (BINARY collation); applied_at is INTEGER microseconds
-- since the Unix epoch in UTC, like the outbox's times.
CREATE TABLE outbox_inbox (
    consumer    TEXT NOT NULL
                CHECK (consumer <> '' AND length(CAST(consumer AS BLOB)) <= 64),
    message_id  TEXT NOT NULL
                CHECK (message_id <> '' AND length(CAST(message_id AS BLOB)) <= 255),
    applied_at  INTEGER NOT NULL CHECK (typeof(applied_at) = 'integer'),
    PRIMARY KEY (consumer, message_id)
);

-- Retention: purge the oldest records first.
CREATE INDEX outbox_inbox_applied_idx ON outbox_inbox (applied_at);
