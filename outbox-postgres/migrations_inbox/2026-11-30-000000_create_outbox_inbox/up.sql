-- The inbox: one row per message a consumer applied, written in the consumer's own transaction
-- together with the message's effect (docs/consuming.md). Its own migration set, so a service
-- that only consumes applies just this table.
CREATE TABLE outbox_inbox (
    consumer    VARCHAR(64) COLLATE "C" NOT NULL
                CHECK (consumer <> '' AND octet_length(consumer) <= 64),
    message_id  VARCHAR(255) COLLATE "C" NOT NULL
                CHECK (message_id <> '' AND octet_length(message_id) <= 255),
    applied_at  TIMESTAMPTZ(6) NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

-- Retention: purge the oldest records first.
CREATE INDEX outbox_inbox_applied_idx ON outbox_inbox (applied_at);
