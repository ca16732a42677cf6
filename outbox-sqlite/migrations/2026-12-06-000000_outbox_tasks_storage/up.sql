-- PostgreSQL's storage settings for the queue's tables (a dedup_key index without NULLs, and
-- autovacuum for tables that churn). SQLite reuses a deleted row's space without vacuum, and
-- changing the column's UNIQUE constraint would mean rebuilding the table, so nothing changes
-- here; the statement only records this version, which every backend shares.
SELECT 1;
