//! [`Mysql`]: the MySQL/MariaDB dialect of the outbox, every primitive
//! bound to its statement in `statements.rs`.
//!
//! A claim's decision is the shared flows': it locks its rows (`FOR UPDATE
//! SKIP LOCKED`), lets `transition` decide on the locked state with the
//! database's clock, and writes the decision, in one short READ COMMITTED
//! transaction. The periodic moves read their candidates without a lock and
//! update them by primary key, the `WHERE` re-checking the rule. MySQL has
//! no `RETURNING`: which results applied is read under lock first, in the
//! same transaction.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::{
    OptionalExtension, QueryableByName,
    mysql::Mysql as MysqlBackend,
    sql_types::{BigInt, Binary, Datetime, Nullable, Text},
};
use diesel_async::{
    AsyncConnection, AsyncMysqlConnection, RunQueryDsl, SimpleAsyncConnection,
    pooled_connection::{
        AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
        deadpool::{Pool, PoolError},
    },
};
use diesel_outbox_core::{
    Ages, BatchRequest, Error, Heartbeat, LeaseRequest, OutboxId, RelaySeen, Rescued, Result,
    Stats, Task, TaskId,
    transition::{self, Completion, EXPIRED_ERROR},
};
use diesel_outbox_sql::{
    CachedQuery, Dialect, Inserted, KeyCounts, Names, PreparedOnce, ReadRow, cached, micros,
    mysql_error, mysql_pool_error,
    rows::{
        Ages as AgesRow, Applied, Count, Id, KeyCount, Micros, RelayRow, duration_us,
        tally_statuses, to_u64,
    },
    uncached,
};
use futures_util::FutureExt;
use tokio::sync::OnceCell;

use crate::{
    insert::{self, InsertShape, Row},
    isolation::{Isolation, SESSION_READ_COMMITTED},
    json_rows,
    server::{self, ServerInfo},
    statements::{self as sql, id_list},
    tables::TaskRow,
    timestamp,
};

/// The MySQL/MariaDB backend: how its connections reach READ COMMITTED,
/// the server's facts (read once), and which multi-row inserts stay
/// prepared, shared by the store's clones.
///
/// Build one store and share it: which multi-row inserts stay prepared on
/// a connection is chosen per store, so a connection used through several
/// may keep more (see "Connection pools and prepared statements" in
/// [operations.md](https://github.com/outbox-rs/outbox/blob/main/docs/operations.md)).
#[derive(Debug, Clone)]
pub struct Mysql {
    isolation: Isolation,
    server: Arc<OnceCell<ServerInfo>>,
    inserts: Arc<PreparedOnce<InsertShape>>,
    names: Names,
}

impl Mysql {
    fn new(isolation: Isolation) -> Self {
        Self {
            isolation,
            server: Arc::default(),
            inserts: Arc::default(),
            names: Names::default(),
        }
    }

    /// The server's facts, read on `conn` the first time they are needed.
    async fn server(&self, conn: &mut AsyncMysqlConnection) -> Result<&ServerInfo> {
        self.server.get_or_try_init(|| server::inspect(conn)).await
    }
}

/// Below this many rows by the server's estimate, succeeded rows are
/// counted exactly (an index range read of that size takes milliseconds).
const EXACT_BELOW: i64 = 100_000;

#[derive(QueryableByName)]
struct Locked {
    #[diesel(embed)]
    task: TaskRow,
    #[diesel(sql_type = Datetime)]
    db_now: NaiveDateTime,
}

#[derive(QueryableByName)]
struct Key {
    #[diesel(sql_type = Nullable<Binary>)]
    ordering_key: Option<Vec<u8>>,
}

#[derive(QueryableByName)]
struct BinaryCount {
    #[diesel(sql_type = Binary)]
    ordering_key: Vec<u8>,
    #[diesel(sql_type = BigInt)]
    open_tasks: i64,
}

#[derive(QueryableByName)]
struct Discardable {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Nullable<Binary>)]
    ordering_key: Option<Vec<u8>>,
}

