//! [`Postgres`]: the PostgreSQL dialect of the outbox, every primitive
//! bound to its statement in `statements.rs`.
//!
//! PostgreSQL replaces both claim flows with one statement each, for speed
//! (`CLAIM_ONE` and `CLAIM_DUE` are `transition::claim` and
//! `transition::expire` in SQL). Its other statements apply what the flows
//! decided, each re-checking its rule in its `WHERE` clause (the fenced
//! completions, promotion, rescue, unblocking a key, requeue, discard).
//! The conformance suite's model check compares the rows each leaves with
//! the transition functions.

use std::{collections::BTreeSet, time::Duration};

use chrono::{DateTime, Utc};
use diesel::{
    OptionalExtension, QueryableByName,
    sql_types::{Array, BigInt, Bool, Nullable, Text, Timestamptz},
};
use diesel_async::{
    AsyncPgConnection, RunQueryDsl,
    pooled_connection::{
        AsyncDieselConnectionManager,
        deadpool::{Pool, PoolError},
    },
};
use diesel_outbox_core::{
    Ages, BatchRequest, ClaimOutcome, ClaimedTask, Error, Heartbeat, LeaseRequest, OutboxId,
    RelaySeen, Rescued, Result, Stats, Status, Task, TaskId, Wakeups,
    transition::{self, Availability, Completion, EXPIRED_ERROR},
};
use diesel_outbox_sql::{
    CachedQuery, Dialect, Inserted, KeyCounts, Names, Notify, ReadRow, cached,
    flows::claim::settle,
    micros, postgres_error, postgres_pool_error,
    rows::{
        Ages as AgesRow, Applied, Count, KeyCount, Micros, Moved, RelayRow, duration_us, rescued,
        tally_statuses, to_u64,
    },
};

use crate::{
    insert::{self, Row},
    listen, statements as sql,
    tables::{ClaimRow, ClaimSqlType, TaskRow},
};

/// The PostgreSQL backend. Its one setting: whether enqueues wake relays
/// at commit ([`with_notify`](diesel_outbox_sql::SqlStore::with_notify)).
#[derive(Debug, Clone, Default)]
pub struct Postgres {
    notify: bool,
    names: Names,
}

/// Below this many rows by the planner's estimate (`-1` before the table was
/// first analysed), succeeded rows are counted exactly: an index read of
/// that size takes milliseconds.
const EXACT_BELOW: i64 = 100_000;

/// A row a claim by id did not take, with the database's time.
#[derive(QueryableByName)]
struct Inspected {
    #[diesel(embed)]
    task: TaskRow,
    #[diesel(sql_type = Timestamptz)]
    db_now: DateTime<Utc>,
}

#[derive(QueryableByName)]
struct Key {
    #[diesel(sql_type = Nullable<Text>)]
    ordering_key: Option<String>,
}

#[derive(QueryableByName)]
struct Discarded {
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Nullable<Text>)]
    ordering_key: Option<String>,
}

/// One array parameter: `value` of every completion, in order.
fn column<'c, T>(completions: &'c [Completion], value: impl Fn(&'c Completion) -> T) -> Vec<T> {
    completions.iter().map(value).collect()
}

/// The owner of every result in `completions` when each is a success and
/// they share one owner: they go out as `SUCCEED`, with fewer arrays.
fn sole_owner_of_successes(completions: &[Completion]) -> Option<&str> {
    let owner: &str = &completions.first()?.fence.owner;
    completions
        .iter()
        .all(|c| c.status == Status::Succeeded && &*c.fence.owner == owner)
        .then_some(owner)
}

/// `query` (`SUCCEED` when `owner` is given, `COMPLETE` otherwise, either
/// with or without its `RETURNING`) with `completions` bound as its arrays.
fn bind_completions<'f>(
    query: CachedQuery<'f, diesel::pg::Pg>,
    completions: &'f [Completion],
    owner: Option<&'f str>,
) -> CachedQuery<'f, diesel::pg::Pg> {
    let ids = column(completions, |c| c.fence.id.get());
    let attempts = column(completions, |c| c.fence.attempt);
    match owner {
        Some(owner) => query
            .bind::<Array<BigInt>, _>(ids)
            .bind::<Array<BigInt>, _>(attempts)
            .bind::<Text, _>(owner),
        None => query
            .bind::<Array<BigInt>, _>(ids)
            .bind::<Array<Text>, _>(column(completions, |c| &*c.fence.owner))
            .bind::<Array<BigInt>, _>(attempts)
            .bind::<Array<Text>, _>(column(completions, |c| c.status.as_str()))
            .bind::<Array<BigInt>, _>(column(completions, |c| c.retry_in.map_or(0, micros)))
            .bind::<Array<Nullable<Text>>, _>(column(completions, |c| c.last_error.as_deref()))
            .bind::<Array<Bool>, _>(column(completions, |c| c.released)),
    }
}

