-- How the queue's tables are stored. Every task is inserted, claimed, completed and, after the
-- retention, deleted; PostgreSQL keeps each row version a write replaces until vacuum removes it.

-- dedup_key is unique among the rows that have one. The column's UNIQUE constraint indexed every
-- row, NULL included, and since a claim or a completion changes the status, which the partial
-- indexes read, PostgreSQL cannot update a row in place: each write added another entry. Most
-- tasks carry no dedup key; now they cost that index nothing. Enqueue's ON CONFLICT names the
-- index's predicate, so it works before this migration and after. The index is built before the
-- constraint goes, so the build blocks writes to the table but not reads.
CREATE UNIQUE INDEX outbox_tasks_dedup_key_idx ON outbox_tasks (dedup_key)
    WHERE dedup_key IS NOT NULL;
ALTER TABLE outbox_tasks DROP CONSTRAINT outbox_tasks_dedup_key_key;

-- Autovacuum for tables that churn: vacuum once a thousand rows plus 1% of the table are dead
-- (the server's default waits for 20%), without the cost-based pauses (by default 2 ms after
-- each small slice of work). With the defaults, dead rows piled up on a busy outbox faster than
-- vacuum removed them; claims then walked past the dead entries of the available-rows index, and
-- the table grew. docs/operations.md says which server settings still matter.
ALTER TABLE outbox_tasks SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE outbox_ordering_keys SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
