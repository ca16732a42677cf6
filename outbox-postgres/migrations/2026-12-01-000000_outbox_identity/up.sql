-- Facts about this outbox, one row each. `outbox_id` names the outbox apart from every other:
-- 128 random bits written once, here, by the database that applies the migration. The worker
-- hands it to handlers with each delivery (`Delivery::message_id` is `<outbox_id>:<task id>`), so
-- two services publishing into one stream or inbox never give two different tasks one message id.
-- A copy of the database (a restored backup, a cloned staging copy) carries the same id: give the
-- copy its own with `UPDATE outbox_meta SET value = replace(gen_random_uuid()::text, '-', '')
-- WHERE name = 'outbox_id'` before it publishes anywhere the original does.
CREATE TABLE outbox_meta (
    name  TEXT COLLATE "C" PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO outbox_meta (name, value) VALUES ('outbox_id', replace(gen_random_uuid()::text, '-', ''));
