-- The inbox for MySQL 8.0.1+ and MariaDB 10.6+: one row per message a consumer applied, written
-- in the consumer's own transaction together with the message's effect (docs/consuming.md). Its
-- own migration set, so a service that only consumes applies just this table.
--
-- Names and ids are UTF-8 compared byte for byte (VARBINARY: no PAD SPACE collation folds 'k'
-- and 'k '). applied_at is DATETIME(6) holding UTC, from UTC_TIMESTAMP(6).
CREATE TABLE outbox_inbox (
    consumer    VARBINARY(64) NOT NULL,
    message_id  VARBINARY(255) NOT NULL,
    applied_at  DATETIME(6) NOT NULL,
    PRIMARY KEY (consumer, message_id),
    -- Retention: purge the oldest records first.
    KEY outbox_inbox_applied_idx (applied_at),
    CONSTRAINT outbox_inbox_key_check CHECK (consumer <> '' AND message_id <> '')
) ENGINE = InnoDB;
