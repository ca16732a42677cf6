//! Claims: one task by id for `send`, and batches of available tasks.
//!
//! SQLite has no `SKIP LOCKED` and needs none: it has one writer at a time.
//! A batch claim is one `UPDATE ... RETURNING` statement, which holds the
//! database's write lock from its first step to its commit; a claim by id
//! reads, decides and writes in one `BEGIN IMMEDIATE` transaction. Claims of
//! other relays (in this process or another) wait their turn under the busy
//! timeout instead of taking the same rows. A batch claim reads only the available range of the
//! `(status, id)` index, so its cost does not depend on how many tasks
//! wait, run, are blocked behind their key, or are kept for retention.

use chrono::{DateTime, Utc};
use diesel::{
    OptionalExtension,
    sql_types::{BigInt, Text},
    sqlite::Sqlite,
};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, Error, LeaseRequest, Record, Result, Status, StoredRow, TaskId,
    limits,
    transition::{self, Availability, EXPIRED_ERROR, Fence},
};
use diesel_outbox_sql::{cached, sqlite_error};

use crate::{
    AsyncSqliteConnection, complete,
    row::TaskRow,
    store_transaction::write,
    timestamp::{self, to_column, to_micros},
};

/// Claims task `id` for `lease`, or says why it cannot be claimed now.
pub(crate) async fn one(
    conn: &mut AsyncSqliteConnection,
    id: TaskId,
    lease: &LeaseRequest,
) -> Result<ClaimOutcome> {
    write(conn, async |conn| {
        let now = timestamp::now();
        let row: Option<TaskRow> = cached::<Sqlite>("SELECT * FROM outbox_tasks WHERE id = $1")
            .bind::<BigInt, _>(id.get())
            .get_result(conn)
            .await
            .optional()
            .map_err(sqlite_error)?;
        let Some(row) = row else {
            return Ok(ClaimOutcome::NotFound);
        };
        let Some(record) = decode_or_fail(conn, row, now).await? else {
            return Ok(ClaimOutcome::Finished(Status::Failed));
        };
        match transition::availability(&record.state(), now) {
            Availability::Claimable => {
                let claimed = claim_record(record, lease, now)?;
                set_lease(conn, id, lease, now).await?;
                Ok(ClaimOutcome::Claimed(Box::new(claimed)))
            }
            Availability::Expired => {
                expire(conn, id, now).await?;
                Ok(ClaimOutcome::Expired)
            }
            Availability::Leased { until } => Ok(ClaimOutcome::Leased { until }),
            Availability::NotDue { at } => Ok(ClaimOutcome::NotDue { at }),
            Availability::Blocked => Ok(ClaimOutcome::Blocked),
            Availability::Finished(status) => Ok(ClaimOutcome::Finished(status)),
        }
    })
    .await
}

/// The record after `transition::claim`, as the UPDATE will leave it.
fn claim_record(mut record: Record, lease: &LeaseRequest, now: DateTime<Utc>) -> Result<Record> {
    let (state, _) = transition::claim(
        &record.state(),
        record.id,
        &lease.owner,
        now,
        lease.duration,
    )
    .map_err(|why| Error::database(format!("a claimable row became {why:?}")))?;
    record.status = state.status;
    record.attempts = state.attempts;
    record.lease = state.lease;
    record.updated_at = now;
    Ok(record)
}

async fn set_lease(
    conn: &mut AsyncSqliteConnection,
    id: TaskId,
    lease: &LeaseRequest,
    now: DateTime<Utc>,
) -> Result<()> {
    cached::<Sqlite>(
        "UPDATE outbox_tasks SET status = 'running', attempts = attempts + 1, lease_owner = $1, \
         lease_expires_at = $2, updated_at = $3 WHERE id = $4",
    )
    .bind::<Text, _>(&lease.owner)
    .bind::<BigInt, _>(to_column(
        "lease_duration",
        transition::after(now, lease.duration),
    )?)
    .bind::<BigInt, _>(to_micros(now))
    .bind::<BigInt, _>(id.get())
    .execute(conn)
    .await
    .map_err(sqlite_error)?;
    Ok(())
}

/// [`transition::expire`] in SQL; the task keeps holding its ordering key.
async fn expire(conn: &mut AsyncSqliteConnection, id: TaskId, now: DateTime<Utc>) -> Result<()> {
    cached::<Sqlite>(
        "UPDATE outbox_tasks SET status = 'failed', finished_at = $1, updated_at = $1, \
         last_error = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id = $3",
    )
    .bind::<BigInt, _>(to_micros(now))
    .bind::<Text, _>(EXPIRED_ERROR)
    .bind::<BigInt, _>(id.get())
    .execute(conn)
    .await
    .map_err(sqlite_error)?;
    Ok(())
}

