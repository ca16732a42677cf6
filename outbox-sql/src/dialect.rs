//! [`Dialect`]: what a database backend provides, and nothing more: its
//! connection, how it classifies errors, the kind of write transaction it
//! uses, and the statements of each step, one primitive each. Every flow of
//! the outbox (enqueue, claims, completions, ordering keys, discards, the
//! inbox) is written once above it, in [`SqlStore`](crate::SqlStore) and
//! [`flows`](crate::flows), and decides through
//! [`transition`](diesel_outbox_core::transition).
//!
//! A primitive runs one statement, or the few that make one step (a lock
//! and the update it guards), on the connection it is given; it never opens
//! a transaction of its own unless it says so. Where a backend decides a
//! transition inside one statement for speed (PostgreSQL's claims, the
//! periodic moves), that statement is the primitive, and the conformance
//! suite's model check proves it equal to the transition function it stands
//! for.

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    time::Duration,
};

use crate::{CachedQuery, Names, Sql, SqlBackend, TxError, rows::KeyCount};
use chrono::{DateTime, Utc};
use deadpool::managed::{Manager, Pool};
use diesel::{QueryableByName, result::Error as DieselError};
use diesel_async::{
    AsyncConnection, SimpleAsyncConnection,
    pooled_connection::{PoolError as ConnectError, PoolableConnection, deadpool::PoolError},
};
use diesel_outbox_core::{
    Ages, BatchRequest, ClaimOutcome, ClaimedTask, Error, Heartbeat, LeaseRequest, OutboxId,
    Record, RelaySeen, Rescued, Result, Stats, Task, TaskId, TxBody, UnreadableRow, Wakeups,
    transition::Completion,
};

/// A row as a primitive read it: the task, or what is known of a row that
/// cannot be read as one.
pub type ReadRow = std::result::Result<Record, UnreadableRow>;

/// Counts of tasks per ordering key, in key order (the order every writer
/// takes keys' rows in): see [`tally`](crate::tally).
pub type KeyCounts<'k> = BTreeMap<&'k str, i64>;

/// What an insert did with one task: inserted it, or found its `dedup_key`
/// held by the task it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// A new row.
    New(TaskId),
    /// Nothing inserted: the task already holding the `dedup_key`.
    Existing(TaskId),
}

impl Inserted {
    /// The task's id either way.
    pub fn id(self) -> TaskId {
        match self {
            Self::New(id) | Self::Existing(id) => id,
        }
    }
}

/// The write transaction of a backend's connection: `BEGIN IMMEDIATE` on
/// SQLite, a plain transaction elsewhere. Implemented by each backend for
/// its connection type (`D` is the backend's [`Dialect`]); the store's own
/// transactions ([`transact`]) and the caller's `transaction` helpers both
/// open this kind.
pub trait Transact<D>: AsyncConnection {
    /// Runs `body` in a write transaction on this connection; it rolls
    /// back when the body fails.
    fn write_transaction<'a, R, E, F>(
        &'a mut self,
        body: F,
    ) -> impl Future<Output = std::result::Result<R, E>> + Send + 'a
    where
        F: for<'r> AsyncFnOnce(&'r mut Self) -> std::result::Result<R, E>
            + for<'r> TxBody<&'r mut Self, std::result::Result<R, E>, Fut: Send>
            + Send
            + 'a,
        E: From<DieselError> + Send + 'a,
        R: Send + 'a;
}

/// Implements [`Transact`] for a backend's connection with the connection's
/// own transaction method: `transact_with!(Sqlite, AsyncSqliteConnection,
/// immediate_transaction)` opens every write transaction with `BEGIN
/// IMMEDIATE`. For backend crates.
#[macro_export]
macro_rules! transact_with {
    ($(#[$meta:meta])* $dialect:ty, $conn:ty, $method:ident) => {
        $(#[$meta])*
        impl $crate::Transact<$dialect> for $conn {
            #[allow(
                clippy::manual_async_fn,
                reason = "the future must be Send for every caller (rust-lang/rust#100013)"
            )]
            fn write_transaction<'a, R, E, F>(
                &'a mut self,
                body: F,
            ) -> impl ::std::future::Future<Output = ::std::result::Result<R, E>> + Send + 'a
            where
                F: for<'r> AsyncFnOnce(&'r mut Self) -> ::std::result::Result<R, E>
                    + for<'r> ::diesel_outbox_core::TxBody<
                        &'r mut Self,
                        ::std::result::Result<R, E>,
                        Fut: Send,
                    > + Send
                    + 'a,
                E: From<::diesel::result::Error> + Send + 'a,
                R: Send + 'a,
            {
                #[allow(unused_imports, reason = "the method may be the connection's own")]
                use ::diesel_async::AsyncConnection as _;
                self.$method::<R, E, _>(body)
            }
        }
    };
}

