//! [`SqliteStore`]: the SQLite implementation of the outbox [`Store`].

use std::sync::Arc;

use diesel_async::pooled_connection::{
    ManagerConfig, RecyclingMethod,
    deadpool::{Object, Pool},
};
use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, Error, LeaseRequest, Record, Rescued, Result, Store, Task, TaskId,
    telemetry, transition::Completion,
};
use diesel_outbox_sql::sqlite_pool_error;
use tokio::sync::{Mutex, MutexGuard};

use crate::{AsyncSqliteConnection, claim, complete, connection, enqueue, moves, query};

/// The outbox on a SQLite database file, over a deadpool pool of
/// diesel-async connections (SQLite built in, no system library).
///
/// `enqueue` runs on the caller's connection inside the caller's
/// transaction. Claims, completion writes and the periodic moves each take
/// one statement, or one short `BEGIN IMMEDIATE` transaction when they need
/// several, on a connection from the pool: SQLite has one
/// writer at a time, so a claim holds the database's write lock for the few
/// statements it takes instead of locking rows, and no lock is held while a
/// handler runs. Several relays, in one process or in several on the same
/// file, therefore claim side by side, each waiting its turn for the write
/// lock (see [`connection`](crate::connection) for the settings that make
/// this safe).
///
/// Within a process, the store's writes also queue for a turn in the order
/// they arrive (clones of a store share the queue): SQLite's busy handler
/// retries on a timer, so without the queue a writer that keeps missing the
/// lock can wait far longer than the others, and a second relay's first
/// claim may come only after the first relay's whole round. Build one store
/// per database file and clone it into every worker of the process.
#[derive(Clone)]
pub struct SqliteStore {
    pool: Pool<AsyncSqliteConnection>,
    writes: Arc<Mutex<()>>,
    inserts: Arc<enqueue::Inserts>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("pool", &self.pool.status())
            .finish()
    }
}

impl SqliteStore {
    /// A store over an existing pool. Its connections should have the
    /// settings of [`establish`](crate::establish) (WAL, busy timeout);
    /// [`SqliteStore::connect`] builds such a pool.
    ///
    /// Build one store and share it (clones share its state): which
    /// multi-row inserts stay in a connection's statement cache is chosen
    /// per store, so a connection used through several may keep more.
    pub fn new(pool: Pool<AsyncSqliteConnection>) -> Self {
        Self {
            pool,
            writes: Arc::new(Mutex::new(())),
            inserts: Arc::default(),
        }
    }

    /// A store with its own pool of up to `max_size` connections to the
    /// database file `database_url`, each opened by
    /// [`establish`](crate::establish). A few connections are plenty: writes
    /// take turns anyway, and reads (stats, `get`) never wait for them.
    pub fn connect(database_url: &str, max_size: usize) -> Result<Self> {
        connection::check_url(database_url)?;
        let mut config = ManagerConfig::<AsyncSqliteConnection>::default();
        config.custom_setup = Box::new(|url| {
            let url = url.to_owned();
            Box::pin(async move { connection::open(&url).await })
        });
        // A file connection does not drop like a network one: skip the test
        // query on every checkout.
        config.recycling_method = RecyclingMethod::Fast;
        let pool = diesel_outbox_sql::build_pool(database_url, max_size, config)?;
        Ok(Self::new(pool))
    }

    /// The pool the store claims and completes on.
    pub fn pool(&self) -> &Pool<AsyncSqliteConnection> {
        &self.pool
    }

    pub(crate) async fn conn(&self) -> Result<Object<AsyncSqliteConnection>> {
        self.pool.get().await.map_err(sqlite_pool_error)
    }

    /// Waits for this process's turn to write, then a connection: hold the
    /// guard until the write transaction ended.
    pub(crate) async fn writer(
        &self,
    ) -> Result<(MutexGuard<'_, ()>, Object<AsyncSqliteConnection>)> {
        let turn = self.writes.lock().await;
        Ok((turn, self.conn().await?))
    }
}

impl Store for SqliteStore {
    type Conn = AsyncSqliteConnection;

    async fn enqueue(&self, conn: &mut AsyncSqliteConnection, task: Task) -> Result<TaskId> {
        telemetry::traced_enqueue(task, |task| enqueue::one(conn, task, &self.inserts)).await
    }

    async fn enqueue_many(
        &self,
        conn: &mut AsyncSqliteConnection,
        tasks: Vec<Task>,
    ) -> Result<Vec<TaskId>> {
        telemetry::traced_enqueue_many(tasks, |tasks| enqueue::many(conn, tasks, &self.inserts))
            .await
    }

    async fn claim(&self, id: TaskId, lease: &LeaseRequest) -> Result<ClaimOutcome> {
        let (_turn, mut conn) = self.writer().await?;
        claim::one(&mut conn, id, lease).await
    }

    async fn claim_due(&self, request: &BatchRequest) -> Result<Vec<Record>> {
        let (_turn, mut conn) = self.writer().await?;
        claim::due(&mut conn, request).await
    }

    async fn complete(&self, completions: &[Completion]) -> Result<u64> {
        if completions.is_empty() {
            return Ok(0);
        }
        let (_turn, mut conn) = self.writer().await?;
        complete::write(&mut conn, completions).await
    }

    async fn complete_applied(&self, completions: &[Completion]) -> Result<Vec<(TaskId, i64)>> {
        if completions.is_empty() {
            return Ok(Vec::new());
        }
        let (_turn, mut conn) = self.writer().await?;
        complete::write_applied(&mut conn, completions).await
    }

    async fn get(&self, id: TaskId) -> Result<Record> {
        query::get(&mut *self.conn().await?, id)
            .await?
            .ok_or(Error::NotFound(id))
    }

    async fn promote(&self, limit: u32) -> Result<u64> {
        let (_turn, mut conn) = self.writer().await?;
        moves::promote(&mut conn, limit).await
    }

    async fn rescue(&self, limit: u32) -> Result<Rescued> {
        let (_turn, mut conn) = self.writer().await?;
        moves::rescue(&mut conn, limit).await
    }
}
