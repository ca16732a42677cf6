//! Claims: one task by id for `send`, and batches of available tasks with
//! `SKIP LOCKED`.
//!
//! Each claim is a short READ COMMITTED transaction: lock the candidate rows,
//! let [`transition`] decide on the locked state with the database's clock,
//! write the decision, commit. READ COMMITTED takes no gap locks, so a claim
//! never blocks the application's inserts; `SKIP LOCKED` lets several
//! workers claim side by side. A batch claim reads only the available range
//! of the `(status, id)` index, so its cost does not depend on how many
//! tasks wait, run, are blocked behind their key, or are kept for retention.

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::{
    OptionalExtension, QueryableByName,
    mysql::Mysql,
    sql_types::{BigInt, Datetime, Nullable, Text},
};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, Error, LeaseRequest, Record, Result, Status, TaskId, limits,
    transition::{self, Availability, EXPIRED_ERROR},
};
use diesel_outbox_sql::{cached, mysql_error};

use crate::{
    json_rows,
    row::{TaskRow, task_columns},
    schema::outbox_tasks,
    store_transaction::{Isolation, read_committed},
    timestamp,
};

#[derive(QueryableByName)]
struct Locked {
    #[diesel(embed)]
    task: TaskRow,
    #[diesel(sql_type = Datetime)]
    db_now: NaiveDateTime,
}

const LOCK_ONE_SQL: &str =
    "SELECT t.*, UTC_TIMESTAMP(6) AS db_now FROM outbox_tasks t WHERE t.id = ? FOR UPDATE";