/// The ids as an `int8[]`.
fn ids(ids: &[TaskId]) -> Vec<i64> {
    ids.iter().map(|id| id.get()).collect()
}

diesel_outbox_sql::transact_with! {
    /// A plain transaction: READ COMMITTED, PostgreSQL's default, under which a
    /// statement after a lock wait sees what the lock's holder committed.
    Postgres,
    AsyncPgConnection,
    transaction
}

impl Notify for Postgres {
    fn notify_on_enqueue(&mut self) {
        self.notify = true;
    }

    fn notifies(&self) -> bool {
        self.notify
    }
}

impl Dialect for Postgres {
    type Conn = AsyncPgConnection;
    type Manager = AsyncDieselConnectionManager<AsyncPgConnection>;
    type Backend = diesel::pg::Pg;
    type Row = Row;
    type TaskRow = TaskRow;

    const NAME: &'static str = "PostgreSQL";
    const NO_BYTES: &'static str = "''::bytea";

    /// The pool recycles connections without a round trip
    /// (`RecyclingMethod::Fast`): a PostgreSQL connection knows when the
    /// server closed it, and the pool drops such a connection instead of
    /// handing it out, so the `SELECT 1` of the default check would cost
    /// every checkout a round trip to catch only the uses that race the
    /// server's goodbye. Those fail with a retryable connection error, which
    /// the relay and the result writer retry; nothing is lost.
    fn connect(database_url: &str, max_size: usize) -> Result<(Pool<AsyncPgConnection>, Self)> {
        let config = crate::connection::manager_config();
        let pool = diesel_outbox_sql::build_pool(database_url, max_size, config, None)?;
        Ok((pool, Self::default()))
    }

    fn for_pool(_: &Pool<AsyncPgConnection>) -> Self {
        Self::default()
    }

    fn names(&self) -> &Names {
        &self.names
    }

    fn set_names(&mut self, names: Names) -> Result<()> {
        self.names = names.for_backend(diesel_outbox_sql::BackendKind::Postgres)?;
        Ok(())
    }

    fn error(error: diesel::result::Error) -> Error {
        postgres_error(error)
    }