/// Runs `body` in the store's write transaction on `conn`, one of its
/// pool's (never the caller's): READ COMMITTED on MySQL, `BEGIN IMMEDIATE`
/// on SQLite ([`Transact`] after [`Dialect::before_write`]). It rolls back
/// when the body fails.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would leave its future's Send to inference at each caller (rust-lang/rust#100013)"
)]
pub fn transact<'a, D, T, F>(
    dialect: &'a D,
    conn: &'a mut D::Conn,
    body: F,
) -> impl Future<Output = Result<T>> + Send + 'a
where
    D: Dialect,
    T: Send + 'a,
    F: for<'r> AsyncFnOnce(&'r mut D::Conn) -> Result<T> + Send + 'a,
    for<'r> F: TxBody<&'r mut D::Conn, Result<T>, Fut: Send>,
{
    async move {
        dialect.before_write(conn).await?;
        conn.write_transaction::<T, TxError, _>(async |conn| {
            body(conn).await.map_err(TxError::Outbox)
        })
        .await
        .map_err(|error| error.into_error(D::error))
    }
}

/// What a primitive reports when the dialect does not have it because it
/// overrides the flow that would call it (PostgreSQL's single-statement
/// claims, say).
pub fn not_provided(what: &str) -> Error {
    Error::database(format!("this backend does not provide `{what}`"))
}

