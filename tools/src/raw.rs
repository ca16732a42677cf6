//! The hand-written SQL each backend is measured against, and bulk fills.
//!
//! The baselines are what a careful user would write without the library:
//! the same INSERT into `outbox_tasks` (getting the id back, to send after
//! commit), and a claim-and-complete loop of two statements per batch, each
//! statement prepared once per connection ([`Prepare::Once`]). The same
//! statements prepared on every call ([`Prepare::EachCall`], what diesel's
//! `sql_query` does) are measured too, so the cost of that shows.

use std::{
    collections::HashMap,
    future::Future,
    sync::{LazyLock, Mutex, PoisonError},
};

use diesel_outbox_testkit::{TestBackend, TestNames, backlog::Backlog};

/// How a hand-written statement is prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepare {
    /// Once per connection, then executed from the statement cache.
    Once,
    /// On every call, as diesel's `sql_query` does.
    EachCall,
}

impl Prepare {
    /// The statement `sql`, prepared this way.
    pub fn sql<'f, DB: diesel::backend::Backend>(
        self,
        sql: &'f str,
    ) -> diesel_outbox_sql::CachedQuery<'f, DB> {
        match self {
            Prepare::Once => diesel_outbox_sql::cached(sql),
            Prepare::EachCall => diesel_outbox_sql::uncached(sql),
        }
    }
}

/// `sql`, a hand-written statement written with the outbox's default
/// names, as the outbox `N` names its tables: `sql` itself for the default
/// names, else its renamed text, kept for the process so that a statement
/// prepared once per connection keeps one text (as a store keeps its
/// rendered statements). For statements of a few shapes only: each text is
/// kept for good.
pub fn named<N: TestNames>(sql: &str) -> &str {
    let names = N::names();
    if names.is_default() {
        return sql;
    }
    static KEPT: LazyLock<Mutex<HashMap<String, HashMap<String, &'static str>>>> =
        LazyLock::new(Mutex::default);
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    let key = format!(
        "{}.{}",
        names.schema().unwrap_or_default(),
        names.table_prefix()
    );
    let texts = kept.entry(key).or_default();
    if let Some(text) = texts.get(sql) {
        return text;
    }
    let text: &'static str = Box::leak(names.render(sql).into_owned().into_boxed_str());
    texts.insert(sql.to_owned(), text);
    text
}

/// A task claimed by a hand-written loop: its id and what it carries.
#[derive(Debug, diesel::QueryableByName)]
pub struct Claimed {
    /// The task's id.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub id: i64,
    /// Its payload.
    #[diesel(sql_type = diesel::sql_types::Binary)]
    pub payload: Vec<u8>,
}

/// Raw statements of one backend, over its test database.
pub trait Raw: TestBackend {
    /// `"postgres"`, `"mysql"` or `"sqlite"`.
    const NAME: &'static str;

    /// Creates the business table `orders`.
    fn create_orders(&self) -> impl Future<Output = anyhow::Result<()>> + Send {
        self.execute_sql(Self::ORDERS)
    }

    /// DDL of `orders`.
    const ORDERS: &'static str;

    /// DDL of the demo's `deliveries` log.
    const DELIVERIES: &'static str;

    /// The database clock, as an SQL expression.
    const NOW: &'static str;

    /// For each delivered task: microseconds from its insert to its first
    /// delivery in `deliveries`.
    fn first_delivery_latencies(&self) -> impl Future<Output = anyhow::Result<Vec<i64>>> + Send;

    /// Inserts order `id` on `conn` (inside the caller's transaction).
    fn insert_order(
        conn: &mut Self::Conn,
        id: i64,
        prepare: Prepare,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Inserts one outbox row by hand and reads its id back.
    fn insert_task(
        conn: &mut Self::Conn,
        payload: &[u8],
        prepare: Prepare,
    ) -> impl Future<Output = anyhow::Result<i64>> + Send;

    /// The statements creating `minimal_queue`, the smallest job table a
    /// user would write by hand instead of an outbox: five columns (id,
    /// kind, payload, status, created), a primary key and an index of the
    /// pending rows (partial where the backend has partial indexes).
    const MINIMAL_QUEUE: &'static [&'static str];

