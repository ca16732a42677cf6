//! [`Sqlite`]: the SQLite dialect of the outbox, every primitive bound to
//! its statement in `statements.rs`.
//!
//! SQLite has one writer at a time and needs no row locks nor `SKIP
//! LOCKED`: a write transaction is `BEGIN IMMEDIATE`, which holds the
//! database's write lock from its first statement, so whatever it reads it
//! decides on alone. Claims by id read, decide and write in one such
//! transaction; batch claims, completion writes and the periodic moves are
//! one statement each, which holds the lock from its first step to its
//! commit. The store's clock is the host's ([`timestamp::now`]), read once
//! the lock is held (a single statement reads it just before).

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use chrono::{DateTime, TimeDelta, Utc};
use diesel::{
    OptionalExtension, QueryableByName,
    sql_types::{BigInt, Binary, Nullable, Text},
    sqlite::Sqlite as SqliteBackend,
};
use diesel_async::{
    RunQueryDsl,
    pooled_connection::{
        AsyncDieselConnectionManager,
        deadpool::{Pool, PoolError},
    },
};
use diesel_outbox_core::{
    Ages, BatchRequest, ClaimedTask, Error, Heartbeat, LeaseRequest, OutboxId, RelaySeen, Rescued,
    Result, Stats, Status, Task, TaskId,
    transition::{self, Completion, EXPIRED_ERROR},
};
use diesel_outbox_sql::{
    CachedQuery, Dialect, Inserted, KeyCounts, Names, ReadRow, WriteTurn, cached,
    flows::claim::settle,
    micros,
    rows::{
        Ages as AgesRow, Applied, Count, KeyCount, Micros, Moved, RelayRow, rescued, tally_statuses,
    },
    sqlite_error, sqlite_pool_error, uncached,
};

use crate::{
    AsyncSqliteConnection, connection,
    insert::{self, Inserts, Row},
    statements as sql,
    tables::{ClaimRow, ClaimSqlType, TaskRow},
    timestamp::{self, to_column, to_micros},
};

/// The SQLite backend: the store's write turn and its prepared insert
/// shapes, shared by its clones.
///
/// Within a process, the store's writes and the `transaction` helpers'
/// transactions queue for a turn in the order they arrive: SQLite's busy
/// handler retries on a timer, so without the queue a writer that keeps
/// missing the lock can wait far longer than the others, and a second
/// relay's first claim may come only after the first relay's whole round.
/// A wait for the turn lasts at most [`BUSY_TIMEOUT`](crate::BUSY_TIMEOUT),
/// as a wait for the lock does. Build one store per database file and
/// clone it into every worker of the process.
#[derive(Debug, Clone)]
pub struct Sqlite {
    writes: WriteTurn,
    inserts: Arc<Inserts>,
    names: Names,
}

/// A write turn of its own, whose waits last as long as a connection's
/// wait for the database's lock ([`BUSY_TIMEOUT`](crate::BUSY_TIMEOUT)).
impl Default for Sqlite {
    fn default() -> Self {
        Self {
            writes: WriteTurn::new(connection::BUSY_TIMEOUT),
            inserts: Arc::default(),
            names: Names::default(),
        }
    }
}

type Query<'q> = CachedQuery<'q, SqliteBackend>;

/// `query` with each of `ids` bound, in order.
fn bind_ids<'q>(query: Query<'q>, ids: &[TaskId]) -> Query<'q> {
    ids.iter()
        .fold(query, |query, id| query.bind::<BigInt, _>(id.get()))
}

/// `query` with each of `keys` bound, in order.
fn bind_keys<'q>(query: Query<'q>, keys: impl IntoIterator<Item = &'q str>) -> Query<'q> {
    keys.into_iter()
        .fold(query, |query, key| query.bind::<Text, _>(key))
}

