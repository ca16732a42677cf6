//! The transactional outbox on SQLite, with diesel-async.
//!
//! Enqueue a task in the same transaction as your business rows; after commit,
//! send it; anything that fails is retried by a later round, by relays in one
//! process or in several on the same file, and nothing committed is ever
//! lost. SQLite is compiled into the crate (no system library, no server):
//! the backend for one host, embedded services, and tests.
//!
//! ```
//! use diesel_outbox_sqlite::{establish, run_migrations, transaction, SqliteStore};
//! use diesel_outbox_sqlite::outbox::{handler_fn, Delivery, Registry, Task, Worker};
//!
//! # #[tokio::main]
//! # async fn main() -> anyhow::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("outbox-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # let path = dir.join("shop.db");
//! # let url = path.to_str().unwrap();
//! // let url = "shop.db";
//! run_migrations(establish(url).await?).await?;
//!
//! let registry = Registry::builder()
//!     .handler("order.created", 1, handler_fn(|delivery: Delivery| async move {
//!         println!("publish order {}", delivery.id);
//!         Ok(())
//!     }))
//!     .build()?;
//! let worker = Worker::new(SqliteStore::connect(url, 4)?, registry)?;
//!
//! let mut conn = establish(url).await?;
//! transaction(&worker, &mut conn, async |mut tx| {
//!     // ... insert the order row with diesel on tx.conn() ...
//!     tx.enqueue(Task::json("order.created", 1, &serde_json::json!({ "order": 42 }))?).await?;
//!     anyhow::Ok(())
//! })
//! .await?; // committed, then sent
//!
//! worker.wait_idle().await;
//! worker.retry_pending(100).await?; // periodically, or run a Relay
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! # Transactions
//!
//! SQLite has one writer at a time. Open the transactions that enqueue with
//! `BEGIN IMMEDIATE`: the [`transaction`] helper does, and so does
//! `conn.immediate_transaction(...)`. A plain (deferred) transaction that
//! reads before its first write can be refused at that write with
//! `SQLITE_BUSY` when another connection wrote meanwhile, and must then be
//! run again; one whose first statement is a write (an insert, or the
//! enqueue itself) is safe either way. See [`transaction`] for why.
//!
//! # Claims without `SKIP LOCKED`
//!
//! Every claim, completion write and periodic move is one statement, or one
//! short `BEGIN IMMEDIATE` transaction when it takes several (a claim by id,
//! a completion that lets an ordering key move on, a discard), on a pooled
//! connection: it holds the database's write lock for that long, never while
//! a handler runs. The relays of one process (clones of one [`SqliteStore`])
//! queue for their turn in order; relays in other processes on the same file
//! wait under the busy timeout. Per-key ordering needs nothing more: whoever
//! writes is alone. The connection settings behind this are in
//! [`connection`].
//!
//! # What SQLite is for
//!
//! One host: a service that keeps its data in a SQLite file, embedded and
//! edge applications, demos, and tests (`diesel-outbox-testkit`'s `SqliteTestDb`).
//! Not services on several hosts, nor a network file system, nor more
//! commits than one writer at a time can make (each waits for `fsync`):
//! there, use PostgreSQL. docs/operations.md says more.
//!
//! # Time
//!
//! Times are `INTEGER` microseconds since the Unix epoch in UTC: they sort as
//! numbers, keep microseconds, and do not depend on the process time zone.
//! The clock is the host's, which every process on the file shares. See
//! [`timestamp`] for the reasons and the range.
//!
//! # Runtime
//!
//! Statements run on tokio's blocking pool. Use the multi-thread runtime: a
//! statement future dropped mid-flight (a timeout around a claim, say) waits
//! for its statement with `block_in_place`, which a current-thread runtime
//! does not allow.

mod claim;
mod complete;
pub mod connection;
mod discard;
mod enqueue;
mod inbox;
mod inbox_migrate;
mod keys;
mod listing;
mod maintenance;
mod migrate;
mod migration_lock;
mod moves;
#[cfg(test)]
mod plans;
mod query;
mod row;
pub mod schema;
mod store;
mod store_transaction;
pub mod timestamp;
mod transaction;

/// The backend-free core, re-exported so one dependency is enough.
pub use diesel_outbox_core as outbox;

pub use connection::{AsyncSqliteConnection, BUSY_TIMEOUT, establish};
pub use diesel_outbox_sql::MigrationSql;
pub use inbox_migrate::{
    INBOX_MIGRATIONS, inbox_migration_sql, revert_inbox_migrations, run_inbox_migrations,
};
pub use migrate::{MIGRATIONS, migration_sql, revert_migrations, run_migrations};
pub use store::SqliteStore;
pub use transaction::transaction;
