DROP TABLE outbox_meta;