/// `now - age`, or the earliest instant when that is before it.
fn cutoff(age: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(age)
        .ok()
        .and_then(|age| timestamp::now().checked_sub_signed(age))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// How long the rows of relays whose heartbeats stopped are kept: a day.
const RELAYS_KEPT_US: i64 = 86_400_000_000;

/// How long from `from` to `to`, zero when `to` is not later.
fn between(from: DateTime<Utc>, to: DateTime<Utc>) -> Duration {
    (to - from).to_std().unwrap_or_default()
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

diesel_outbox_sql::transact_with! {
    /// `BEGIN IMMEDIATE`: the write lock from the first statement, so no other
    /// writer, in this process or another, runs until it ends. Bodies read the
    /// clock once the lock is held, so times written by successive transactions
    /// never go back.
    Sqlite,
    AsyncSqliteConnection,
    immediate_transaction
}

impl Dialect for Sqlite {
    type Conn = AsyncSqliteConnection;
    type Manager = AsyncDieselConnectionManager<AsyncSqliteConnection>;
    type Backend = SqliteBackend;
    type Row = Row;
    type TaskRow = TaskRow;

    const NAME: &'static str = "SQLite";
    const NO_BYTES: &'static str = "X''";

    /// Each connection opened by [`establish`](crate::establish). A few
    /// connections are plenty: writes take turns anyway, and reads (stats,
    /// `get`) never wait for the write lock, only for a free connection.
    fn connect(database_url: &str, max_size: usize) -> Result<(Pool<AsyncSqliteConnection>, Self)> {
        connection::check_url(database_url)?;
        let pool = diesel_outbox_sql::build_pool(
            database_url,
            max_size,
            connection::manager_config(),
            None,
        )?;
        Ok((pool, Self::default()))
    }

    /// The pool's connections should have the settings of
    /// [`establish`](crate::establish) (WAL, busy timeout, full sync, a
    /// memory map);
    /// [`manager_config`](crate::manager_config) builds such a pool.
    fn for_pool(_: &Pool<AsyncSqliteConnection>) -> Self {
        Self::default()
    }

    fn names(&self) -> &Names {
        &self.names
    }

    /// The insert shapes kept so far were chosen for the old names' text.
    fn set_names(&mut self, names: Names) -> Result<()> {
        self.names = names.for_backend(diesel_outbox_sql::BackendKind::Sqlite)?;
        self.inserts = Arc::default();
        Ok(())
    }

    fn error(error: diesel::result::Error) -> Error {
        sqlite_error(error)
    }

    fn pool_error(error: PoolError) -> Error {
        sqlite_pool_error(error)
    }

    fn write_turn(&self) -> Option<&WriteTurn> {
        Some(&self.writes)
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
        query: CachedQuery<'f, SqliteBackend>,
        field: &'static str,
        at: DateTime<Utc>,
    ) -> Result<CachedQuery<'f, SqliteBackend>> {
        Ok(query.bind::<BigInt, _>(to_column(field, at)?))
    }

    async fn insert(
        &self,
        conn: &mut AsyncSqliteConnection,
        rows: &[Row],
        heads: &[bool],
    ) -> Result<Vec<Inserted>> {
        insert::insert(conn, &self.names, rows, heads, &self.inserts).await
    }

    async fn stats(&self, conn: &mut AsyncSqliteConnection) -> Result<Stats> {
        let counts: Vec<Count> = cached::<SqliteBackend>(&self.sql(sql::COUNTS))
            .load(&mut *conn)
            .await
            .map_err(sqlite_error)?;
        let mut stats = Stats::default();
        tally_statuses(&mut stats, counts);
        Ok(stats)
    }

    async fn ages(&self, conn: &mut AsyncSqliteConnection) -> Result<Ages> {
        let at: AgesRow = cached::<SqliteBackend>(&self.sql(sql::AGES))
            .get_result(conn)
            .await
            .map_err(sqlite_error)?;
        let now = timestamp::to_micros(timestamp::now());
        let age = |at: Option<i64>| at.map(|at| now.saturating_sub(at));
        Ok(Ages::from_us(
            age(at.available),
            age(at.waiting),
            age(at.running),
        ))
    }

    async fn beat(&self, conn: &mut AsyncSqliteConnection, beat: &Heartbeat) -> Result<()> {
        let now = timestamp::to_micros(timestamp::now());
        let ago = |age: std::time::Duration| now.saturating_sub(micros(age));
        cached::<SqliteBackend>(&self.sql(sql::BEAT))
            .bind::<Text, _>(&beat.owner)
            .bind::<Text, _>(&beat.host)
            .bind::<BigInt, _>(i64::from(beat.pid))
            .bind::<Text, _>(&beat.version)
            .bind::<BigInt, _>(ago(beat.up))
            .bind::<BigInt, _>(now)
            .bind::<BigInt, _>(now.saturating_add(micros(beat.ttl)))
            .bind::<Nullable<BigInt>, _>(beat.since_claim.map(ago))
            .bind::<Nullable<BigInt>, _>(beat.since_write.map(ago))
            .execute(&mut *conn)
            .await
            .map_err(sqlite_error)?;
        cached::<SqliteBackend>(&self.sql(sql::SWEEP_RELAYS))
            .bind::<BigInt, _>(now.saturating_sub(RELAYS_KEPT_US))
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(())
    }

    async fn forget_relay(&self, conn: &mut AsyncSqliteConnection, owner: &str) -> Result<()> {
        cached::<SqliteBackend>(&self.sql(sql::FORGET_RELAY))
            .bind::<Text, _>(owner)
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(())
    }

    async fn relays(&self, conn: &mut AsyncSqliteConnection) -> Result<Vec<RelaySeen>> {
        let now = timestamp::to_micros(timestamp::now());
        let rows: Vec<RelayRow> = cached::<SqliteBackend>(&self.sql(sql::RELAYS))
            .bind::<BigInt, _>(now.saturating_sub(RELAYS_KEPT_US))
            .bind::<BigInt, _>(now)
            .load(conn)
            .await
            .map_err(sqlite_error)?;
        let age = |at: Option<i64>| at.map(|at| now.saturating_sub(at));
        Ok(rows
            .into_iter()
            .map(|row| {
                RelayRow {
                    started_us: age(row.started_us),
                    beat_us: age(row.beat_us),
                    claim_us: age(row.claim_us),
                    write_us: age(row.write_us),
                    ..row
                }
                .seen()
            })
            .collect())
    }

    async fn outbox_id(&self, conn: &mut AsyncSqliteConnection) -> Result<OutboxId> {
        diesel_outbox_sql::read_outbox_id(conn, self.names(), sqlite_error).await
    }

    async fn next_due(&self, conn: &mut AsyncSqliteConnection) -> Result<Option<Duration>> {
        let next: Micros = cached::<SqliteBackend>(&self.sql(sql::NEXT_DUE))
            .get_result(conn)
            .await
            .map_err(sqlite_error)?;
        let now = timestamp::now();
        Ok(next.us.map(|us| match timestamp::from_micros(us) {
            Some(due) => between(now, due),
            // Beyond what chrono holds: ages away, or long past.
            None if us > 0 => Duration::MAX,
            None => Duration::ZERO,
        }))
    }

    /// Inside the claim's `BEGIN IMMEDIATE`: nothing else writes until it
    /// ends, so the row needs no lock of its own.
    async fn lock_task(
        &self,
        conn: &mut AsyncSqliteConnection,
        id: TaskId,
    ) -> Result<Option<(ReadRow, DateTime<Utc>)>> {
        let row: Option<TaskRow> = cached::<SqliteBackend>(&self.sql(sql::LOCK_TASK))
            .bind::<BigInt, _>(id.get())
            .get_result(conn)
            .await
            .optional()
            .map_err(sqlite_error)?;
        Ok(row.map(|row| (row.decode(), timestamp::now())))
    }

    async fn set_leases(
        &self,
        conn: &mut AsyncSqliteConnection,
        ids: &[TaskId],
        lease: &LeaseRequest,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let until = to_column("lease_duration", transition::after(now, lease.duration))?;
        let text = self.names().rendered(sql::set_leases(ids.len()));
        let query = cached::<SqliteBackend>(&text)
            .bind::<Text, _>(&lease.owner)
            .bind::<BigInt, _>(until)
            .bind::<BigInt, _>(to_micros(now));
        bind_ids(query, ids)
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(())
    }

    async fn expire(
        &self,
        conn: &mut AsyncSqliteConnection,
        ids: &[TaskId],
        now: DateTime<Utc>,
    ) -> Result<()> {
        let text = self.names().rendered(sql::expire(ids.len()));
        let query = cached::<SqliteBackend>(&text)
            .bind::<BigInt, _>(to_micros(now))
            .bind::<Text, _>(EXPIRED_ERROR);
        bind_ids(query, ids)
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(())
    }

    async fn fail_unreadable(
        &self,
        conn: &mut AsyncSqliteConnection,
        id: TaskId,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let failed = cached::<SqliteBackend>(&self.sql(sql::FAIL_UNREADABLE))
            .bind::<BigInt, _>(to_micros(now))
            .bind::<Text, _>(reason)
            .bind::<BigInt, _>(id.get())
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(failed > 0)
    }

    /// One statement (`CLAIM_DUE`), so no
    /// transaction around it: its time is read before it waits for the
    /// write lock, so a claim that waited gets a lease shorter by the wait
    /// (the worker times its lease from before the claim anyway).
    async fn claim_due(
        &self,
        conn: &mut AsyncSqliteConnection,
        request: &BatchRequest,
    ) -> Result<Vec<ClaimedTask>> {
        let limit =
            i64::try_from(request.limit).map_err(|_| Error::invalid("batch_size", "too large"))?;
        let now = timestamp::now();
        let until = to_column(
            "lease_duration",
            transition::after(now, request.lease.duration),
        )?;
        let rows: Vec<ClaimRow> = cached::<SqliteBackend>(&self.sql(sql::CLAIM_DUE))
            .bind::<BigInt, _>(to_micros(now))
            .bind::<BigInt, _>(request.after.map_or(0, TaskId::get))
            .bind::<BigInt, _>(to_micros(request.due_by.unwrap_or(now)))
            .bind::<BigInt, _>(limit)
            .bind::<Text, _>(&request.lease.owner)
            .bind::<BigInt, _>(until)
            .bind::<Text, _>(EXPIRED_ERROR)
            .returning::<ClaimSqlType>()
            .load(&mut *conn)
            .await
            .map_err(sqlite_error)?;
        let taken = rows.into_iter().map(ClaimRow::taken).collect();
        settle(self, conn, taken, &request.lease.owner).await
    }

    /// Up to 2,000 results per statement (8 values each, well inside
    /// SQLite's limit of 32,766 parameters). A stale and a current result
    /// for one task may land in different statements: the stale one matches
    /// no row in either.
    async fn apply_completions(
        &self,
        conn: &mut AsyncSqliteConnection,
        completions: &[Completion],
    ) -> Result<Vec<(TaskId, i64)>> {
        let now = timestamp::now();
        let mut applied = Vec::new();
        for chunk in completions.chunks(2_000) {
            applied.extend(complete(conn, &self.names, chunk, now).await?);
        }
        Ok(applied.into_iter().map(Applied::claim).collect())
    }

    /// A write: as the first statement of an enqueue, it takes the write lock.
    async fn open_keys(
        &self,
        conn: &mut AsyncSqliteConnection,
        counts: &KeyCounts<'_>,
    ) -> Result<Vec<KeyCount>> {
        let text = self.names().rendered(sql::open_keys(counts.len()));
        // One key (the common case) is one shape, prepared once per connection.
        let mut query = if counts.len() == 1 {
            cached::<SqliteBackend>(&text)
        } else {
            uncached::<SqliteBackend>(&text)
        };
        for (key, n) in counts {
            query = query.bind::<Text, _>(*key).bind::<BigInt, _>(*n);
        }
        let rows: Vec<KeyCount> = query.load(conn).await.map_err(sqlite_error)?;
        Ok(rows)
    }

    async fn take_keys(
        &self,
        conn: &mut AsyncSqliteConnection,
        counts: &KeyCounts<'_>,
    ) -> Result<Vec<KeyCount>> {
        let text = self.names().rendered(sql::take_keys(counts.len()));
        let mut query = uncached::<SqliteBackend>(&text);
        for (key, n) in counts {
            query = query.bind::<Text, _>(*key).bind::<BigInt, _>(*n);
        }
        let rows: Vec<KeyCount> = bind_keys(query, counts.keys().copied())
            .load(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(rows)
    }

    async fn move_keys_on(
        &self,
        conn: &mut AsyncSqliteConnection,
        next: &[&str],
        emptied: &[&str],
    ) -> Result<()> {
        if !emptied.is_empty() {
            let text = self.names().rendered(sql::drop_keys(emptied.len()));
            let query = uncached::<SqliteBackend>(&text);
            bind_keys(query, emptied.iter().copied())
                .execute(&mut *conn)
                .await
                .map_err(sqlite_error)?;
        }
        if !next.is_empty() {
            let now = to_micros(timestamp::now());
            let text = self.names().rendered(sql::unblock(next.len()));
            let query = uncached::<SqliteBackend>(&text)
                .bind::<BigInt, _>(now)
                .bind::<BigInt, _>(now);
            bind_keys(query, next.iter().copied())
                .execute(conn)
                .await
                .map_err(sqlite_error)?;
        }
        Ok(())
    }

    async fn promote(&self, conn: &mut AsyncSqliteConnection, limit: u32) -> Result<u64> {
        let moved = cached::<SqliteBackend>(&self.sql(sql::PROMOTE))
            .bind::<BigInt, _>(to_micros(timestamp::now()))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(moved as u64)
    }

    async fn rescue(&self, conn: &mut AsyncSqliteConnection, limit: u32) -> Result<Rescued> {
        let moved: Vec<Moved> = cached::<SqliteBackend>(&self.sql(sql::RESCUE))
            .bind::<BigInt, _>(to_micros(timestamp::now()))
            .bind::<BigInt, _>(i64::from(limit))
            .bind::<Text, _>(transition::LAPSED_ERROR)
            .bind::<Text, _>(transition::gave_up(
                transition::RUNS,
                transition::LAPSED_ERROR,
            ))
            .bind::<Text, _>(transition::RUNS)
            .load(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(rescued(moved))
    }

    async fn requeue(&self, conn: &mut AsyncSqliteConnection, ids: &[TaskId]) -> Result<u64> {
        let text = self.names().rendered(sql::requeue(ids.len()));
        let query = uncached::<SqliteBackend>(&text).bind::<BigInt, _>(to_micros(timestamp::now()));
        let changed = bind_ids(query, ids)
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(changed as u64)
    }

    /// None: the discard's write transaction keeps every other writer out.
    async fn keys_of(
        &self,
        _: &mut AsyncSqliteConnection,
        _: &[TaskId],
    ) -> Result<BTreeSet<String>> {
        Ok(BTreeSet::new())
    }

    async fn lock_keys(&self, _: &mut AsyncSqliteConnection, _: &BTreeSet<String>) -> Result<()> {
        Ok(())
    }

    /// Read and written in one write transaction: no other writer can
    /// claim, complete or move a task in between, so nothing needs skipping.
    async fn discard_rows(
        &self,
        conn: &mut AsyncSqliteConnection,
        ids: &[TaskId],
    ) -> Result<Vec<(String, Option<String>)>> {
        let text = self.names().rendered(sql::discardable(ids.len()));
        let query = uncached::<SqliteBackend>(&text);
        let targets: Vec<Discardable> = bind_ids(query, ids)
            .load(&mut *conn)
            .await
            .map_err(sqlite_error)?;
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let chosen: Vec<TaskId> = targets.iter().map(|t| TaskId::new(t.id)).collect();
        let text = self.names().rendered(sql::discard(chosen.len()));
        let query = uncached::<SqliteBackend>(&text).bind::<BigInt, _>(to_micros(timestamp::now()));
        bind_ids(query, &chosen)
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(targets
            .into_iter()
            .map(|t| {
                let key = t.ordering_key.and_then(|key| String::from_utf8(key).ok());
                (t.status, key)
            })
            .collect())
    }

    async fn purge(
        &self,
        conn: &mut AsyncSqliteConnection,
        older_than: Duration,
        limit: u32,
    ) -> Result<u64> {
        let deleted = cached::<SqliteBackend>(&self.sql(sql::PURGE))
            .bind::<BigInt, _>(to_micros(cutoff(older_than)))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(deleted as u64)
    }

    async fn record(
        &self,
        conn: &mut AsyncSqliteConnection,
        consumer: &str,
        message_id: &str,
    ) -> Result<u64> {
        let inserted = cached::<SqliteBackend>(&self.sql(sql::RECORD))
            .bind::<Text, _>(consumer)
            .bind::<Text, _>(message_id)
            .bind::<BigInt, _>(to_micros(timestamp::now()))
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(inserted as u64)
    }

    async fn purge_inbox(
        &self,
        conn: &mut AsyncSqliteConnection,
        older_than: Duration,
        limit: u32,
    ) -> Result<u64> {
        let deleted = cached::<SqliteBackend>(&self.sql(sql::PURGE_INBOX))
            .bind::<BigInt, _>(to_micros(cutoff(older_than)))
            .bind::<BigInt, _>(i64::from(limit))
            .execute(conn)
            .await
            .map_err(sqlite_error)?;
        Ok(deleted as u64)
    }
}

/// The fenced update of one chunk of results as of `now`; returns the
/// claims whose result applied.
async fn complete(
    conn: &mut AsyncSqliteConnection,
    names: &Names,
    completions: &[Completion],
    now: DateTime<Utc>,
) -> Result<Vec<Applied>> {
    let Some(first) = completions.first() else {
        return Ok(Vec::new());
    };
    let owner: &str = &first.fence.owner;
    if completions
        .iter()
        .all(|c| c.status == Status::Succeeded && &*c.fence.owner == owner)
    {
        let text = names.rendered(sql::succeed(completions.len()));
        let mut query = uncached::<SqliteBackend>(&text).bind::<BigInt, _>(to_micros(now));
        for c in completions {
            query = query
                .bind::<BigInt, _>(c.fence.id.get())
                .bind::<BigInt, _>(c.fence.attempt);
        }
        return query
            .bind::<Text, _>(owner)
            .load(conn)
            .await
            .map_err(sqlite_error);
    }
    let text = names.rendered(sql::complete(completions.len()));
    let mut query = uncached::<SqliteBackend>(&text);
    for c in completions {
        // A retry past the column's range is refused here, naming the
        // field, before anything is written; the worker then records the
        // task failed with the reason.
        let next_attempt_at = c
            .retry_in
            .map(|delay| to_column("next_attempt_at", transition::after(now, delay)))
            .transpose()?;
        let finished_at = c.status.is_finished().then(|| to_micros(now));
        query = query
            .bind::<BigInt, _>(c.fence.id.get())
            .bind::<Text, _>(&*c.fence.owner)
            .bind::<BigInt, _>(c.fence.attempt)
            .bind::<Text, _>(c.status.as_str())
            .bind::<Nullable<BigInt>, _>(next_attempt_at)
            .bind::<Nullable<Text>, _>(c.last_error.as_deref())
            .bind::<BigInt, _>(i64::from(c.released))
            .bind::<Nullable<BigInt>, _>(finished_at);
    }
    query
        .bind::<BigInt, _>(to_micros(now))
        .load(conn)
        .await
        .map_err(sqlite_error)
}
