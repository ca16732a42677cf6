DROP TABLE outbox_inbox;
