DROP TABLE outbox_tasks;