/// A running task whose lease lapsed, and whether its runs reached
/// `max_attempts` when it was read.
#[derive(QueryableByName)]
struct Lapsed {
    #[diesel(sql_type = BigInt)]
    id: i64,
    /// 1 or 0.
    #[diesel(sql_type = BigInt)]
    exhausted: i64,
}

type Query<'q> = CachedQuery<'q, MysqlBackend>;

/// `query` with each of `keys` bound, in order.
fn bind_keys<'q>(query: Query<'q>, keys: impl IntoIterator<Item = &'q str>) -> Query<'q> {
    keys.into_iter()
        .fold(query, |query, key| query.bind::<Text, _>(key))
}

/// A key as text; keys that are not UTF-8 were written by another program,
/// and no count of ours holds them.
fn utf8(key: Vec<u8>) -> Option<String> {
    String::from_utf8(key).ok()
}

/// The counts of `keys`, their rows locked in key order.
async fn lock_counts(
    conn: &mut AsyncMysqlConnection,
    names: &Names,
    keys: &KeyCounts<'_>,
) -> Result<Vec<KeyCount>> {
    let text = names.rendered(sql::lock_counts(keys.len()));
    let rows: Vec<BinaryCount> = bind_keys(uncached(&text), keys.keys().copied())
        .load(conn)
        .await
        .map_err(mysql_error)?;
    rows.into_iter()
        .map(|row| {
            Ok(KeyCount {
                ordering_key: utf8(row.ordering_key)
                    .ok_or_else(|| Error::database("an ordering key's count row is not UTF-8"))?,
                open_tasks: row.open_tasks,
            })
        })
        .collect()
}

/// The ids `select` finds, ascending, as an SQL list; `None` when none.
async fn candidates(
    conn: &mut AsyncMysqlConnection,
    select: &str,
    limit: u32,
) -> Result<Option<String>> {
    let mut ids: Vec<i64> = cached(select)
        .bind::<BigInt, _>(i64::from(limit))
        .load::<Id>(conn)
        .await
        .map_err(mysql_error)?
        .into_iter()
        .map(|candidate| candidate.id)
        .collect();
    if ids.is_empty() {
        return Ok(None);
    }
    ids.sort_unstable();
    Ok(Some(id_list(ids)))
}

/// Runs each JSON document of `completions` through `statement`.
fn documents(completions: &[Completion]) -> Vec<String> {
    json_rows::completions(completions, sql::MAX_COMPLETIONS)
}

/// The update of `COMPLETE`, document by document;
/// returns the rows whose fence held.
async fn apply(
    conn: &mut AsyncMysqlConnection,
    names: &Names,
    completions: &[Completion],
) -> Result<u64> {
    let mut applied = 0;
    for document in documents(completions) {
        let rows = cached::<MysqlBackend>(&names.sql(sql::COMPLETE))
            .bind::<Text, _>(document)
            .execute(&mut *conn)
            .await
            .map_err(mysql_error)?;
        applied += rows as u64;
    }
    Ok(applied)
}

diesel_outbox_sql::transact_with! {
    /// A plain transaction, at READ COMMITTED when the store's own
    /// ([`Dialect::before_write`] sets it on a pool the store did not build).
    /// READ COMMITTED takes no gap locks, so the store's transactions never
    /// block the application's inserts, and each statement reads what was
    /// committed before it started: a statement after a lock wait sees what
    /// the lock holder committed.
    Mysql,
    AsyncMysqlConnection,
    transaction
}

impl Dialect for Mysql {
    type Conn = AsyncMysqlConnection;
    type Manager = AsyncDieselConnectionManager<AsyncMysqlConnection>;
    type Backend = MysqlBackend;
    type Row = Row;
    type TaskRow = TaskRow;

    const NAME: &'static str = "MySQL";
    const NO_BYTES: &'static str = "X''";