    /// Creates `minimal_queue` anew, empty.
    fn create_minimal_queue(&self) -> impl Future<Output = anyhow::Result<()>> + Send {
        async {
            self.execute_sql("DROP TABLE IF EXISTS minimal_queue")
                .await?;
            for statement in Self::MINIMAL_QUEUE {
                self.execute_sql(statement).await?;
            }
            Ok(())
        }
    }

    /// Inserts one job into `minimal_queue` and reads its id back, the
    /// statement prepared once per connection.
    fn insert_queued(
        conn: &mut Self::Conn,
        payload: &[u8],
    ) -> impl Future<Output = anyhow::Result<i64>> + Send;

    /// Inserts `payloads.len()` outbox rows in one statement and reads
    /// their ids back (`RETURNING id`, or on MySQL `LAST_INSERT_ID()`, the
    /// first id, which the others follow).
    fn insert_tasks(
        conn: &mut Self::Conn,
        payloads: &[Vec<u8>],
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Opens a connection for the hand-written drain loops and publishers,
    /// set up once the way a careful user sets theirs up: on MySQL, READ
    /// COMMITTED for the whole session, as the library's pool does, so
    /// neither the claim nor the completion takes gap locks or pays a round
    /// trip to set it. [`Raw::drain_batch`], [`Raw::claim_batch`] and
    /// [`Raw::complete_batch`] expect a connection from here.
    fn drain_connection(&self) -> impl Future<Output = anyhow::Result<Self::Conn>> + Send {
        self.connect()
    }

    /// Claims up to `limit` due rows with ids above `after` (SKIP LOCKED) and
    /// marks them succeeded: one claim statement (or transaction) and one
    /// completion statement. Returns the ids it took, ascending; none when
    /// nothing is due. The cursor keeps each claim a short index range.
    fn drain_batch(
        conn: &mut Self::Conn,
        limit: i64,
        after: i64,
        prepare: Prepare,
    ) -> impl Future<Output = anyhow::Result<Vec<i64>>> + Send;

    /// Claims up to `limit` due rows with ids above `after` as
    /// [`Raw::drain_batch`] does with [`Prepare::Once`], and returns them with their
    /// payloads, in id order, still running: what a hand-written publisher
    /// sends before [`Raw::complete_batch`].
    fn claim_batch(
        conn: &mut Self::Conn,
        limit: i64,
        after: i64,
    ) -> impl Future<Output = anyhow::Result<Vec<Claimed>>> + Send;

    /// Marks the claimed `ids` succeeded as [`Raw::drain_batch`] does with
    /// [`Prepare::Once`]; nothing to do when there are none.
    fn complete_batch(
        conn: &mut Self::Conn,
        ids: &[i64],
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Inserts `n` pending tasks of `kind` in bulk.
    fn fill_pending(&self, n: u64, kind: &str) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Inserts `rows` rows of the `backlog` shape in bulk.
    fn fill_backlog(
        &self,
        backlog: Backlog,
        rows: u64,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Empties `outbox_tasks` and `orders`, and refreshes planner statistics.
    fn reset(&self) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Refreshes planner statistics of `outbox_tasks`.
    fn analyze(&self) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Empties the table, fills it with `n` pending tasks of `kind` and
    /// refreshes planner statistics, so that they have seen the backlog:
    /// where every drain and publishing run starts. Left with the
    /// statistics of the empty table instead (none on any column),
    /// PostgreSQL planned the relay's claim as a read and sort of every
    /// available row, at every claim, while the hand-written claim walked
    /// the index (docs/benchmarks.md, "Publishing runs start from analyzed
    /// statistics").
    fn fresh_backlog(&self, n: u64, kind: &str) -> impl Future<Output = anyhow::Result<()>> + Send
    where
        Self: Sync,
    {
        async move {
            self.reset().await?;
            self.fill_pending(n, kind).await?;
            self.analyze().await
        }
    }

    /// A store that wakes relays at commit, where the backend can (NOTIFY).
    fn notifying_store(&self) -> Option<Self::Store> {
        None
    }
}

#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "postgres")]
mod postgres;

#[cfg(feature = "mysql")]
mod mysql;