/// Claims task `id` for `lease`, or says why it cannot be claimed now.
pub(crate) async fn one(
    conn: &mut AsyncMysqlConnection,
    id: TaskId,
    lease: &LeaseRequest,
    isolation: Isolation,
) -> Result<ClaimOutcome> {
    read_committed(conn, isolation, async |conn| {
        let locked: Option<Locked> = cached(LOCK_ONE_SQL)
            .bind::<BigInt, _>(id.get())
            .get_result(conn)
            .await
            .optional()
            .map_err(mysql_error)?;
        let Some(locked) = locked else {
            return Ok(ClaimOutcome::NotFound);
        };
        let now = timestamp::from_column(locked.db_now);
        let Some(record) = decode_or_fail(conn, locked.task, now).await? else {
            return Ok(ClaimOutcome::Finished(Status::Failed));
        };
        match transition::availability(&record.state(), now) {
            Availability::Claimable => {
                let claimed = claim_record(record, lease, now)?;
                set_leases(conn, &[claimed.id], lease, now).await?;
                Ok(ClaimOutcome::Claimed(Box::new(claimed)))
            }
            Availability::Expired => {
                expire(conn, &[id], now).await?;
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
    .map_err(|why| Error::database(format!("a locked claimable row became {why:?}")))?;
    record.status = state.status;
    record.attempts = state.attempts;
    record.lease = state.lease;
    record.updated_at = now;
    Ok(record)
}

/// The record after `transition::expire`.
fn expired_record(mut record: Record, now: DateTime<Utc>) -> Record {
    record.status = Status::Failed;
    record.lease = None;
    record.finished_at = Some(now);
    record.updated_at = now;
    record.last_error = EXPIRED_ERROR.to_owned();
    record
}

/// Leases the rows `ids` (a JSON array, see [`json_rows::ids`]) to one owner.
/// The ids come as one JSON document, so the text is fixed and prepared
/// once per connection; each id reaches its row through the primary key.
const SET_LEASES_SQL: &str = "\
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
STRAIGHT_JOIN outbox_tasks t FORCE INDEX (PRIMARY) ON t.id = j.id
SET t.status = 'running', t.attempts = t.attempts + 1, t.lease_owner = ?,
    t.lease_expires_at = ?, t.updated_at = ?";

/// Fails the expired rows `ids`, like [`SET_LEASES_SQL`].
const EXPIRE_SQL: &str = "\
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
STRAIGHT_JOIN outbox_tasks t FORCE INDEX (PRIMARY) ON t.id = j.id
SET t.status = 'failed', t.finished_at = ?, t.updated_at = ?, t.last_error = ?,
    t.lease_owner = NULL, t.lease_expires_at = NULL";

async fn set_leases(
    conn: &mut AsyncMysqlConnection,
    ids: &[TaskId],
    lease: &LeaseRequest,
    now: DateTime<Utc>,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let until = timestamp::to_column("lease_duration", transition::after(now, lease.duration))?;
    cached::<Mysql>(SET_LEASES_SQL)
        .bind::<Text, _>(json_rows::ids(ids))
        .bind::<Text, _>(&lease.owner)
        .bind::<Datetime, _>(until)
        .bind::<Datetime, _>(now.naive_utc())
        .execute(conn)
        .await
        .map_err(mysql_error)?;
    Ok(())
}

async fn expire(conn: &mut AsyncMysqlConnection, ids: &[TaskId], now: DateTime<Utc>) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    cached::<Mysql>(EXPIRE_SQL)
        .bind::<Text, _>(json_rows::ids(ids))
        .bind::<Datetime, _>(now.naive_utc())
        .bind::<Datetime, _>(now.naive_utc())
        .bind::<Text, _>(EXPIRED_ERROR)
        .execute(conn)
        .await
        .map_err(mysql_error)?;
    Ok(())
}

/// Decodes a locked row. A claimable row that cannot be decoded (written by
/// another program or by hand) is failed in the claim's transaction with the
/// reason in `last_error`, so it never blocks the rest of the batch: `None`.
/// One that is not claimable now (finished, leased, not due) is left alone
/// and its decoding error returned.
async fn decode_or_fail(
    conn: &mut AsyncMysqlConnection,
    row: TaskRow,
    now: DateTime<Utc>,
) -> Result<Option<Record>> {
    let id = row.id;
    let error = match Record::try_from(row) {
        Ok(record) => return Ok(Some(record)),
        Err(error) => error,
    };
    let reason = limits::storable_error(&format!("stored row is unreadable: {}", error.chain()));
    let failed = diesel::sql_query(
        "UPDATE outbox_tasks FORCE INDEX (PRIMARY) \
         SET status = 'failed', finished_at = ?, updated_at = ?, \
         last_error = ?, lease_owner = NULL, lease_expires_at = NULL \
         WHERE id = ? AND status IN ('available', 'waiting', 'running') \
           AND next_attempt_at <= ? \
           AND (lease_expires_at IS NULL OR lease_expires_at <= ?)",
    )
    .bind::<Datetime, _>(now.naive_utc())
    .bind::<Datetime, _>(now.naive_utc())
    .bind::<Text, _>(reason)
    .bind::<BigInt, _>(id)
    .bind::<Datetime, _>(now.naive_utc())
    .bind::<Datetime, _>(now.naive_utc())
    .execute(conn)
    .await
    .map_err(mysql_error)?;
    if failed == 0 {
        return Err(error);
    }
    tracing::warn!(task_id = id, error = %error.chain(), "failed a task whose row cannot be decoded");
    Ok(None)
}

/// Available rows only, in id order, through the `(status, id)` index named
/// outright: for `ORDER BY id LIMIT n` MariaDB also weighs walking the
/// primary key, costed as if available rows were spread evenly through the
/// table, and with a long retained history before them it would read every
/// finished row first.
const LOCK_DUE_SQL: &str = concat!(
    "SELECT ",
    task_columns!(),
    ", UTC_TIMESTAMP(6) AS db_now
FROM outbox_tasks t FORCE INDEX (outbox_tasks_claim_idx)
WHERE t.status = 'available' AND t.id > ?
  AND t.next_attempt_at <= COALESCE(?, UTC_TIMESTAMP(6))
ORDER BY t.id
LIMIT ?
FOR UPDATE SKIP LOCKED"
);

/// Claims up to `request.limit` available tasks after the cursor, in id order.
/// Expired tasks met on the way come back already failed.
pub(crate) async fn due(
    conn: &mut AsyncMysqlConnection,
    request: &BatchRequest,
    isolation: Isolation,
) -> Result<Vec<Record>> {
    let limit =
        i64::try_from(request.limit).map_err(|_| Error::invalid("batch_size", "too large"))?;
    let due_by = timestamp::to_column_opt("due_by", request.due_by)?;
    read_committed(conn, isolation, async |conn| {
        // Read by position: by name, every field is looked up among every column.
        let locked: Vec<(TaskRow, NaiveDateTime)> = cached::<Mysql>(LOCK_DUE_SQL)
            .bind::<BigInt, _>(request.after.map_or(0, TaskId::get))
            .bind::<Nullable<Datetime>, _>(due_by)
            .bind::<BigInt, _>(limit)
            .returning::<(outbox_tasks::SqlType, Datetime)>()
            .load(conn)
            .await
            .map_err(mysql_error)?;
        let mut records = Vec::with_capacity(locked.len());
        let (mut claimed, mut expired) = (Vec::new(), Vec::new());
        for (task, db_now) in locked {
            let now = timestamp::from_column(db_now);
            let Some(record) = decode_or_fail(conn, task, now).await? else {
                continue;
            };
            if transition::availability(&record.state(), now) == Availability::Expired {
                expired.push(record.id);
                records.push(expired_record(record, now));
            } else {
                claimed.push(record.id);
                records.push(claim_record(record, &request.lease, now)?);
            }
        }
        if let Some(now) = records.iter().map(|r| r.updated_at).next() {
            set_leases(conn, &claimed, &request.lease, now).await?;
            expire(conn, &expired, now).await?;
        }
        Ok(records)
    })
    .await
}

#[cfg(test)]
mod backlog_plans;
