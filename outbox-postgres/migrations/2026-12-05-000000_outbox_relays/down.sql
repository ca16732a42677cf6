DROP TABLE outbox_relays;
