//! The outbox on SQL databases, written once: [`SqlStore`] implements the
//! core's `Store`, `Maintenance` and `Inbox` over any [`Dialect`], the
//! statements a backend crate provides (`diesel-outbox-postgres`,
//! `diesel-outbox-mysql`, `diesel-outbox-sqlite`). Here too: the
//! [`flows`] every backend shares, migrations on any runtime under a
//! session lock, the caller's [`transaction`] helpers, pools, and the
//! classification of diesel and pool errors into
//! `diesel_outbox_core::Error::Database`, and [`BackendKind`], the backend a
//! database URL names.
//!
//! Backend crates re-export what users need; depend on one of them rather
//! than on this crate.
//!
//! ```
//! use std::time::Duration;
//!
//! assert_eq!(diesel_outbox_sql::micros(Duration::from_millis(3)), 3_000);
//! assert_eq!(diesel_outbox_sql::micros(Duration::MAX), i64::MAX);
//! ```

mod backend;
mod backend_kind;
mod cached;
mod close_unless_released;
mod columns;
mod connect_failure;
mod dialect;
mod embed;
mod error;
pub mod flows;
mod identity;
mod migrate;
mod migration_lock;
mod migration_sql;
mod names;
mod optional_fields;
mod pool;
mod pooled;
mod prepared_once;
pub mod rows;
mod schema;
mod store;
mod store_transaction;
mod transaction;
mod write_turn;

pub use backend::SqlBackend;
pub use backend_kind::{BackendKind, UnknownBackend, UnsupportedUrl};
pub use cached::{CachedQuery, TypedQuery, cached, uncached};
pub use close_unless_released::CloseUnlessReleased;
pub use columns::{listed_columns, selected_columns};
pub use connect_failure::{ConnectFailed, connecting_to, target_of};
pub use dialect::{Dialect, Inserted, KeyCounts, ReadRow, Transact, not_provided, transact};
pub use embed::check_migration_sql;
pub use error::{
    is_missing_table, mysql_connection_error, mysql_error, mysql_pool_error,
    postgres_connection_error, postgres_error, postgres_pool_error, sqlite_connection_error,
    sqlite_error, sqlite_pool_error,
};
pub use flows::keys::tally;
pub use identity::{MetaValue, OUTBOX_ID_SQL, outbox_id, read_outbox_id};
pub use migrate::{revert_migrations, run_migrations};
pub use migration_lock::{MigrationConnection, MigrationLock};
pub use migration_sql::{MigrationSql, NamedMigrations};
pub use names::{
    MAX_SCHEMA_AND_PREFIX_BYTES, MAX_TABLE_PREFIX_BYTES, Names, Sql, TABLES, unrenamed_names,
};
pub use optional_fields::optional_fields;
pub use pool::build_pool;
pub use pooled::with_conn;
pub use prepared_once::{PREPARED_PER_FAMILY, PreparedOnce};
pub use schema::{as_is, json_text, utf8_key};
pub use store::{Notify, SqlStore};
pub use store_transaction::{BodyError, TxError};
pub use transaction::{
    AbandonGuard, SqlBacked, require_transaction, transaction, transaction_pooled,
};
pub use write_turn::{WriteTurn, WriteTurnGuard};

/// Microseconds in `duration`, saturating, for interval arithmetic in SQL.
pub fn micros(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}
