//! The transactional outbox on PostgreSQL, with diesel-async.
//!
//! Enqueue a task in the same transaction as your business rows; after commit,
//! send it; anything that fails is retried by a later round, on one instance
//! or many, and nothing committed is ever lost.
//!
//! ```no_run
//! use diesel_async::{AsyncConnection, AsyncPgConnection};
//! use diesel_outbox_postgres::{run_migrations, transaction, PgStore};
//! use diesel_outbox_postgres::outbox::{handler_fn, Delivery, Registry, Task, Worker};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let url = "postgres://postgres@127.0.0.1:5432/shop";
//! // Once, at start-up or in a deploy step (`outbox migrate` does the same):
//! run_migrations(AsyncPgConnection::establish(url).await?).await?;
//!
//! let registry = Registry::builder()
//!     .handler("order.created", 1, handler_fn(|delivery: Delivery| async move {
//!         println!("publish order {}", delivery.id);
//!         Ok(())
//!     }))
//!     .build()?;
//! let worker = Worker::new(PgStore::connect(url, 8)?, registry)?;
//!
//! // The business rows and the task in one transaction, sent after commit:
//! let mut conn = AsyncPgConnection::establish(url).await?;
//! transaction(&worker, &mut conn, async |mut tx| {
//!     // ... insert the order row with diesel on tx.conn() ...
//!     tx.enqueue(Task::json("order.created", 1, &serde_json::json!({ "order": 42 }))?).await?;
//!     anyhow::Ok(())
//! })
//! .await?; // committed, then sent; a failure is retried later
//!
//! // Elsewhere, periodically, on any number of instances (or run a `Relay`):
//! worker.retry_pending(100).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The guide: [getting started](https://github.com/outbox-rs/outbox/blob/main/docs/getting-started.md),
//! [semantics](https://github.com/outbox-rs/outbox/blob/main/docs/semantics.md),
//! [operations](https://github.com/outbox-rs/outbox/blob/main/docs/operations.md).
//!
//! The table, its indexes and their reasons are in `migrations/`; apply them
//! with [`run_migrations`] (or `outbox migrate`, the operator command), or take their SQL from
//! [`migration_sql`] into a migrations folder of your own. Times are
//! `TIMESTAMPTZ(6)` instants on the database clock (see [`timestamp`]).
//! Every statement the store runs is in `statements.rs`.

mod batch_insert;
mod connection;
mod dialect;
mod insert;
mod listen;
mod migration_lock;
#[cfg(test)]
mod plans;
mod statements;
mod tables;
pub mod timestamp;

pub use tables::{TaskRow, schema};

/// The backend-free core, re-exported so one dependency is enough.
pub use diesel_outbox_core as outbox;

pub use connection::establish;
pub use dialect::Postgres;
pub use diesel_outbox_sql::{MigrationSql, Names, transaction, transaction_pooled};
pub use listen::CHANNEL;

/// The outbox on PostgreSQL, over a deadpool pool of diesel-async
/// connections: the shared [`SqlStore`](diesel_outbox_sql::SqlStore) on the
/// [`Postgres`] dialect.
///
/// `enqueue` runs on the caller's connection inside the caller's
/// transaction; claims and completion writes take short-lived connections
/// from the pool and never hold a row lock while a handler runs. Opt in to
/// wake-ups at commit with
/// [`with_notify`](diesel_outbox_sql::SqlStore::with_notify).
pub type PgStore = diesel_outbox_sql::SqlStore<Postgres>;

diesel_outbox_sql::embed_outbox_migrations! {
    crate = "diesel_outbox_postgres",
    backend = diesel::pg::Pg,
    kind = diesel_outbox_sql::BackendKind::Postgres,
    lock = migration_lock::AdvisoryLock,
    lock_doc = "Safe to call from many instances at once: the run holds a session \
        advisory lock (`pg_advisory_lock`, with a fixed key derived from the name \
        `outbox migrations`), so concurrent runs on one database take turns and \
        the later ones find nothing pending. The wait is bounded only by the \
        session's `lock_timeout`.",
}

/// The crate's README, whose examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
