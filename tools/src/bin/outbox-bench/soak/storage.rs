//! What the outbox's task table weighs on disk as a soak ages it, and what
//! the server tells of its clean-up: dead rows and autovacuum runs on
//! PostgreSQL, the undo history InnoDB has yet to purge on MariaDB/MySQL.

use std::future::Future;

use diesel::{
    QueryableByName,
    query_builder::SqlQuery,
    sql_types::{BigInt, Bool, Nullable, Text},
};
use diesel_async::{RunQueryDsl, methods::LoadQuery};

use crate::raw::Raw;

/// One reading of `outbox_tasks`' storage; a field the backend cannot tell
/// is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, QueryableByName)]
pub(crate) struct Reading {
    /// The table's rows (and, on PostgreSQL, their TOAST), in bytes.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(crate) data_bytes: Option<i64>,
    /// Its indexes, in bytes.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(crate) index_bytes: Option<i64>,
    /// What it holds on disk: the relation's files (PostgreSQL), its
    /// tablespace file (InnoDB), the database file (SQLite).
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(crate) file_bytes: Option<i64>,
    /// Dead row versions not yet vacuumed (PostgreSQL).
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(crate) dead_rows: Option<i64>,
    /// Autovacuum runs on the table since the server's statistics began
    /// (PostgreSQL).
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(crate) autovacuums: Option<i64>,
    /// Undo log records InnoDB has not purged yet, server-wide (the
    /// history list length).
    #[diesel(sql_type = Nullable<BigInt>)]
    pub(crate) history: Option<i64>,
}

/// What the server is set to do about the row versions a write replaces
/// (and, on PostgreSQL, how it writes them out), which decides whether a
/// soak's table can level off.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub(crate) struct Cleanup {
    /// The settings, in words, for the report.
    #[diesel(sql_type = Text)]
    pub(crate) summary: String,
    /// Whether the server removes none (PostgreSQL with `autovacuum` off).
    #[diesel(sql_type = Bool)]
    pub(crate) off: bool,
}

/// A backend whose task table's storage can be read.
pub(crate) trait Storage: Raw {
    /// Reads the storage of the default-named `outbox_tasks`.
    fn storage(&self) -> impl Future<Output = anyhow::Result<Reading>> + Send;

    /// Reads the server's clean-up settings, and the table's own.
    fn cleanup(&self) -> impl Future<Output = anyhow::Result<Cleanup>> + Send;
}

