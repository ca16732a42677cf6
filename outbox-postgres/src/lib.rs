//! The transactional outbox on PostgreSQL, with diesel-async.
//!
//! Enqueue a task in the same transaction as your business rows; after commit,
//! send it; anything that fails is retried by a later round, on one instance
//! or many, and nothing committed is ever lost.
//!
//! ```no_run
//! use diesel_async::{AsyncConnection, AsyncPgConnection};
//! use diesel_outbox_postgres::{run_migrations, PgStore};
//! use diesel_outbox_postgres::outbox::{handler_fn, Delivery, Registry, Store, Task, Worker};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let url = "postgres://postgres@127.0.0.1:5432/shop";
//! run_migrations(AsyncPgConnection::establish(url).await?).await?;
//!
//! let store = PgStore::connect(url, 8)?;
//! let registry = Registry::builder()
//!     .handler("order.created", 1, handler_fn(|delivery: Delivery| async move {
//!         println!("publish order {}", delivery.id);
//!         Ok(())
//!     }))
//!     .build()?;
//! let worker = Worker::new(store.clone(), registry)?;
//!
//! // Enqueue with the store inside your own diesel-async transaction...
//! let mut conn = AsyncPgConnection::establish(url).await?;
//! let id = conn
//!     .transaction::<_, anyhow::Error, _>(async |tx| {
//!         // ... insert the order row with diesel here ...
//!         let task = Task::json("order.created", 1, &serde_json::json!({ "order": 42 }))?;
//!         Ok(store.enqueue(tx, task).await?)
//!     })
//!     .await?;
//! worker.send_async(id); // ...and send after commit; a failure is retried later
//! // (`diesel_outbox_postgres::transaction` does both in one call.)
//!
//! // Elsewhere, periodically, on any number of instances:
//! worker.retry_pending(100).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The table, its indexes and their reasons are in `migrations/`; apply them
//! with [`run_migrations`] (or `cargo xtask migrate`), or take their SQL from
//! [`migration_sql`] into a migrations folder of your own. Times are
//! `TIMESTAMPTZ(6)` instants on the database clock (see [`timestamp`]).

mod batch_insert;
mod claim;
mod complete;
mod discard;
mod enqueue;
#[cfg(test)]
mod explained;
mod inbox;
mod inbox_migrate;
mod keys;
mod listing;
mod maintenance;
mod migrate;
mod migration_lock;
mod moves;
mod query;
mod row;
pub mod schema;
mod store;
mod store_transaction;
pub mod timestamp;
mod transaction;

/// The backend-free core, re-exported so one dependency is enough.
pub use diesel_outbox_core as outbox;

pub use diesel_outbox_sql::MigrationSql;
pub use inbox_migrate::{
    INBOX_MIGRATIONS, inbox_migration_sql, revert_inbox_migrations, run_inbox_migrations,
};
pub use maintenance::CHANNEL;
pub use migrate::{MIGRATIONS, migration_sql, revert_migrations, run_migrations};
pub use store::PgStore;
pub use transaction::transaction;

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
