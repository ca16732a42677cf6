-- Facts about this outbox, one row each. `outbox_id` names the outbox apart from every other:
-- 128 random bits written once, here, when the migration is applied. The worker hands it to
-- handlers with each delivery (`Delivery::message_id` is `<outbox_id>:<task id>`), so two
-- services publishing into one stream or inbox never give two different tasks one message id.
-- A copy of the database file carries the same id: give the copy its own with `UPDATE
-- outbox_meta SET value = lower(hex(randomblob(16))) WHERE name = 'outbox_id'` before it
-- publishes anywhere the original does.
CREATE TABLE outbox_meta (
    name  TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO outbox_meta (name, value) VALUES ('outbox_id', lower(hex(randomblob(16))));