/// Decodes a row read for a claim by id. A claimable row that cannot be
/// decoded (written by another program or by hand) is failed with the reason
/// in `last_error`: `None`. One that is not claimable now (finished, leased,
/// not due) is left alone and its decoding error returned.
async fn decode_or_fail(
    conn: &mut AsyncSqliteConnection,
    row: TaskRow,
    now: DateTime<Utc>,
) -> Result<Option<Record>> {
    let id = row.id;
    let error = match Record::try_from(row) {
        Ok(record) => return Ok(Some(record)),
        Err(error) => error,
    };
    let reason = limits::storable_error(&format!("stored row is unreadable: {}", error.chain()));
    let failed = cached::<Sqlite>(
        "UPDATE outbox_tasks SET status = 'failed', finished_at = $1, updated_at = $1, \
         last_error = $2, lease_owner = NULL, lease_expires_at = NULL \
         WHERE id = $3 AND status IN ('available', 'waiting', 'running') \
           AND next_attempt_at <= $1 \
           AND (lease_expires_at IS NULL OR lease_expires_at <= $1)",
    )
    .bind::<BigInt, _>(to_micros(now))
    .bind::<Text, _>(reason)
    .bind::<BigInt, _>(id)
    .execute(conn)
    .await
    .map_err(sqlite_error)?;
    if failed == 0 {
        return Err(error);
    }
    tracing::warn!(task_id = id, error = %error.chain(), "failed a task whose row cannot be decoded");
    Ok(None)
}

/// Available rows only, in id order, through the claim index; expired ones
/// met on the way are failed. `$1` now, `$2` the cursor, `$3` due by, `$4`
/// the limit, `$5` the owner, `$6` the lease's end, `$7` the expiry error.
pub(crate) const CLAIM_DUE_SQL: &str = "\
UPDATE outbox_tasks SET
    status = CASE WHEN expires_at <= $1 THEN 'failed' ELSE 'running' END,
    finished_at = CASE WHEN expires_at <= $1 THEN $1 END,
    last_error = CASE WHEN expires_at <= $1 THEN $7 ELSE last_error END,
    attempts = CASE WHEN expires_at <= $1 THEN attempts ELSE attempts + 1 END,
    lease_owner = CASE WHEN expires_at <= $1 THEN NULL ELSE $5 END,
    lease_expires_at = CASE WHEN expires_at <= $1 THEN NULL ELSE $6 END,
    updated_at = $1
WHERE id IN (
    SELECT id FROM outbox_tasks INDEXED BY outbox_tasks_claim_idx
    WHERE status = 'available' AND id > $2 AND next_attempt_at <= $3
    ORDER BY id
    LIMIT $4)
RETURNING *";

/// Claims up to `request.limit` available tasks after the cursor, in id order.
/// Expired tasks met on the way come back already failed.
///
/// One statement, so no transaction around it: its time is read before it
/// waits for the write lock, so a claim that waited gets a lease shorter by
/// the wait (the worker times its lease from before the claim anyway).
pub(crate) async fn due(
    conn: &mut AsyncSqliteConnection,
    request: &BatchRequest,
) -> Result<Vec<Record>> {
    let limit =
        i64::try_from(request.limit).map_err(|_| Error::invalid("batch_size", "too large"))?;
    let now = timestamp::now();
    let until = to_column(
        "lease_duration",
        transition::after(now, request.lease.duration),
    )?;
    let rows: Vec<TaskRow> = cached::<Sqlite>(CLAIM_DUE_SQL)
        .bind::<BigInt, _>(to_micros(now))
        .bind::<BigInt, _>(request.after.map_or(0, TaskId::get))
        .bind::<BigInt, _>(to_micros(request.due_by.unwrap_or(now)))
        .bind::<BigInt, _>(limit)
        .bind::<Text, _>(&request.lease.owner)
        .bind::<BigInt, _>(until)
        .bind::<Text, _>(EXPIRED_ERROR)
        .load(conn)
        .await
        .map_err(sqlite_error)?;
    let mut records = decode_claimed(conn, rows, &request.lease.owner).await?;
    records.sort_by_key(|record| record.id);
    Ok(records)
}

/// Decodes claimed rows one by one. A row that cannot be decoded (written by
/// another program or by hand) is failed under its fence with the reason in
/// `last_error`, so it never blocks the rest of the batch; if even that write
/// fails, the row's lease lapses and a later claim tries again.
async fn decode_claimed(
    conn: &mut AsyncSqliteConnection,
    rows: Vec<TaskRow>,
    owner: &str,
) -> Result<Vec<Record>> {
    let mut records = Vec::with_capacity(rows.len());
    let mut unreadable = Vec::new();
    for row in rows {
        let fence = Fence {
            id: TaskId::new(row.id),
            owner: owner.to_owned(),
            attempt: row.attempts,
            ordering_key: row.ordering_key(),
        };
        match StoredRow::try_from(row).and_then(Record::try_from) {
            Ok(record) => records.push(record),
            Err(error) => {
                tracing::warn!(task_id = fence.id.get(), error = %error.chain(), "failing a task whose row cannot be decoded");
                let reason = format!("stored row is unreadable: {}", error.chain());
                unreadable.push(transition::fail(fence, &reason));
            }
        }
    }
    if !unreadable.is_empty()
        && let Err(error) = complete::write(conn, &unreadable).await
    {
        tracing::warn!(error = %error.chain(), "could not fail the tasks whose rows cannot be decoded");
    }
    Ok(records)
}
