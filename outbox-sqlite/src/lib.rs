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
//! The helpers also queue for the store's turn to write, with every write
//! of the store (claims, results, heartbeats, the periodic moves), so the
//! process's writers take the lock one after another instead of polling
//! for it (SQLite's busy handler sleeps up to 100 ms between tries). A
//! transaction of your own joins the queue with
//! [`SqliteStore::write_turn`](diesel_outbox_sql::SqlStore::write_turn),
//! taken once you hold its connection:
//!
//! ```no_run
//! # use diesel_outbox_sqlite::{AsyncSqliteConnection, SqliteStore, outbox::{Store, Task}};
//! # async fn demo(store: SqliteStore, conn: &mut AsyncSqliteConnection) -> anyhow::Result<()> {
//! let turn = store.write_turn().await?;
//! conn.immediate_transaction::<_, anyhow::Error, _>(async |conn| {
//!     store.enqueue(conn, Task::new("order.created", 1, "{}")).await?;
//!     Ok(())
//! })
//! .await?;
//! drop(turn);
//! # Ok(())
//! # }
//! ```
//!
//! A wait for the turn lasts at most [`BUSY_TIMEOUT`], as a wait for the
//! lock does; past it the helpers fail as a busy lock does (`database is
//! locked`), and a store write with a retryable `LockTimeout`. A store
//! write called inside a transaction that holds the turn (one of the
//! helpers', or an inbox handler's) can never have it, so it fails after
//! those 5 s: send after the transaction, never inside it.
//!
//! Why `IMMEDIATE`: a plain (deferred) transaction starts as a reader and
//! becomes a writer at its first write; if another connection wrote in
//! between, SQLite refuses the upgrade at once with `SQLITE_BUSY` (waiting
//! could deadlock), and the whole transaction must be run again. `BEGIN
//! IMMEDIATE` takes the write lock first, waiting for it under the
//! connection's busy timeout, so the body never has to upgrade. Dropped
//! mid-way, a [`transaction`] leaves its connection holding the write lock
//! until the connection is dropped; [`transaction_pooled`] closes its
//! connection at once.
//!
//! # Claims without `SKIP LOCKED`
//!
//! Every claim, completion write and periodic move is one statement, or one
//! short `BEGIN IMMEDIATE` transaction when it takes several (a claim by id,
//! a completion that lets an ordering key move on, a discard), on a pooled
//! connection: it holds the database's write lock for that long, never while
//! a handler runs. The writers of one process (clones of one [`SqliteStore`]
//! and the [`transaction`] helpers on it) queue for their turn in order;
//! writers in other processes on the same file wait under the busy timeout. Per-key ordering needs nothing more: whoever
//! writes is alone. The connection settings behind this are in
//! [`connection`], the statements in `statements.rs`.
//!
//! # What SQLite is for
//!
//! One host: a service that keeps its data in a SQLite file, embedded and
//! edge applications, demos, and tests (`diesel-outbox-testkit`'s `SqliteTestDb`).
//! Not services on several hosts, nor a network file system, nor more
//! commits than one writer at a time can make (each waits for `fsync`):
//! there, use PostgreSQL. [operations.md](https://github.com/outbox-rs/outbox/blob/main/docs/operations.md) says more.
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

pub mod connection;
mod dialect;
mod insert;
mod migration_lock;
#[cfg(test)]
mod plans;
mod statements;
mod tables;
pub mod timestamp;

pub use tables::{TaskRow, schema};

/// The backend-free core, re-exported so one dependency is enough.
pub use diesel_outbox_core as outbox;

pub use connection::{AsyncSqliteConnection, BUSY_TIMEOUT, MMAP_SIZE, establish, manager_config};
pub use dialect::Sqlite;
pub use diesel_outbox_sql::{MigrationSql, Names, transaction, transaction_pooled};

/// The outbox on a SQLite database file, over a deadpool pool of
/// diesel-async connections (SQLite built in, no system library): the
/// shared [`SqlStore`](diesel_outbox_sql::SqlStore) on the [`Sqlite`]
/// dialect.
///
/// `enqueue` runs on the caller's connection inside the caller's
/// transaction. Claims, completion writes and the periodic moves each take
/// one statement, or one short `BEGIN IMMEDIATE` transaction when they need
/// several, on a connection from the pool: SQLite has one writer at a time,
/// so a claim holds the database's write lock for the few statements it
/// takes instead of locking rows, and no lock is held while a handler runs.
/// Several relays, in one process or in several on the same file, therefore
/// claim side by side, each waiting its turn for the write lock (see
/// [`connection`] for the settings that make this safe).
///
/// [`SqliteStore::connect`](diesel_outbox_sql::SqlStore::connect) opens
/// each connection with [`establish`]; a pool of your own should use
/// [`manager_config`]. Build one store per database file and clone it:
/// clones share its write turn and its prepared insert shapes.
pub type SqliteStore = diesel_outbox_sql::SqlStore<Sqlite>;

diesel_outbox_sql::embed_outbox_migrations! {
    crate = "diesel_outbox_sqlite",
    backend = diesel::sqlite::Sqlite,
    kind = diesel_outbox_sql::BackendKind::Sqlite,
    lock = migration_lock::ImmediateTransaction::default(),
    lock_doc = "Safe to call from many processes at once: the run holds SQLite's \
        write lock from a `BEGIN IMMEDIATE` to its commit, and SQLite has one \
        writer per file, so concurrent runs take turns and the later ones find \
        nothing pending; a migration that fails leaves nothing of itself behind \
        (DDL is transactional in SQLite, and each migration runs in a savepoint). \
        The wait is bounded by the connection's busy timeout \
        ([`BUSY_TIMEOUT`](crate::BUSY_TIMEOUT) when it has none).",
}

/// The crate's README, whose examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
