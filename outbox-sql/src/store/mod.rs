//! [`SqlStore`]: the outbox's store on any [`Dialect`], which implements
//! [`Store`](diesel_outbox_core::Store),
//! [`Maintenance`](diesel_outbox_core::Maintenance) and
//! [`Inbox`](diesel_outbox_core::Inbox) once for every backend.

mod inbox;
mod maintenance;
mod tasks;

use std::sync::Arc;

use deadpool::managed::Pool;
use diesel_outbox_core::{OutboxId, Result, TxBody};

use crate::{Dialect, Names, WriteTurnGuard};

/// The outbox over a deadpool pool of diesel-async connections, on the
/// backend `D` (`diesel_outbox_postgres::PgStore` is `SqlStore<Postgres>`,
/// and so on).
///
/// `enqueue` runs on the caller's connection inside the caller's
/// transaction; everything else takes a short-lived connection from the
/// pool, through one guard ([`with_conn`](crate::with_conn)) that gives it
/// back only once the operation finished, and never holds a row lock while
/// a handler runs. Clones share the pool and the store's state.
pub struct SqlStore<D: Dialect> {
    pool: Pool<D::Manager>,
    dialect: D,
    outbox: Arc<tokio::sync::OnceCell<OutboxId>>,
    /// The server its URL names, without credentials ([`target_of`](crate::target_of)), for
    /// errors of connections the pool could not open; unknown for a pool
    /// the caller built.
    target: Option<Arc<str>>,
}

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            dialect: self.dialect.clone(),
            outbox: Arc::clone(&self.outbox),
            target: self.target.clone(),
        }
    }
}

impl<D: Dialect + std::fmt::Debug> std::fmt::Debug for SqlStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("backend", &D::NAME)
            .field("pool", &self.pool.status())
            .field("dialect", &self.dialect)
            .finish()
    }
}

impl<D: Dialect> SqlStore<D> {
    /// A store with its own pool of up to `max_size` connections to
    /// `database_url`, each set up as the backend wants it (see the
    /// backend's dialect), failing fast (5 s) when the server is
    /// unreachable. A connection it cannot open fails with an error naming
    /// the server (host and port, or file) and the reason, once.
    pub fn connect(database_url: &str, max_size: usize) -> Result<Self> {
        let (pool, dialect) = D::connect(database_url, max_size)?;
        let mut store = Self::with_dialect(pool, dialect);
        store.target = crate::target_of(database_url).map(Arc::from);
        Ok(store)
    }

    /// A store over an existing pool: share the application's, or give the
    /// outbox its own. Build one store and clone it: clones share the
    /// store's state (a backend's prepared statement shapes, its write turn).
    pub fn new(pool: Pool<D::Manager>) -> Self {
        let dialect = D::for_pool(&pool);
        Self::with_dialect(pool, dialect)
    }

    /// A store over `pool` with an explicit `dialect`.
    pub fn with_dialect(pool: Pool<D::Manager>, dialect: D) -> Self {
        Self {
            pool,
            dialect,
            outbox: Arc::default(),
            target: None,
        }
    }

    /// This store with every table of its outbox named with `prefix`
    /// before its default name (`billing_` gives `billing_outbox_tasks`,
    /// `billing_outbox_inbox`...), so that several outboxes live side by
    /// side in one database, each seeing only its own tasks, keys and
    /// inbox. Apply the outbox's migrations with the same names first (the
    /// backend's `run_migrations_named`). The prefix is checked here: an
    /// error naming `table_prefix` for one the database would reject or
    /// need quoted (see [`Names::with_table_prefix`]).
    ///
    /// Clones made before keep their names. To share one pool (and on
    /// SQLite its one write turn) between outboxes, build the others from
    /// a clone: `store.clone().with_table_prefix("billing_")`.
    pub fn with_table_prefix(self, prefix: &str) -> Result<Self> {
        let names = self.names().clone().with_table_prefix(prefix)?;
        self.with_names(names)
    }

    /// This store with the outbox's tables in the schema `schema` (on
    /// MySQL and MariaDB, a database), keeping its table prefix: see
    /// [`Names::with_schema`]. On SQLite, which has no schemas, and for a
    /// name the check refuses, [`Error::Config`](diesel_outbox_core::Error::Config) naming `schema`.
    pub fn with_schema(self, schema: &str) -> Result<Self> {
        let names = self.names().clone().with_schema(schema)?;
        self.with_names(names)
    }

    /// This store on the outbox called `names` (see
    /// [`with_table_prefix`](Self::with_table_prefix) and
    /// [`with_schema`](Self::with_schema)), or the error of
    /// [`Names::for_backend`] for names its backend cannot take.
    pub fn with_names(mut self, names: Names) -> Result<Self> {
        self.dialect.set_names(names)?;
        self.outbox = Arc::default();
        Ok(self)
    }

    /// The names of the outbox's tables this store uses.
    pub fn names(&self) -> &Names {
        self.dialect.names()
    }

    /// The pool the store claims and completes on.
    pub fn pool(&self) -> &Pool<D::Manager> {
        &self.pool
    }

