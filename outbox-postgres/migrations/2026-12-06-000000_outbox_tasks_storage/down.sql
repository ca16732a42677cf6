ALTER TABLE outbox_ordering_keys RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay
);
ALTER TABLE outbox_tasks RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_vacuum_cost_delay
);
-- DROP INDEX takes no table, so find the index in its table's schema.
DO $$
BEGIN
    EXECUTE format('DROP INDEX %s.outbox_tasks_dedup_key_idx',
                   (SELECT relnamespace::regnamespace FROM pg_class
                    WHERE oid = 'outbox_tasks'::regclass));
END
$$;
ALTER TABLE outbox_tasks ADD CONSTRAINT outbox_tasks_dedup_key_key UNIQUE (dedup_key);