    /// Each connection is set to READ COMMITTED once, when it connects, so
    /// the store's transactions skip the round trip that sets it. A MySQL
    /// connection cannot tell when the server closed it, so the pool checks
    /// one with `SELECT 1` before handing it out, but only when it was last
    /// handed out [`VERIFY_AFTER_IDLE`](crate::VERIFY_AFTER_IDLE) ago or
    /// more: a check per checkout cost the drain benchmark's relays about 13%
    /// of their CPU per task, and a connection in steady use that the server
    /// ends fails one statement with a retryable connection error, and is
    /// closed.
    fn connect(database_url: &str, max_size: usize) -> Result<(Pool<AsyncMysqlConnection>, Self)> {
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
        config.recycling_method = RecyclingMethod::Fast;
        let pool = diesel_outbox_sql::build_pool(
            database_url,
            max_size,
            config,
            Some(crate::VERIFY_AFTER_IDLE),
        )?;
        Ok((pool, Self::new(Isolation::Session)))
    }

    /// The store's transactions set READ COMMITTED each time, whatever the
    /// pool's sessions default to.
    fn for_pool(_: &Pool<AsyncMysqlConnection>) -> Self {
        Self::new(Isolation::EachTransaction)
    }

    fn names(&self) -> &Names {
        &self.names
    }

    /// The insert shapes kept so far were chosen for the old names' text.
    fn set_names(&mut self, names: Names) -> Result<()> {
        self.names = names.for_backend(diesel_outbox_sql::BackendKind::Mysql)?;
        self.inserts = Arc::default();
        Ok(())
    }

    fn error(error: diesel::result::Error) -> Error {
        mysql_error(error)
    }

    fn pool_error(error: PoolError) -> Error {
        mysql_pool_error(error)
    }

    async fn before_write(&self, conn: &mut AsyncMysqlConnection) -> Result<()> {
        self.isolation.apply(conn).await
    }

    /// Reads the server's facts once, and checks it is supported.
    async fn ready(&self, conn: &mut AsyncMysqlConnection) -> Result<()> {
        self.server(conn).await.map(drop)
    }

    fn prepare(&self, task: Task) -> Result<Row> {
        insert::prepare(task)
    }

    fn task(row: &Row) -> &Task {
        &row.task
    }

    fn decode(row: TaskRow) -> ReadRow {
        row.decode()
    }

