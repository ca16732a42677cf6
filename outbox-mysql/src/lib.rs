//! The transactional outbox on MySQL 8.0.4+ and MariaDB 10.6+, with diesel-async.
//!
//! Enqueue a task in the same transaction as your business rows; after commit,
//! send it; anything that fails is retried by a later round, on one instance
//! or many, and nothing committed is ever lost. The connection is
//! diesel-async's pure-Rust one: no libmysqlclient.
//!
//! ```no_run
//! use diesel_async::{AsyncConnection, AsyncMysqlConnection};
//! use diesel_outbox_mysql::{run_migrations, transaction, MysqlStore};
//! use diesel_outbox_mysql::outbox::{handler_fn, Delivery, Registry, Task, Worker};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let url = "mysql://root@127.0.0.1:3306/shop";
//! run_migrations(AsyncMysqlConnection::establish(url).await?).await?;
//!
//! let registry = Registry::builder()
//!     .handler("order.created", 1, handler_fn(|delivery: Delivery| async move {
//!         println!("publish order {}", delivery.id);
//!         Ok(())
//!     }))
//!     .build()?;
//! let worker = Worker::new(MysqlStore::connect(url, 8)?, registry)?;
//!
//! let mut conn = AsyncMysqlConnection::establish(url).await?;
//! transaction(&worker, &mut conn, async |mut tx| {
//!     // ... insert the order row with diesel on tx.conn() ...
//!     tx.enqueue(Task::json("order.created", 1, &serde_json::json!({ "order": 42 }))?).await?;
//!     anyhow::Ok(())
//! })
//! .await?; // committed, then sent
//!
//! worker.retry_pending(100).await?; // periodically, on any number of instances
//! # Ok(())
//! # }
//! ```
//!
//! # Time
//!
//! Times are `DATETIME(6)` columns holding UTC, and every database-side time
//! comes from `UTC_TIMESTAMP(6)`. `TIMESTAMP(6)` was rejected: it ends in
//! January 2038, within the life of data written today, and it converts
//! through the session `time_zone`, which the application may set to anything.
//! See [`timestamp`] for the range and precision.
//!
//! # Keys
//!
//! `dedup_key` and `ordering_key` are `VARBINARY(255)` columns holding UTF-8,
//! compared byte for byte: `"k"` and `"k "` are different keys. The table's
//! `utf8mb4_bin` collation pads with spaces, and the binary collations that
//! do not are named differently on MySQL and MariaDB.
//!
//! # Ids
//!
//! MySQL has no `RETURNING`: ids come from `LAST_INSERT_ID()` on the caller's
//! connection. `enqueue_many` inserts runs of keyless tasks in one statement
//! only when the server's `innodb_autoinc_lock_mode` (0 or 1) guarantees a
//! statement consecutive ids; otherwise, and for tasks with a `dedup_key`, it
//! inserts row by row. The ids of one statement are the session's
//! `auto_increment_increment` apart (the node count on Galera and other
//! multi-primary setups); the store reads it with `LAST_INSERT_ID()`.

mod connection;
mod dialect;
mod insert;
mod isolation;
mod json_rows;
mod migration_lock;
#[cfg(test)]
mod plans;
mod server;
mod statements;
mod tables;
pub mod timestamp;

pub use tables::{TaskRow, schema};

/// The backend-free core, re-exported so one dependency is enough.
pub use diesel_outbox_core as outbox;

pub use connection::establish;
pub use dialect::Mysql;
pub use diesel_outbox_sql::{MigrationSql, Names, transaction, transaction_pooled};

/// The outbox on MySQL 8.0.4+ or MariaDB 10.6+, over a deadpool pool of
/// diesel-async connections (pure Rust, no libmysqlclient): the shared
/// [`SqlStore`](diesel_outbox_sql::SqlStore) on the [`Mysql`] dialect.
///
/// `enqueue` runs on the caller's connection inside the caller's
/// transaction; claims take short READ COMMITTED transactions from the pool
/// (so no gap lock ever blocks the application's inserts) and no row lock
/// is held while a handler runs.
/// [`MysqlStore::connect`](diesel_outbox_sql::SqlStore::connect) sets each
/// connection to READ COMMITTED once, when it connects; a store over a pool
/// of your own ([`MysqlStore::new`](diesel_outbox_sql::SqlStore::new)) sets
/// it for each of its transactions.
pub type MysqlStore = diesel_outbox_sql::SqlStore<Mysql>;

/// A connection of the pool [`MysqlStore::connect`] builds that was last
/// handed out at least this long ago runs `SELECT 1` before it is handed
/// out again, and is replaced if that fails: what a server restart, a
/// failover or the server's `wait_timeout` closed while it waited never
/// reaches a caller. A connection in use more often than this is handed out
/// as it is; if the server ended its session, the statement fails once
/// with a retryable connection error and the connection is closed.
pub const VERIFY_AFTER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

diesel_outbox_sql::embed_outbox_migrations! {
    crate = "diesel_outbox_mysql",
    backend = diesel::mysql::Mysql,
    kind = diesel_outbox_sql::BackendKind::Mysql,
    lock = migration_lock::UserLock::default(),
    lock_doc = "Safe to call from many instances at once: the run holds the \
        user-level lock `outbox_migrations:<database>` (`GET_LOCK`), so concurrent \
        runs on one database take turns and the later ones find nothing pending. \
        The wait is bounded by the session's `lock_wait_timeout`; when it runs \
        out, the error says so.",
}

/// The crate's README, whose examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