    /// The backend's state.
    pub fn dialect(&self) -> &D {
        &self.dialect
    }

    /// Runs `body` on a connection of the pool, which goes back to the
    /// pool only once `body` finished.
    pub(crate) async fn run<T, F>(&self, body: F) -> Result<T>
    where
        F: for<'c> AsyncFnOnce(&'c mut D::Conn) -> Result<T> + Send,
        for<'c> F: TxBody<&'c mut D::Conn, Result<T>, Fut: Send>,
        T: Send,
    {
        crate::with_conn(&self.pool, |e| self.pool_error(e), body).await
    }

    /// The pool's `error` as the outbox's, naming the server when the
    /// store knows it.
    pub(crate) fn pool_error(
        &self,
        error: diesel_async::pooled_connection::deadpool::PoolError,
    ) -> diesel_outbox_core::Error {
        crate::connecting_to(D::pool_error(error), self.target.as_deref())
    }

    /// This process's turn to write, where the backend has one writer at a
    /// time (SQLite): held until the guard is dropped, shared by the
    /// store's clones; on other backends a guard that holds nothing.
    ///
    /// Every write of the store (claims, results, heartbeats, the periodic
    /// moves, the inbox's transactions) takes it, and so do
    /// [`transaction`](crate::transaction) and
    /// [`transaction_pooled`](crate::transaction_pooled). Take it around a
    /// write transaction of your own on the same database, and that
    /// transaction queues with them instead of polling for the database's
    /// lock (see [`WriteTurn`](crate::WriteTurn) for why that matters).
    /// Take it once you hold the connection the transaction runs on, as
    /// the store does: a writer that held the turn while it waited for a
    /// connection could wait for one held by a writer queued behind it.
    ///
    /// Never call a store write (`send`, `retry_pending`, a claim), nor one
    /// of those helpers, while you hold it: it would wait for your turn to
    /// end, and fail after the wait's bound (5 s on SQLite) with a
    /// retryable [`LockTimeout`](diesel_outbox_core::DatabaseErrorKind::LockTimeout),
    /// as does a wait in a queue that long. End the turn first.
    ///
    /// ```no_run
    /// use diesel_async::AsyncConnection;
    /// use diesel_outbox_core::{Store, Task};
    /// use diesel_outbox_sql::{Dialect, SqlStore};
    ///
    /// # async fn demo<D: Dialect>(store: SqlStore<D>, conn: &mut D::Conn) -> anyhow::Result<()> {
    /// let turn = store.write_turn().await?;
    /// // On SQLite, `immediate_transaction` (see `diesel_outbox_sqlite`).
    /// let id = conn
    ///     .transaction::<_, anyhow::Error, _>(async |conn| {
    ///         // ... the business rows ...
    ///         Ok(store.enqueue(conn, Task::new("order.created", 1, "{}")).await?)
    ///     })
    ///     .await?;
    /// drop(turn); // before anything else writes: sending the task, say
    /// # let _ = id;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write_turn(&self) -> Result<WriteTurnGuard> {
        WriteTurnGuard::take(self.dialect.write_turn()).await
    }

    /// [`run`](Self::run) for a write: in this process's turn to write
    /// where the backend has one writer at a time. The connection comes
    /// first and the turn second, as for the `transaction` helpers, whose
    /// caller holds the connection already: whoever holds the turn has its
    /// connection, so a writer waiting for the pool never holds the turn
    /// that the connections' holders wait for.
    pub(crate) async fn write<T, F>(&self, body: F) -> Result<T>
    where
        F: for<'c> AsyncFnOnce(&'c mut D::Conn) -> Result<T> + Send,
        for<'c> F: TxBody<&'c mut D::Conn, Result<T>, Fut: Send>,
        T: Send,
    {
        self.run(async |conn| {
            let _turn = self.write_turn().await?;
            body(conn).await
        })
        .await
    }
}

/// A backend that can wake relays at commit: PostgreSQL's `NOTIFY`.
pub trait Notify: Dialect {
    /// Makes every transaction that enqueues wake the relays listening.
    fn notify_on_enqueue(&mut self);

    /// Whether enqueues wake relays.
    fn notifies(&self) -> bool;
}

impl<D: Notify> SqlStore<D> {
    /// Opts in to wake-ups at commit: every transaction that enqueues also
    /// notifies the relays listening (PostgreSQL: the channel named after
    /// the tasks table, `outbox_tasks` by default), which then deliver
    /// within milliseconds instead of at their next poll.
    ///
    /// The cost: PostgreSQL serialises committing transactions that notify
    /// (measured here: a one-row business transaction plus enqueue fell from
    /// about 4,800 to about 3,000 commits/s). Leave it off when tasks are
    /// sent right after commit anyway and the relay only catches up.
    pub fn with_notify(mut self) -> Self {
        self.dialect.notify_on_enqueue();
        self
    }

    /// Whether enqueues wake relays.
    pub fn notifies(&self) -> bool {
        self.dialect.notifies()
    }
}