    fn pool_error(error: PoolError) -> Error {
        postgres_pool_error(error)
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
        query: CachedQuery<'f, diesel::pg::Pg>,
        field: &'static str,
        at: DateTime<Utc>,
    ) -> Result<CachedQuery<'f, diesel::pg::Pg>> {
        crate::timestamp::check(field, Some(at))?;
        Ok(query.bind::<Timestamptz, _>(at))
    }

    async fn insert(
        &self,
        conn: &mut AsyncPgConnection,
        rows: &[Row],
        heads: &[bool],
    ) -> Result<Vec<Inserted>> {
        insert::insert(conn, &self.names, rows, heads, self.notify).await
    }

    /// Exact counts but for succeeded rows on a large table, which come
    /// from the planner's estimate of the table.
    async fn stats(&self, conn: &mut AsyncPgConnection) -> Result<Stats> {
        let counts: Vec<Count> = diesel::sql_query(&*self.sql(sql::STATS))
            .load(&mut *conn)
            .await
            .map_err(postgres_error)?;
        let mut stats = Stats::default();
        let (mut table, mut rows) = (-1, Vec::new());
        for count in counts {
            match count.status.as_str() {
                "table" => table = count.n,
                _ => rows.push(count),
            }
        }
        let exact = tally_statuses(&mut stats, rows);
        stats.succeeded = if table < EXACT_BELOW {
            let succeeded: Count = diesel::sql_query(&*self.sql(sql::COUNT_SUCCEEDED))
                .get_result(conn)
                .await
                .map_err(postgres_error)?;
            to_u64(succeeded.n)
        } else {
            to_u64(table - exact)
        };
        Ok(stats)
    }

    async fn ages(&self, conn: &mut AsyncPgConnection) -> Result<Ages> {
        let ages: AgesRow = cached(&self.sql(sql::AGES))
            .get_result(conn)
            .await
            .map_err(postgres_error)?;
        Ok(Ages::from_us(ages.available, ages.waiting, ages.running))
    }

    async fn beat(&self, conn: &mut AsyncPgConnection, beat: &Heartbeat) -> Result<()> {
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
            .map_err(postgres_error)?;
        cached(&self.sql(sql::SWEEP_RELAYS))
            .execute(conn)
            .await
            .map_err(postgres_error)?;
        Ok(())
    }

    async fn forget_relay(&self, conn: &mut AsyncPgConnection, owner: &str) -> Result<()> {
        cached(&self.sql(sql::FORGET_RELAY))
            .bind::<Text, _>(owner)
            .execute(conn)
            .await
            .map_err(postgres_error)?;
        Ok(())
    }

    async fn relays(&self, conn: &mut AsyncPgConnection) -> Result<Vec<RelaySeen>> {
        let rows: Vec<RelayRow> = cached(&self.sql(sql::RELAYS))
            .load(conn)
            .await
            .map_err(postgres_error)?;
        Ok(rows.into_iter().map(RelayRow::seen).collect())
    }

    async fn outbox_id(&self, conn: &mut AsyncPgConnection) -> Result<OutboxId> {
        diesel_outbox_sql::read_outbox_id(conn, self.names(), postgres_error).await
    }

    async fn next_due(&self, conn: &mut AsyncPgConnection) -> Result<Option<Duration>> {
        let next: Micros = cached(&self.sql(sql::NEXT_DUE))
            .get_result(conn)
            .await
            .map_err(postgres_error)?;
        Ok(next.us.map(duration_us))
    }

    /// `CLAIM_ONE`; when it matches
    /// nothing, the row is read back and [`transition::availability`] says
    /// why. Each pass either claims, or reads the row and acts on what the
    /// rules say; a pass repeats only when a concurrent writer changed the
    /// row in between.
    async fn claim_one(
        &self,
        conn: &mut AsyncPgConnection,
        id: TaskId,
        lease: &LeaseRequest,
    ) -> Result<ClaimOutcome> {
        for _ in 0..3 {
            let claimed: Option<TaskRow> = cached(&self.sql(sql::CLAIM_ONE))
                .bind::<BigInt, _>(id.get())
                .bind::<Text, _>(&lease.owner)
                .bind::<BigInt, _>(micros(lease.duration))
                .returning::<crate::schema::outbox_tasks::SqlType>()
                .get_result(&mut *conn)
                .await
                .optional()
                .map_err(postgres_error)?;
            if let Some(row) = claimed {
                let records = settle(self, conn, vec![row.taken()], &lease.owner).await?;
                return match records.into_iter().next() {
                    Some(record) => Ok(ClaimOutcome::Claimed(Box::new(record))),
                    // Unreadable: `settle` failed the task; `get` says why.
                    None => Ok(ClaimOutcome::Finished(Status::Failed)),
                };
            }
            let inspected: Option<Inspected> = cached(&self.sql(sql::INSPECT))
                .bind::<BigInt, _>(id.get())
                .get_result(&mut *conn)
                .await
                .optional()
                .map_err(postgres_error)?;
            let Some(inspected) = inspected else {
                return Ok(ClaimOutcome::NotFound);
            };
            let record = inspected.task.decode().map_err(Error::from)?;
            match transition::availability(&record.state(), inspected.db_now) {
                Availability::Claimable => continue,
                Availability::Expired => {
                    let expired = cached(&self.sql(sql::EXPIRE_ONE))
                        .bind::<BigInt, _>(id.get())
                        .bind::<Text, _>(EXPIRED_ERROR)
                        .execute(&mut *conn)
                        .await
                        .map_err(postgres_error)?;
                    if expired == 1 {
                        return Ok(ClaimOutcome::Expired);
                    }
                }
                Availability::Leased { until } => return Ok(ClaimOutcome::Leased { until }),
                Availability::NotDue { at } => return Ok(ClaimOutcome::NotDue { at }),
                Availability::Blocked => return Ok(ClaimOutcome::Blocked),
                Availability::Finished(status) => return Ok(ClaimOutcome::Finished(status)),
            }
        }
        // Still contended after three passes: someone else is working on it.
        let until = transition::after(Utc::now(), lease.duration);
        Ok(ClaimOutcome::Leased { until })
    }

    /// `CLAIM_DUE`, one statement.
    async fn claim_due(
        &self,
        conn: &mut AsyncPgConnection,
        request: &BatchRequest,
    ) -> Result<Vec<ClaimedTask>> {
        let limit =
            i64::try_from(request.limit).map_err(|_| Error::invalid("batch_size", "too large"))?;
        let rows: Vec<ClaimRow> = cached(&self.sql(sql::CLAIM_DUE))
            .bind::<BigInt, _>(request.after.map_or(0, TaskId::get))
            .bind::<BigInt, _>(limit)
            .bind::<Text, _>(&request.lease.owner)
            .bind::<BigInt, _>(micros(request.lease.duration))
            .bind::<Text, _>(EXPIRED_ERROR)
            .bind::<Nullable<Timestamptz>, _>(request.due_by)
            .returning::<ClaimSqlType>()
            .load(&mut *conn)
            .await
            .map_err(postgres_error)?;
        let taken = rows.into_iter().map(ClaimRow::taken).collect();
        settle(self, conn, taken, &request.lease.owner).await
    }

    /// One statement for the whole batch:
    /// `SUCCEED` when every result is a
    /// success for one owner, `COMPLETE`
    /// otherwise.
    async fn apply_completions(
        &self,
        conn: &mut AsyncPgConnection,
        completions: &[Completion],
    ) -> Result<Vec<(TaskId, i64)>> {
        if completions.is_empty() {
            return Ok(Vec::new());
        }
        let owner = sole_owner_of_successes(completions);
        let sql = self.sql(match owner {
            Some(_) => sql::SUCCEED,
            None => sql::COMPLETE,
        });
        let applied: Vec<Applied> = bind_completions(cached(&sql), completions, owner)
            .load(conn)
            .await
            .map_err(postgres_error)?;
        Ok(applied.into_iter().map(Applied::claim).collect())
    }

    /// The statements of [`apply_completions`](Self::apply_completions)
    /// without their `RETURNING`: the server sends no row back, and none is
    /// decoded.
    async fn apply_counted(
        &self,
        conn: &mut AsyncPgConnection,
        completions: &[Completion],
    ) -> Result<u64> {
        if completions.is_empty() {
            return Ok(0);
        }
        let owner = sole_owner_of_successes(completions);
        let sql = self.sql(match owner {
            Some(_) => sql::SUCCEED_COUNTED,
            None => sql::COMPLETE_COUNTED,
        });
        let applied = bind_completions(cached(&sql), completions, owner)
            .execute(conn)
            .await
            .map_err(postgres_error)?;
        Ok(applied as u64)
    }

    async fn open_keys(
        &self,
        conn: &mut AsyncPgConnection,
        counts: &KeyCounts<'_>,
    ) -> Result<Vec<KeyCount>> {
        key_counts(conn, &self.sql(sql::OPEN_KEYS), counts).await
    }

    async fn take_keys(
        &self,
        conn: &mut AsyncPgConnection,
        counts: &KeyCounts<'_>,
    ) -> Result<Vec<KeyCount>> {
        key_counts(conn, &self.sql(sql::TAKE_KEYS), counts).await
    }

    async fn move_keys_on(
        &self,
        conn: &mut AsyncPgConnection,
        next: &[&str],
        emptied: &[&str],
    ) -> Result<()> {
        cached(&self.sql(sql::MOVE_KEYS_ON))
            .bind::<Array<Text>, _>(next)
            .bind::<Array<Text>, _>(emptied)
            .execute(conn)
            .await
            .map_err(postgres_error)?;
        Ok(())
    }

    async fn promote(&self, conn: &mut AsyncPgConnection, limit: u32) -> Result<u64> {
        let moved = cached(&self.sql(sql::PROMOTE))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(conn)
            .await
            .map_err(postgres_error)?;
        Ok(moved as u64)
    }

    async fn rescue(&self, conn: &mut AsyncPgConnection, limit: u32) -> Result<Rescued> {
        let moved: Vec<Moved> = cached(&self.sql(sql::RESCUE))
            .bind::<BigInt, _>(i64::from(limit))
            .bind::<Text, _>(transition::LAPSED_ERROR)
            .bind::<Text, _>(transition::gave_up(
                transition::RUNS,
                transition::LAPSED_ERROR,
            ))
            .bind::<Text, _>(transition::RUNS)
            .load(conn)
            .await
            .map_err(postgres_error)?;
        Ok(rescued(moved))
    }

    async fn requeue(&self, conn: &mut AsyncPgConnection, ids: &[TaskId]) -> Result<u64> {
        let changed = cached(&self.sql(sql::REQUEUE))
            .bind::<Array<BigInt>, _>(self::ids(ids))
            .execute(conn)
            .await
            .map_err(postgres_error)?;
        Ok(changed as u64)
    }

    async fn keys_of(
        &self,
        conn: &mut AsyncPgConnection,
        ids: &[TaskId],
    ) -> Result<BTreeSet<String>> {
        let keys: Vec<Key> = cached(&self.sql(sql::KEYS_OF))
            .bind::<Array<BigInt>, _>(self::ids(ids))
            .load(conn)
            .await
            .map_err(postgres_error)?;
        Ok(keys
            .into_iter()
            .filter_map(|key| key.ordering_key)
            .collect())
    }

    async fn lock_keys(&self, conn: &mut AsyncPgConnection, keys: &BTreeSet<String>) -> Result<()> {
        cached(&self.sql(sql::LOCK_KEYS))
            .bind::<Array<Text>, _>(keys.iter().collect::<Vec<_>>())
            .execute(conn)
            .await
            .map_err(postgres_error)?;
        Ok(())
    }

    async fn discard_rows(
        &self,
        conn: &mut AsyncPgConnection,
        ids: &[TaskId],
    ) -> Result<Vec<(String, Option<String>)>> {
        let discarded: Vec<Discarded> = cached(&self.sql(sql::DISCARD))
            .bind::<Array<BigInt>, _>(self::ids(ids))
            .load(conn)
            .await
            .map_err(postgres_error)?;
        Ok(discarded
            .into_iter()
            .map(|row| (row.status, row.ordering_key))
            .collect())
    }

    async fn purge(
        &self,
        conn: &mut AsyncPgConnection,
        older_than: Duration,
        limit: u32,
    ) -> Result<u64> {
        let deleted = diesel::sql_query(&*self.sql(sql::PURGE))
            .bind::<BigInt, _>(micros(older_than))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(conn)
            .await
            .map_err(postgres_error)?;
        Ok(deleted as u64)
    }

    async fn record(
        &self,
        conn: &mut AsyncPgConnection,
        consumer: &str,
        message_id: &str,
    ) -> Result<u64> {
        let inserted = cached(&self.sql(sql::RECORD))
            .bind::<Text, _>(consumer)
            .bind::<Text, _>(message_id)
            .execute(conn)
            .await
            .map_err(postgres_error)?;
        Ok(inserted as u64)
    }

    async fn purge_inbox(
        &self,
        conn: &mut AsyncPgConnection,
        older_than: Duration,
        limit: u32,
    ) -> Result<u64> {
        let deleted = cached(&self.sql(sql::PURGE_INBOX))
            .bind::<BigInt, _>(micros(older_than))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(conn)
            .await
            .map_err(postgres_error)?;
        Ok(deleted as u64)
    }

    /// With `NOTIFY` on, a connection of the pool listening on the tasks
    /// table's channel ([`CHANNEL`](crate::CHANNEL) by default) for as long
    /// as the stream lives.
    async fn wakeups(&self, pool: &Pool<AsyncPgConnection>) -> Result<Option<Wakeups>> {
        if !self.notify {
            return Ok(None);
        }
        listen::wakeups(pool, &self.names).await.map(Some)
    }
}

/// Runs `statement`, which changes each key's count by its number in
/// `counts` (bound as two arrays), and returns the counts it left.
async fn key_counts(
    conn: &mut AsyncPgConnection,
    statement: &str,
    counts: &KeyCounts<'_>,
) -> Result<Vec<KeyCount>> {
    cached(statement)
        .bind::<Array<Text>, _>(counts.keys().copied().collect::<Vec<_>>())
        .bind::<Array<BigInt>, _>(counts.values().copied().collect::<Vec<_>>())
        .load(conn)
        .await
        .map_err(postgres_error)
}
