//! diesel-async glue shared by the outbox's database backends
//! (`diesel-outbox-postgres`, `diesel-outbox-mysql`, `diesel-outbox-sqlite`): migrations on any runtime under a
//! session lock, and their SQL as text; the transaction check of `enqueue`,
//! enqueue-then-send transactions, pools; and the classification of diesel
//! and pool errors into `diesel_outbox_core::Error::Database`.
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

mod cached;
mod close_unless_released;
mod columns;
mod error;
mod migrate;
mod migration_lock;
mod migration_sql;
mod optional_fields;
mod pool;
mod prepared_once;
mod store_transaction;
mod transaction;

pub use cached::{CachedQuery, TypedQuery, cached, uncached};
pub use close_unless_released::CloseUnlessReleased;
pub use columns::{listed_columns, selected_columns};
pub use error::{
    mysql_error, mysql_pool_error, postgres_error, postgres_pool_error, sqlite_connection_error,
    sqlite_error, sqlite_pool_error,
};
pub use migrate::{revert_migrations, run_migrations};
pub use migration_lock::{MigrationConnection, MigrationLock};
pub use migration_sql::MigrationSql;
pub use optional_fields::optional_fields;
pub use pool::build_pool;
pub use prepared_once::{PREPARED_PER_FAMILY, PreparedOnce};
pub use store_transaction::{BodyError, TxError};
pub use transaction::{require_transaction, transaction};

/// Microseconds in `duration`, saturating, for interval arithmetic in SQL.
pub fn micros(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}
