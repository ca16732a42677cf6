DROP TABLE outbox_ordering_keys;
DROP TABLE outbox_tasks;
