//! [`PgStore`]: the PostgreSQL implementation of the outbox [`Store`].

use diesel_async::{
    AsyncPgConnection,
    pooled_connection::{
        ManagerConfig, RecyclingMethod,
        deadpool::{Object, Pool},
    },
};
use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, Error, LeaseRequest, Record, Rescued, Result, Store, Task, TaskId,
    telemetry, transition::Completion,
};
use diesel_outbox_sql::{cached, postgres_error, postgres_pool_error};

use diesel_async::RunQueryDsl;

use crate::{claim, complete, enqueue, maintenance::NOTIFY, moves, query};

/// The outbox on PostgreSQL, over a deadpool pool of diesel-async connections.
///
/// `enqueue` runs on the caller's connection inside the caller's transaction;
/// claims and completion writes take short-lived connections from the pool
/// and never hold a row lock while a handler runs.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool<AsyncPgConnection>,
    notify: bool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("pool", &self.pool.status())
            .field("notify", &self.notify)
            .finish()
    }
}

impl PgStore {
    /// A store over an existing pool (share the application's pool, or give
    /// the outbox its own).
    pub fn new(pool: Pool<AsyncPgConnection>) -> Self {
        Self {
            pool,
            notify: false,
        }
    }

    /// Opts in to `NOTIFY`: every transaction that enqueues also notifies
    /// the `outbox_tasks` channel, and relays listening on it wake at commit,
    /// delivering within milliseconds instead of at their next poll.
    ///
    /// The cost: PostgreSQL serialises committing transactions that notify
    /// (measured here: a one-row business transaction plus enqueue fell from
    /// about 4,800 to about 3,000 commits/s). Leave it off when tasks are
    /// sent right after commit anyway and the relay only catches up.
    pub fn with_notify(mut self) -> Self {
        self.notify = true;
        self
    }

    /// Whether enqueues notify relays.
    pub fn notifies(&self) -> bool {
        self.notify
    }

    /// A store with its own pool of up to `max_size` connections to
    /// `database_url`, failing fast (5 s) when the server is unreachable.
    ///
    /// The pool recycles connections without a round trip
    /// (`RecyclingMethod::Fast`): a PostgreSQL connection knows when the
    /// server closed it, and the pool drops such a connection instead of
    /// handing it out, so the `SELECT 1` of the default check would cost
    /// every checkout a round trip to catch only the uses that race the
    /// server's goodbye. Those fail with a retryable connection error, which
    /// the relay and the result writer retry; nothing is lost.
    pub fn connect(database_url: &str, max_size: usize) -> Result<Self> {
        let mut config = ManagerConfig::default();
        config.recycling_method = RecyclingMethod::Fast;
        let pool = diesel_outbox_sql::build_pool(database_url, max_size, config)?;
        Ok(Self::new(pool))
    }

    /// The pool the store claims and completes on.
    pub fn pool(&self) -> &Pool<AsyncPgConnection> {
        &self.pool
    }

    /// Queues a notification that PostgreSQL delivers at commit (and drops
    /// on rollback); several in one transaction arrive as one.
    async fn notify_commit(&self, conn: &mut AsyncPgConnection) -> Result<()> {
        if self.notify {
            cached(NOTIFY).execute(conn).await.map_err(postgres_error)?;
        }
        Ok(())
    }

    pub(crate) async fn conn(&self) -> Result<Object<AsyncPgConnection>> {
        self.pool.get().await.map_err(postgres_pool_error)
    }
}

impl Store for PgStore {
    type Conn = AsyncPgConnection;

    async fn enqueue(&self, conn: &mut AsyncPgConnection, task: Task) -> Result<TaskId> {
        telemetry::traced_enqueue(task, async |task| {
            let id = enqueue::one(conn, task).await?;
            self.notify_commit(conn).await?;
            Ok(id)
        })
        .await
    }

    async fn enqueue_many(
        &self,
        conn: &mut AsyncPgConnection,
        tasks: Vec<Task>,
    ) -> Result<Vec<TaskId>> {
        telemetry::traced_enqueue_many(tasks, async |tasks| {
            let ids = enqueue::many(conn, tasks).await?;
            if !ids.is_empty() {
                self.notify_commit(conn).await?;
            }
            Ok(ids)
        })
        .await
    }

    async fn claim(&self, id: TaskId, lease: &LeaseRequest) -> Result<ClaimOutcome> {
        claim::one(&mut *self.conn().await?, id, lease).await
    }

    async fn claim_due(&self, request: &BatchRequest) -> Result<Vec<Record>> {
        claim::due(&mut *self.conn().await?, request).await
    }

    async fn complete(&self, completions: &[Completion]) -> Result<u64> {
        complete::write(&mut *self.conn().await?, completions).await
    }

    async fn complete_applied(&self, completions: &[Completion]) -> Result<Vec<(TaskId, i64)>> {
        complete::write_applied(&mut *self.conn().await?, completions).await
    }

    async fn get(&self, id: TaskId) -> Result<Record> {
        query::get(&mut *self.conn().await?, id)
            .await?
            .ok_or(Error::NotFound(id))
    }

    async fn promote(&self, limit: u32) -> Result<u64> {
        moves::promote(&mut *self.conn().await?, limit).await
    }

    async fn rescue(&self, limit: u32) -> Result<Rescued> {
        moves::rescue(&mut *self.conn().await?, limit).await
    }
}