    fn bind_instant<'f>(
        query: CachedQuery<'f, MysqlBackend>,
        field: &'static str,
        at: DateTime<Utc>,
    ) -> Result<CachedQuery<'f, MysqlBackend>> {
        Ok(query.bind::<Datetime, _>(timestamp::to_column(field, at)?))
    }

    async fn insert(
        &self,
        conn: &mut AsyncMysqlConnection,
        rows: &[Row],
        heads: &[bool],
    ) -> Result<Vec<Inserted>> {
        // A single row needs no id run, so no server facts: a plain
        // enqueue adds no query to the caller's transaction.
        let consecutive_ids = rows.len() > 1 && self.server(conn).await?.consecutive_ids;
        insert::insert(
            conn,
            &self.names,
            rows,
            heads,
            consecutive_ids,
            &self.inserts,
        )
        .await
    }

    /// Exact counts but for succeeded rows on a large table, which come
    /// from the server's estimate of the table.
    async fn stats(&self, conn: &mut AsyncMysqlConnection) -> Result<Stats> {
        let counts: Vec<Count> = diesel::sql_query(&*self.sql(sql::COUNTS))
            .load(&mut *conn)
            .await
            .map_err(mysql_error)?;
        let table: Option<Count> = diesel::sql_query(sql::TABLE_ROWS)
            .bind::<Nullable<Text>, _>(self.names.schema())
            .bind::<Text, _>(self.names.table("outbox_tasks"))
            .get_result(&mut *conn)
            .await
            .optional()
            .map_err(mysql_error)?;
        let mut stats = Stats::default();
        let exact = tally_statuses(&mut stats, counts);
        let estimate = table.map_or(0, |table| table.n);
        stats.succeeded = if estimate < EXACT_BELOW {
            let succeeded: Count = diesel::sql_query(&*self.sql(sql::COUNT_SUCCEEDED))
                .get_result(&mut *conn)
                .await
                .map_err(mysql_error)?;
            to_u64(succeeded.n)
        } else {
            to_u64(estimate - exact)
        };
        Ok(stats)
    }

    async fn ages(&self, conn: &mut AsyncMysqlConnection) -> Result<Ages> {
        let ages: AgesRow = cached(&self.sql(sql::AGES))
            .get_result(conn)
            .await
            .map_err(mysql_error)?;
        Ok(Ages::from_us(ages.available, ages.waiting, ages.running))
    }

    async fn beat(&self, conn: &mut AsyncMysqlConnection, beat: &Heartbeat) -> Result<()> {
        cached(&self.sql(sql::BEAT))
            .bind::<Text, _>(&beat.owner)
            .bind::<Text, _>(&beat.host)
            .bind::<BigInt, _>(i64::from(beat.pid))
            .bind::<Text, _>(&beat.version)
            .bind::<BigInt, _>(micros(beat.up))
            .bind::<BigInt, _>(micros(beat.ttl))
            .bind::<Nullable<BigInt>, _>(beat.since_claim.map(micros))
            .bind::<Nullable<BigInt>, _>(beat.since_write.map(micros))
            .execute(&mut *conn)
            .await
            .map_err(mysql_error)?;
        cached(&self.sql(sql::SWEEP_RELAYS))
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(())
    }

    async fn forget_relay(&self, conn: &mut AsyncMysqlConnection, owner: &str) -> Result<()> {
        cached(&self.sql(sql::FORGET_RELAY))
            .bind::<Text, _>(owner)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(())
    }

    async fn relays(&self, conn: &mut AsyncMysqlConnection) -> Result<Vec<RelaySeen>> {
        let rows: Vec<RelayRow> = cached(&self.sql(sql::RELAYS))
            .load(conn)
            .await
            .map_err(mysql_error)?;
        Ok(rows.into_iter().map(RelayRow::seen).collect())
    }

    async fn outbox_id(&self, conn: &mut AsyncMysqlConnection) -> Result<OutboxId> {
        diesel_outbox_sql::read_outbox_id(conn, self.names(), mysql_error).await
    }

    async fn next_due(&self, conn: &mut AsyncMysqlConnection) -> Result<Option<Duration>> {
        let next: Micros = cached(&self.sql(sql::NEXT_DUE))
            .get_result(conn)
            .await
            .map_err(mysql_error)?;
        Ok(next.us.map(duration_us))
    }

    async fn lock_task(
        &self,
        conn: &mut AsyncMysqlConnection,
        id: TaskId,
    ) -> Result<Option<(ReadRow, DateTime<Utc>)>> {
        let locked: Option<Locked> = cached(&self.sql(sql::LOCK_TASK))
            .bind::<BigInt, _>(id.get())
            .get_result(conn)
            .await
            .optional()
            .map_err(mysql_error)?;
        Ok(locked.map(|locked| (locked.task.decode(), timestamp::from_column(locked.db_now))))
    }

    /// Rows read by position: by name, every field is looked up among every
    /// column.
    async fn lock_due(
        &self,
        conn: &mut AsyncMysqlConnection,
        request: &BatchRequest,
    ) -> Result<Vec<(ReadRow, DateTime<Utc>)>> {
        let limit =
            i64::try_from(request.limit).map_err(|_| Error::invalid("batch_size", "too large"))?;
        let due_by = timestamp::to_column_opt("due_by", request.due_by)?;
        let locked: Vec<(TaskRow, NaiveDateTime)> =
            cached::<MysqlBackend>(&self.sql(sql::LOCK_DUE))
                .bind::<BigInt, _>(request.after.map_or(0, TaskId::get))
                .bind::<Nullable<Datetime>, _>(due_by)
                .bind::<BigInt, _>(limit)
                .returning::<(crate::schema::outbox_tasks::SqlType, Datetime)>()
                .load(conn)
                .await
                .map_err(mysql_error)?;
        Ok(locked
            .into_iter()
            .map(|(row, now)| (row.decode(), timestamp::from_column(now)))
            .collect())
    }

    async fn set_leases(
        &self,
        conn: &mut AsyncMysqlConnection,
        ids: &[TaskId],
        lease: &LeaseRequest,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let until = timestamp::to_column("lease_duration", transition::after(now, lease.duration))?;
        cached::<MysqlBackend>(&self.sql(sql::SET_LEASES))
            .bind::<Text, _>(json_rows::ids(ids))
            .bind::<Text, _>(&lease.owner)
            .bind::<Datetime, _>(until)
            .bind::<Datetime, _>(now.naive_utc())
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(())
    }

    async fn expire(
        &self,
        conn: &mut AsyncMysqlConnection,
        ids: &[TaskId],
        now: DateTime<Utc>,
    ) -> Result<()> {
        cached::<MysqlBackend>(&self.sql(sql::EXPIRE))
            .bind::<Text, _>(json_rows::ids(ids))
            .bind::<Datetime, _>(now.naive_utc())
            .bind::<Datetime, _>(now.naive_utc())
            .bind::<Text, _>(EXPIRED_ERROR)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(())
    }

    async fn fail_unreadable(
        &self,
        conn: &mut AsyncMysqlConnection,
        id: TaskId,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let failed = cached::<MysqlBackend>(&self.sql(sql::FAIL_UNREADABLE))
            .bind::<Datetime, _>(now.naive_utc())
            .bind::<Datetime, _>(now.naive_utc())
            .bind::<Text, _>(reason)
            .bind::<BigInt, _>(id.get())
            .bind::<Datetime, _>(now.naive_utc())
            .bind::<Datetime, _>(now.naive_utc())
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(failed > 0)
    }

    /// The current claims read and locked first
    /// (`CURRENT_FENCES`), in the same transaction,
    /// so they are exactly the ones the update then applies.
    async fn apply_completions(
        &self,
        conn: &mut AsyncMysqlConnection,
        completions: &[Completion],
    ) -> Result<Vec<(TaskId, i64)>> {
        let mut current = Vec::new();
        for document in documents(completions) {
            let rows: Vec<Applied> = cached::<MysqlBackend>(&self.sql(sql::CURRENT_FENCES))
                .bind::<Text, _>(document)
                .load(&mut *conn)
                .await
                .map_err(mysql_error)?;
            current.extend(rows.into_iter().map(Applied::claim));
        }
        apply(conn, &self.names, completions).await?;
        current.sort_unstable();
        current.dedup();
        Ok(current)
    }

    /// The update alone: diesel-async reports rows matched, which is
    /// exactly the rows whose fence held.
    async fn apply_counted(
        &self,
        conn: &mut AsyncMysqlConnection,
        completions: &[Completion],
    ) -> Result<u64> {
        apply(conn, &self.names, completions).await
    }

    async fn open_keys(
        &self,
        conn: &mut AsyncMysqlConnection,
        counts: &KeyCounts<'_>,
    ) -> Result<Vec<KeyCount>> {
        let text = self.names().rendered(sql::open_keys(counts.len()));
        let mut query = uncached::<MysqlBackend>(&text);
        for (key, n) in counts {
            query = query.bind::<Text, _>(*key).bind::<BigInt, _>(*n);
        }
        query.execute(&mut *conn).await.map_err(mysql_error)?;
        // This transaction's own versions, written over the latest committed.
        lock_counts(conn, &self.names, counts).await
    }

    async fn take_keys(
        &self,
        conn: &mut AsyncMysqlConnection,
        counts: &KeyCounts<'_>,
    ) -> Result<Vec<KeyCount>> {
        let mut left = lock_counts(conn, &self.names, counts).await?;
        for row in &mut left {
            let n = counts.get(row.ordering_key.as_str()).copied().unwrap_or(0);
            row.open_tasks = (row.open_tasks - n).max(0);
        }
        let staying: Vec<&KeyCount> = left.iter().filter(|row| row.open_tasks > 0).collect();
        if !staying.is_empty() {
            let text = self.names().rendered(sql::set_counts(staying.len()));
            let mut query = uncached::<MysqlBackend>(&text);
            for row in &staying {
                query = query
                    .bind::<Text, _>(row.ordering_key.as_str())
                    .bind::<BigInt, _>(row.open_tasks);
            }
            bind_keys(query, staying.iter().map(|row| row.ordering_key.as_str()))
                .execute(conn)
                .await
                .map_err(mysql_error)?;
        }
        Ok(left)
    }

    async fn move_keys_on(
        &self,
        conn: &mut AsyncMysqlConnection,
        next: &[&str],
        emptied: &[&str],
    ) -> Result<()> {
        if !emptied.is_empty() {
            let text = self.names().rendered(sql::drop_keys(emptied.len()));
            bind_keys(uncached(&text), emptied.iter().copied())
                .execute(&mut *conn)
                .await
                .map_err(mysql_error)?;
        }
        if next.is_empty() {
            return Ok(());
        }
        let text = self.names().rendered(sql::next_blocked(next.len()));
        let ids: Vec<Id> = bind_keys(uncached(&text), next.iter().copied())
            .load(&mut *conn)
            .await
            .map_err(mysql_error)?;
        if ids.is_empty() {
            return Ok(());
        }
        let text = self
            .names()
            .rendered(sql::unblock(&id_list(ids.into_iter().map(|row| row.id))));
        uncached::<MysqlBackend>(&text)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(())
    }

    async fn promote(&self, conn: &mut AsyncMysqlConnection, limit: u32) -> Result<u64> {
        let Some(ids) = candidates(conn, &self.sql(sql::DUE), limit).await? else {
            return Ok(0);
        };
        self.isolation.apply(conn).await?;
        let moved = uncached::<MysqlBackend>(&self.names().rendered(sql::promote(&ids)))
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(moved as u64)
    }

    /// Those below their attempt limit in one statement, each of the others
    /// in one of its own. A row whose runs changed between the read and the
    /// update (a `send` took it over) is left for the next rescue.
    async fn rescue(&self, conn: &mut AsyncMysqlConnection, limit: u32) -> Result<Rescued> {
        let mut lapsed: Vec<Lapsed> = cached(&self.sql(sql::LAPSED))
            .bind::<BigInt, _>(i64::from(limit))
            .load(&mut *conn)
            .await
            .map_err(mysql_error)?;
        if lapsed.is_empty() {
            return Ok(Rescued::default());
        }
        lapsed.sort_unstable_by_key(|row| row.id);
        self.isolation.apply(conn).await?;
        let mut rescued = Rescued::default();
        let again = id_list(
            lapsed
                .iter()
                .filter(|row| row.exhausted == 0)
                .map(|row| row.id),
        );
        if !again.is_empty() {
            let moved = uncached::<MysqlBackend>(&self.names().rendered(sql::rescue(&again)))
                .bind::<Text, _>(transition::LAPSED_ERROR)
                .execute(&mut *conn)
                .await
                .map_err(mysql_error)?;
            rescued.moved += moved as u64;
        }
        let gave_up = transition::gave_up(transition::RUNS, transition::LAPSED_ERROR);
        for row in lapsed.iter().filter(|row| row.exhausted != 0) {
            let failed = cached::<MysqlBackend>(&self.sql(sql::RESCUE_EXHAUSTED))
                .bind::<Text, _>(&gave_up)
                .bind::<Text, _>(transition::RUNS)
                .bind::<BigInt, _>(row.id)
                .execute(&mut *conn)
                .await
                .map_err(mysql_error)?;
            if failed > 0 {
                rescued.moved += 1;
                rescued.failed.push(TaskId::new(row.id));
            }
        }
        Ok(rescued)
    }

    async fn requeue(&self, conn: &mut AsyncMysqlConnection, ids: &[TaskId]) -> Result<u64> {
        let text = self
            .names()
            .rendered(sql::requeue(&id_list(ids.iter().map(|id| id.get()))));
        let changed = uncached::<MysqlBackend>(&text)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(changed as u64)
    }

    /// Byte order, the column's order.
    async fn keys_of(
        &self,
        conn: &mut AsyncMysqlConnection,
        ids: &[TaskId],
    ) -> Result<BTreeSet<String>> {
        let text = self
            .names()
            .rendered(sql::keys_of(&id_list(ids.iter().map(|id| id.get()))));
        let keys: Vec<Key> = uncached::<MysqlBackend>(&text)
            .load(conn)
            .await
            .map_err(mysql_error)?;
        Ok(keys
            .into_iter()
            .filter_map(|key| key.ordering_key.and_then(utf8))
            .collect())
    }

    async fn lock_keys(
        &self,
        conn: &mut AsyncMysqlConnection,
        keys: &BTreeSet<String>,
    ) -> Result<()> {
        let text = self.names().rendered(sql::lock_keys(keys.len()));
        bind_keys(uncached(&text), keys.iter().map(String::as_str))
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(())
    }

    async fn discard_rows(
        &self,
        conn: &mut AsyncMysqlConnection,
        ids: &[TaskId],
    ) -> Result<Vec<(String, Option<String>)>> {
        let text = self
            .names()
            .rendered(sql::discardable(&id_list(ids.iter().map(|id| id.get()))));
        let targets: Vec<Discardable> = uncached::<MysqlBackend>(&text)
            .load(&mut *conn)
            .await
            .map_err(mysql_error)?;
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let text = self.names().rendered(sql::discard(&id_list(
            targets.iter().map(|target| target.id),
        )));
        uncached::<MysqlBackend>(&text)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(targets
            .into_iter()
            .map(|target| (target.status, target.ordering_key.and_then(utf8)))
            .collect())
    }

    /// Reads the oldest purgeable ids without a lock, then deletes them by
    /// primary key, in id order (see `PURGEABLE` and `PURGE` in `statements.rs`):
    /// purges of several relays, which all start at the oldest rows, wait
    /// for each other at most, and never deadlock. READ COMMITTED: no gap
    /// locks, so a purge never blocks the application's inserts.
    async fn purge(
        &self,
        conn: &mut AsyncMysqlConnection,
        older_than: Duration,
        limit: u32,
    ) -> Result<u64> {
        let mut ids: Vec<TaskId> = cached(&self.sql(sql::PURGEABLE))
            .bind::<BigInt, _>(micros(older_than))
            .bind::<BigInt, _>(i64::from(limit))
            .load::<Id>(&mut *conn)
            .await
            .map_err(mysql_error)?
            .into_iter()
            .map(|row| TaskId::new(row.id))
            .collect();
        if ids.is_empty() {
            return Ok(0);
        }
        ids.sort_unstable();
        self.isolation.apply(conn).await?;
        let deleted = cached::<MysqlBackend>(&self.sql(sql::PURGE))
            .bind::<Text, _>(json_rows::ids(&ids))
            .bind::<BigInt, _>(micros(older_than))
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(deleted as u64)
    }

    async fn record(
        &self,
        conn: &mut AsyncMysqlConnection,
        consumer: &str,
        message_id: &str,
    ) -> Result<u64> {
        let inserted = cached(&self.sql(sql::RECORD))
            .bind::<Text, _>(consumer)
            .bind::<Text, _>(message_id)
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(inserted as u64)
    }

    async fn purge_inbox(
        &self,
        conn: &mut AsyncMysqlConnection,
        older_than: Duration,
        limit: u32,
    ) -> Result<u64> {
        let deleted = cached(&self.sql(sql::PURGE_INBOX))
            .bind::<BigInt, _>(micros(older_than))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(conn)
            .await
            .map_err(mysql_error)?;
        Ok(deleted as u64)
    }
}
