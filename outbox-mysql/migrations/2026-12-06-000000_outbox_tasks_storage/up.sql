-- PostgreSQL's storage settings for the queue's tables (a dedup_key index without NULLs, and
-- autovacuum for tables that churn). MySQL and MariaDB have no partial indexes, and InnoDB's
-- purge threads remove old row versions without per-table settings, so nothing changes here;
-- the statement only records this version, which every backend shares.
DO 0;