/// A database backend of the outbox: its connection, how it classifies
/// errors, how its store writes, and the statements of each step, one
/// primitive each. Implemented by `diesel_outbox_postgres::Postgres`,
/// `diesel_outbox_mysql::Mysql` and `diesel_outbox_sqlite::Sqlite`.
///
/// Every flow of the outbox (enqueue, claims, completions, ordering keys,
/// discards, the inbox) is written once above it, in
/// [`SqlStore`](crate::SqlStore) and [`flows`](crate::flows), and decides
/// through [`transition`](diesel_outbox_core::transition). A primitive runs
/// one statement, or the few that make one step (a lock and the update it
/// guards), on the connection it is given, inside the transaction its
/// flow opened. The two claim steps are flows with a default
/// ([`claim_one`](Self::claim_one), [`claim_due`](Self::claim_due): lock,
/// decide, write, in a transaction of their own) that a backend may replace
/// with one statement. Where a statement applies a rule itself for speed
/// (PostgreSQL's claims, SQLite's batch claim, the fenced completions, the
/// periodic moves, unblocking a key, requeue and discard), its `WHERE`
/// clause re-checks the rule, and the conformance suite's model check
/// compares the rows it leaves with the transition functions.
///
/// The state a dialect carries belongs to one store and its clones
/// (PostgreSQL's `NOTIFY` setting, MySQL's server facts and prepared insert
/// shapes, SQLite's write turn): cloning it must be cheap and share it.
pub trait Dialect: Clone + Send + Sync + Sized + 'static {
    /// The backend's diesel backend.
    type Backend: SqlBackend;

    /// The backend's diesel-async connection.
    type Conn: AsyncConnection<Backend = Self::Backend>
        + SimpleAsyncConnection
        + PoolableConnection
        + Transact<Self>
        + Send
        + 'static;

    /// The pool's connection manager: diesel-async's
    /// `AsyncDieselConnectionManager<Self::Conn>`.
    type Manager: Manager<Type = Self::Conn, Error = ConnectError> + Send + Sync;

    /// A validated task in the backend's column form, ready to insert.
    type Row: Send + Sync;

    /// A row of `outbox_tasks` as the backend reads it (`SELECT *`).
    type TaskRow: QueryableByName<Self::Backend> + Send + 'static;

    /// The backend's name in messages: `PostgreSQL`, `MySQL`, `SQLite`.
    const NAME: &'static str;

    /// A literal of the payload column's type holding no bytes, which a
    /// listing without payloads reads in the payload's place.
    const NO_BYTES: &'static str;

    // ------------------------------------------------------------ setup

    /// A pool of up to `max_size` connections to `database_url` set up as
    /// the backend wants them, and the dialect for a store on it.
    fn connect(database_url: &str, max_size: usize) -> Result<(Pool<Self::Manager>, Self)>;

    /// The dialect for a store on a pool the application built.
    fn for_pool(pool: &Pool<Self::Manager>) -> Self;

    /// The names of the outbox's tables this dialect's statements use.
    fn names(&self) -> &Names;

    /// Makes this dialect's statements use `names` from now on, as its
    /// backend writes them ([`Names::for_backend`], whose error this
    /// returns, leaving the names as they were); state kept for the names it
    /// used before (prepared shapes) is dropped.
    fn set_names(&mut self, names: Names) -> Result<()>;

    /// The statement `template` (written with the default names) with this
    /// dialect's [`names`](Dialect::names): see [`Names::sql`].
    fn sql(&self, template: &'static str) -> Sql {
        self.names().sql(template)
    }

    /// Classifies an error of the backend's connection.
    fn error(error: DieselError) -> Error;

    /// Classifies an error of the backend's pool.
    fn pool_error(error: PoolError) -> Error;

    // ----------------------------------------------------- transactions

    /// What the store does on one of its connections before each of its
    /// own write transactions (MySQL sets READ COMMITTED on a pool it did
    /// not build); nothing by default. An inbox transaction is the
    /// consumer's and keeps its pool's isolation.
    fn before_write(&self, conn: &mut Self::Conn) -> impl Future<Output = Result<()>> + Send {
        let _ = conn;
        async { Ok(()) }
    }

    /// The turn a process's writes take, in the order they arrive, when
    /// the database has one writer at a time (SQLite); `None` elsewhere.
    /// The store's writes and the caller's `transaction` helpers take it.
    fn write_turn(&self) -> Option<&crate::WriteTurn> {
        None
    }

    /// What a store does on a connection before its first claim (MySQL
    /// reads the server's facts once); nothing by default.
    fn ready(&self, conn: &mut Self::Conn) -> impl Future<Output = Result<()>> + Send {
        let _ = conn;
        async { Ok(()) }
    }

    // ---------------------------------------------------------- enqueue

    /// Checks `task` completely, the column range of its instants included,
    /// and puts it in column form.
    fn prepare(&self, task: Task) -> Result<Self::Row>;

    /// The task a row holds.
    fn task(row: &Self::Row) -> &Task;

    /// Inserts the first of `rows` (at least one, as many as the backend
    /// puts in one statement), each stored as
    /// [`transition::enqueued`](diesel_outbox_core::transition::enqueued)
    /// says for its `heads` entry, in the caller's transaction; returns what
    /// happened to each, in order. A `dedup_key` already held inserts
    /// nothing and answers the holder. A dialect that wakes relays at
    /// commit (PostgreSQL's `NOTIFY`) queues the wake-up here too, in the
    /// insert's own statement where it can.
    fn insert(
        &self,
        conn: &mut Self::Conn,
        rows: &[Self::Row],
        heads: &[bool],
    ) -> impl Future<Output = Result<Vec<Inserted>>> + Send;

    // ------------------------------------------------------------ reads

    /// The task `row` holds, or what is known of it when it cannot be read
    /// as one.
    fn decode(row: Self::TaskRow) -> ReadRow;

    /// Binds the instant `at` as the backend's time columns hold it; an
    /// error naming `field` when they cannot.
    fn bind_instant<'f>(
        query: CachedQuery<'f, Self::Backend>,
        field: &'static str,
        at: DateTime<Utc>,
    ) -> Result<CachedQuery<'f, Self::Backend>>;

    /// Counts per status (the ages left unset: [`ages`](Self::ages)).
    fn stats(&self, conn: &mut Self::Conn) -> impl Future<Output = Result<Stats>> + Send;

    /// The ages of the task due longest and of the running task whose lease
    /// ends first, each one index read.
    fn ages(&self, conn: &mut Self::Conn) -> impl Future<Output = Result<Ages>> + Send;

    /// Writes `beat` as its relay's row of `outbox_relays` (inserted, or
    /// replacing the one there), and deletes the rows whose heartbeats
    /// stopped a day ago.
    fn beat(
        &self,
        conn: &mut Self::Conn,
        beat: &Heartbeat,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Deletes the row of the relay whose worker is `owner`.
    fn forget_relay(
        &self,
        conn: &mut Self::Conn,
        owner: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The rows of `outbox_relays` whose heartbeats stopped less than a day
    /// ago, by owner.
    fn relays(&self, conn: &mut Self::Conn) -> impl Future<Output = Result<Vec<RelaySeen>>> + Send;

    /// The outbox's own id, from `outbox_meta` (see
    /// [`read_outbox_id`](crate::read_outbox_id)).
    fn outbox_id(&self, conn: &mut Self::Conn) -> impl Future<Output = Result<OutboxId>> + Send;

    /// How long until the next waiting task is due.
    fn next_due(
        &self,
        conn: &mut Self::Conn,
    ) -> impl Future<Output = Result<Option<Duration>>> + Send;

    // ----------------------------------------------------------- claims

    /// Claims task `id` for `lease`, or says why not. By default the flow
    /// [`claim::one`](crate::flows::claim::one): lock the row, decide with
    /// [`transition::availability`](diesel_outbox_core::transition::availability),
    /// write the decision.
    fn claim_one(
        &self,
        conn: &mut Self::Conn,
        id: TaskId,
        lease: &LeaseRequest,
    ) -> impl Future<Output = Result<ClaimOutcome>> + Send {
        crate::flows::claim::one(self, conn, id, lease)
    }

    /// Claims up to `request.limit` available tasks after its cursor, in id
    /// order, failing expired ones. By default the flow
    /// [`claim::due`](crate::flows::claim::due): lock the due rows, decide
    /// each, write the leases and the expiries. A backend that claims in
    /// one statement returns the columns of
    /// [`claim_columns!`](crate::claim_columns) only.
    fn claim_due(
        &self,
        conn: &mut Self::Conn,
        request: &BatchRequest,
    ) -> impl Future<Output = Result<Vec<ClaimedTask>>> + Send {
        crate::flows::claim::due(self, conn, request)
    }

    /// Locks row `id` for the claim by id; with the database's time.
    fn lock_task(
        &self,
        conn: &mut Self::Conn,
        id: TaskId,
    ) -> impl Future<Output = Result<Option<(ReadRow, DateTime<Utc>)>>> + Send {
        let _ = (conn, id);
        async { Err(not_provided("lock_task")) }
    }

    /// Locks the available rows `request` asks for, skipping locked ones,
    /// each with the database's time.
    fn lock_due(
        &self,
        conn: &mut Self::Conn,
        request: &BatchRequest,
    ) -> impl Future<Output = Result<Vec<(ReadRow, DateTime<Utc>)>>> + Send {
        let _ = (conn, request);
        async { Err(not_provided("lock_due")) }
    }

    /// Leases the locked rows `ids` to `lease` as of `now`
    /// ([`transition::claim`](diesel_outbox_core::transition::claim)).
    fn set_leases(
        &self,
        conn: &mut Self::Conn,
        ids: &[TaskId],
        lease: &LeaseRequest,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (conn, ids, lease, now);
        async { Err(not_provided("set_leases")) }
    }

    /// Fails the locked, expired rows `ids` as of `now`
    /// ([`transition::expire`](diesel_outbox_core::transition::expire)).
    fn expire(
        &self,
        conn: &mut Self::Conn,
        ids: &[TaskId],
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (conn, ids, now);
        async { Err(not_provided("expire")) }
    }

    /// Fails row `id`, which cannot be read as a task, with `reason`, if it
    /// is claimable at `now`; whether it did.
    fn fail_unreadable(
        &self,
        conn: &mut Self::Conn,
        id: TaskId,
        reason: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send {
        let _ = (conn, id, reason, now);
        async { Err(not_provided("fail_unreadable")) }
    }

    // ------------------------------------------------------- completion

    /// Applies each result under its fence
    /// ([`transition::complete`](diesel_outbox_core::transition::complete));
    /// returns the `(id, attempt)` of the claims that applied. Keys are left
    /// to the flow, in the same transaction. Runs inside the store's write
    /// transaction whenever its answer must be exact (a backend may lock the
    /// rows it reads to know).
    fn apply_completions(
        &self,
        conn: &mut Self::Conn,
        completions: &[Completion],
    ) -> impl Future<Output = Result<Vec<(TaskId, i64)>>> + Send;

    /// Applies the results like [`apply_completions`](Self::apply_completions)
    /// and says only how many applied: for a backend whose update cannot
    /// tell which rows it changed (MySQL), without the locking read that
    /// would take. By default the length of `apply_completions`.
    fn apply_counted(
        &self,
        conn: &mut Self::Conn,
        completions: &[Completion],
    ) -> impl Future<Output = Result<u64>> + Send {
        async move { Ok(self.apply_completions(conn, completions).await?.len() as u64) }
    }

    // ---------------------------------------------------- ordering keys

    /// Adds `counts` new tasks to their keys (never empty), locking each
    /// key's row until the transaction ends; returns each key's count after.
    fn open_keys(
        &self,
        conn: &mut Self::Conn,
        counts: &KeyCounts<'_>,
    ) -> impl Future<Output = Result<Vec<KeyCount>>> + Send;

    /// Takes `counts` finished tasks off their keys (never empty), locking
    /// their rows in key order; returns the count left on each key that has
    /// a row. A key left at zero or below may keep its row with a stale
    /// count (MySQL does not write it): the flow always follows with
    /// [`move_keys_on`](Self::move_keys_on), which drops it.
    fn take_keys(
        &self,
        conn: &mut Self::Conn,
        counts: &KeyCounts<'_>,
    ) -> impl Future<Output = Result<Vec<KeyCount>>> + Send;

    /// Lets the oldest blocked task of each of `next` go, available when due
    /// and waiting otherwise
    /// ([`transition::unblock`](diesel_outbox_core::transition::unblock)),
    /// and drops the rows of `emptied`, keys left with no open task. A fresh
    /// statement after [`take_keys`](Self::take_keys), so it sees every task
    /// committed by the enqueuers that lock waited for.
    fn move_keys_on(
        &self,
        conn: &mut Self::Conn,
        next: &[&str],
        emptied: &[&str],
    ) -> impl Future<Output = Result<()>> + Send;

    // ------------------------------------------------------------ moves

    /// Makes up to `limit` due waiting tasks available
    /// ([`transition::promote`](diesel_outbox_core::transition::promote)).
    fn promote(
        &self,
        conn: &mut Self::Conn,
        limit: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Rescues up to `limit` running tasks whose lease lapsed
    /// ([`transition::rescue`](diesel_outbox_core::transition::rescue)).
    fn rescue(
        &self,
        conn: &mut Self::Conn,
        limit: u32,
    ) -> impl Future<Output = Result<Rescued>> + Send;

    // --------------------------------------------------------- operator

    /// Requeues those of `ids` that are failed
    /// ([`transition::requeue`](diesel_outbox_core::transition::requeue)).
    fn requeue(
        &self,
        conn: &mut Self::Conn,
        ids: &[TaskId],
    ) -> impl Future<Output = Result<u64>> + Send;

    /// The ordering keys whose rows a discard of `ids` locks first, in key
    /// order: their keys on a backend that locks rows (a key never changes,
    /// so it can be read before the transaction that locks it), none where
    /// the write transaction already keeps every other writer out (SQLite).
    fn keys_of(
        &self,
        conn: &mut Self::Conn,
        ids: &[TaskId],
    ) -> impl Future<Output = Result<BTreeSet<String>>> + Send;

    /// Locks the rows of `keys`, in key order.
    fn lock_keys(
        &self,
        conn: &mut Self::Conn,
        keys: &BTreeSet<String>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Discards those of `ids` that may be
    /// ([`transition::discard`](diesel_outbox_core::transition::discard)),
    /// skipping rows another transaction holds; returns the status each
    /// discarded one had and its key (`None` for a key that is not UTF-8,
    /// which no count of ours holds).
    fn discard_rows(
        &self,
        conn: &mut Self::Conn,
        ids: &[TaskId],
    ) -> impl Future<Output = Result<Vec<(String, Option<String>)>>> + Send;

    /// Deletes up to `limit` tasks finished more than `older_than` ago,
    /// never one that holds its key.
    fn purge(
        &self,
        conn: &mut Self::Conn,
        older_than: Duration,
        limit: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    // ------------------------------------------------------------ inbox

    /// Records `message_id` for `consumer` in the caller's transaction,
    /// unless it is there already; returns the rows inserted (1 or 0).
    fn record(
        &self,
        conn: &mut Self::Conn,
        consumer: &str,
        message_id: &str,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes up to `limit` inbox records applied more than `older_than` ago.
    fn purge_inbox(
        &self,
        conn: &mut Self::Conn,
        older_than: Duration,
        limit: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    // --------------------------------------------------------- wake-ups

    /// A stream of wake-ups at commit, if the store sends them; `None` (the
    /// default) means: poll.
    fn wakeups(
        &self,
        pool: &Pool<Self::Manager>,
    ) -> impl Future<Output = Result<Option<Wakeups>>> + Send {
        let _ = pool;
        async { Ok(None) }
    }
}
