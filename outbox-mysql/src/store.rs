//! [`MysqlStore`]: the MySQL/MariaDB implementation of the outbox [`Store`].

use std::sync::Arc;

use diesel_async::{
    AsyncConnection, AsyncMysqlConnection, SimpleAsyncConnection,
    pooled_connection::{
        ManagerConfig,
        deadpool::{Object, Pool},
    },
};
use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, Error, LeaseRequest, Record, Rescued, Result, Store, Task, TaskId,
    telemetry, transition::Completion,
};
use diesel_outbox_sql::{PreparedOnce, mysql_pool_error};
use futures_util::FutureExt;
use tokio::sync::OnceCell;

use crate::{
    claim, complete,
    enqueue::{self, InsertShape},
    moves, query,
    server::{self, ServerInfo},
    store_transaction::{Isolation, SESSION_READ_COMMITTED},
};

/// The outbox on MySQL 8.0.4+ or MariaDB 10.6+, over a deadpool pool of
/// diesel-async connections (pure Rust, no libmysqlclient).
///
/// `enqueue` runs on the caller's connection inside the caller's transaction;
/// claims take short READ COMMITTED transactions from the pool (so no gap
/// lock ever blocks the application's inserts) and no row lock is held while
/// a handler runs.
#[derive(Clone)]
pub struct MysqlStore {
    pool: Pool<AsyncMysqlConnection>,
    server: Arc<OnceCell<ServerInfo>>,
    isolation: Isolation,
    inserts: Arc<PreparedOnce<InsertShape>>,
}

impl std::fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlStore")
            .field("pool", &self.pool.status())
            .field("server", &self.server.get())
            .finish()
    }
}

impl MysqlStore {
    /// A store over an existing pool. Its transactions set READ COMMITTED
    /// each time, whatever the pool's sessions default to.
    ///
    /// Build one store and share it (clones share its state): which
    /// multi-row inserts stay prepared on a connection is chosen per store,
    /// so a connection used through several may keep more (see "Connection
    /// pools and prepared statements" in docs/operations.md).
    pub fn new(pool: Pool<AsyncMysqlConnection>) -> Self {
        Self {
            pool,
            server: Arc::new(OnceCell::new()),
            isolation: Isolation::EachTransaction,
            inserts: Arc::default(),
        }
    }

    /// A store with its own pool of up to `max_size` connections to
    /// `database_url`, failing fast (5 s) when the server is unreachable.
    ///
    /// Each connection is set to READ COMMITTED once, when it connects, so
    /// the store's transactions skip the round trip that sets it.
    pub fn connect(database_url: &str, max_size: usize) -> Result<Self> {
        let mut config = ManagerConfig::<AsyncMysqlConnection>::default();
        config.custom_setup = Box::new(|url| {
            async move {
                let mut conn = AsyncMysqlConnection::establish(url).await?;
                conn.batch_execute(SESSION_READ_COMMITTED)
                    .await
                    .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                Ok(conn)
            }
            .boxed()
        });
        let pool = diesel_outbox_sql::build_pool(database_url, max_size, config)?;
        Ok(Self {
            isolation: Isolation::Session,
            ..Self::new(pool)
        })
    }

    pub(crate) fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// The pool the store claims and completes on.
    pub fn pool(&self) -> &Pool<AsyncMysqlConnection> {
        &self.pool
    }

    pub(crate) async fn conn(&self) -> Result<Object<AsyncMysqlConnection>> {
        self.pool.get().await.map_err(mysql_pool_error)
    }

    /// The server's facts, read on `conn` the first time they are needed.
    pub(crate) async fn server(&self, conn: &mut AsyncMysqlConnection) -> Result<&ServerInfo> {
        self.server.get_or_try_init(|| server::inspect(conn)).await
    }
}

impl Store for MysqlStore {
    type Conn = AsyncMysqlConnection;

    async fn enqueue(&self, conn: &mut AsyncMysqlConnection, task: Task) -> Result<TaskId> {
        telemetry::traced_enqueue(task, |task| enqueue::one(conn, task, &self.inserts)).await
    }

    async fn enqueue_many(
        &self,
        conn: &mut AsyncMysqlConnection,
        tasks: Vec<Task>,
    ) -> Result<Vec<TaskId>> {
        telemetry::traced_enqueue_many(tasks, async |tasks| {
            diesel_outbox_sql::require_transaction(conn)?;
            let consecutive_ids = self.server(conn).await?.consecutive_ids;
            enqueue::many(conn, tasks, consecutive_ids, &self.inserts).await
        })
        .await
    }

    async fn claim(&self, id: TaskId, lease: &LeaseRequest) -> Result<ClaimOutcome> {
        let mut conn = self.conn().await?;
        self.server(&mut conn).await?;
        claim::one(&mut conn, id, lease, self.isolation).await
    }

    async fn claim_due(&self, request: &BatchRequest) -> Result<Vec<Record>> {
        let mut conn = self.conn().await?;
        self.server(&mut conn).await?;
        claim::due(&mut conn, request, self.isolation).await
    }

    async fn complete(&self, completions: &[Completion]) -> Result<u64> {
        complete::write(&mut *self.conn().await?, completions, self.isolation).await
    }

    async fn complete_applied(&self, completions: &[Completion]) -> Result<Vec<(TaskId, i64)>> {
        complete::write_applied(&mut *self.conn().await?, completions, self.isolation).await
    }

    async fn get(&self, id: TaskId) -> Result<Record> {
        query::get(&mut *self.conn().await?, id)
            .await?
            .ok_or(Error::NotFound(id))
    }

    async fn promote(&self, limit: u32) -> Result<u64> {
        moves::promote(&mut *self.conn().await?, limit, self.isolation).await
    }

    async fn rescue(&self, limit: u32) -> Result<Rescued> {
        moves::rescue(&mut *self.conn().await?, limit, self.isolation).await
    }
}