/// The one row `sql` selects, on a connection of its own.
async fn read<B, R>(db: &B, sql: &'static str) -> anyhow::Result<R>
where
    B: Raw,
    R: Send,
    SqlQuery: LoadQuery<'static, B::Conn, R>,
{
    let mut conn = db.connect().await?;
    Ok(diesel::sql_query(sql).get_result(&mut conn).await?)
}

#[cfg(feature = "postgres")]
impl Storage for diesel_outbox_testkit::postgres::PgTestDb {
    async fn storage(&self) -> anyhow::Result<Reading> {
        read(
            self,
            "SELECT pg_table_size(s.relid)::bigint AS data_bytes, \
                    pg_indexes_size(s.relid)::bigint AS index_bytes, \
                    pg_total_relation_size(s.relid)::bigint AS file_bytes, \
                    s.n_dead_tup::bigint AS dead_rows, \
                    s.autovacuum_count::bigint AS autovacuums, \
                    NULL::bigint AS history \
             FROM pg_stat_user_tables s WHERE s.relname = 'outbox_tasks'",
        )
        .await
    }

    async fn cleanup(&self) -> anyhow::Result<Cleanup> {
        read(
            self,
            "SELECT format('autovacuum %s (naptime %s, %s workers, cost limit %s, delay %s); \
                            shared_buffers %s, max_wal_size %s, checkpoint_timeout %s, \
                            wal_compression %s; outbox_tasks: %s', \
                           current_setting('autovacuum'), current_setting('autovacuum_naptime'), \
                           current_setting('autovacuum_max_workers'), \
                           current_setting('autovacuum_vacuum_cost_limit'), \
                           current_setting('autovacuum_vacuum_cost_delay'), \
                           current_setting('shared_buffers'), current_setting('max_wal_size'), \
                           current_setting('checkpoint_timeout'), \
                           current_setting('wal_compression'), \
                           COALESCE((SELECT array_to_string(reloptions, ', ') FROM pg_class \
                                     WHERE oid = 'outbox_tasks'::regclass), \
                                    'the server''s settings')) AS summary, \
                    current_setting('autovacuum') = 'off' AS off",
        )
        .await
    }
}

#[cfg(feature = "mysql")]
impl Storage for diesel_outbox_testkit::mysql::MysqlTestDb {
    async fn storage(&self) -> anyhow::Result<Reading> {
        // DATA_LENGTH and INDEX_LENGTH are InnoDB's estimates, refreshed as
        // its persistent statistics are; the tablespace file is exact.
        read(
            self,
            "SELECT CAST(t.DATA_LENGTH AS SIGNED) AS data_bytes, \
                    CAST(t.INDEX_LENGTH AS SIGNED) AS index_bytes, \
                    (SELECT CAST(f.ALLOCATED_SIZE AS SIGNED) \
                     FROM information_schema.INNODB_SYS_TABLESPACES f \
                     WHERE f.NAME = CONCAT(DATABASE(), '/outbox_tasks')) AS file_bytes, \
                    CAST(NULL AS SIGNED) AS dead_rows, \
                    CAST(NULL AS SIGNED) AS autovacuums, \
                    (SELECT CAST(m.COUNT AS SIGNED) FROM information_schema.INNODB_METRICS m \
                     WHERE m.NAME = 'trx_rseg_history_len') AS history \
             FROM information_schema.TABLES t \
             WHERE t.TABLE_SCHEMA = DATABASE() AND t.TABLE_NAME = 'outbox_tasks'",
        )
        .await
    }

    async fn cleanup(&self) -> anyhow::Result<Cleanup> {
        read(
            self,
            "SELECT CONCAT('InnoDB purge: ', @@innodb_purge_threads, ' threads, ', \
                           'innodb_max_purge_lag ', @@innodb_max_purge_lag, '; ', \
                           'innodb_buffer_pool_size ', @@innodb_buffer_pool_size DIV 1048576, ' MB, ', \
                           'innodb_log_file_size ', @@innodb_log_file_size DIV 1048576, ' MB, ', \
                           'innodb_io_capacity ', @@innodb_io_capacity, ', ', \
                           'innodb_max_dirty_pages_pct_lwm ', ROUND(@@innodb_max_dirty_pages_pct_lwm, 3), ', ', \
                           'innodb_flush_log_at_trx_commit ', @@innodb_flush_log_at_trx_commit) \
                      AS summary, \
                    FALSE AS off",
        )
        .await
    }
}

#[cfg(feature = "sqlite")]
impl Storage for diesel_outbox_testkit::sqlite::SqliteTestDb {
    async fn storage(&self) -> anyhow::Result<Reading> {
        // The bundled SQLite has the dbstat table: pages per table and
        // index.
        read(
            self,
            "SELECT (SELECT SUM(pgsize) FROM dbstat WHERE name = 'outbox_tasks') AS data_bytes, \
                    (SELECT SUM(d.pgsize) FROM dbstat d JOIN sqlite_master m ON m.name = d.name \
                     WHERE m.type = 'index' AND m.tbl_name = 'outbox_tasks') AS index_bytes, \
                    (SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()) \
                      AS file_bytes, \
                    NULL AS dead_rows, NULL AS autovacuums, NULL AS history",
        )
        .await
    }

    async fn cleanup(&self) -> anyhow::Result<Cleanup> {
        // A delete frees its pages to the database's free list at once;
        // later writes reuse them.
        read(
            self,
            "SELECT 'none needed: freed pages are reused (auto_vacuum ' || \
                    (SELECT auto_vacuum FROM pragma_auto_vacuum()) || ')' AS summary, \
                    FALSE AS off",
        )
        .await
    }
}
