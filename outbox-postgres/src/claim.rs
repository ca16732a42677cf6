//! Claims: one task by id for `send`, and batches of available tasks with
//! `SKIP LOCKED`.
//!
//! A batch claim reads only available rows, through an index that holds
//! nothing else, so its cost does not depend on how many tasks wait, run, or
//! are blocked behind their ordering key. A claim by id is the SQL form of
//! [`transition::availability`]; when it matches nothing, the row is read
//! back and the pure function says why.

use chrono::{DateTime, Utc};
use diesel::{
    prelude::*,
    sql_types::{BigInt, Nullable, Text, Timestamptz},
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, Error, LeaseRequest, Record, Result, StoredRow, TaskId,
    transition::{self, Availability, EXPIRED_ERROR, Fence},
};

use diesel_outbox_sql::{cached, micros, postgres_error};

use crate::{
    complete,
    row::{TaskRow, task_columns},
    schema::outbox_tasks,
};

/// Available, or waiting and due, or running with a lapsed lease; not expired.
const CLAIM_ONE_SQL: &str = concat!(
    "\
UPDATE outbox_tasks t
SET status = 'running', attempts = t.attempts + 1, lease_owner = $2,
    lease_expires_at = now() + $3 * interval '1 microsecond', updated_at = now()
WHERE t.id = $1 AND t.status IN ('available', 'waiting', 'running')
  AND t.next_attempt_at <= now()
  AND (t.lease_expires_at IS NULL OR t.lease_expires_at <= now())
  AND (t.expires_at IS NULL OR t.expires_at > now())
RETURNING ",
    task_columns!()
);

const INSPECT_SQL: &str = "SELECT t.*, now() AS db_now FROM outbox_tasks t WHERE t.id = $1";

const EXPIRE_ONE: &str = "\
UPDATE outbox_tasks
SET status = 'failed', finished_at = now(), updated_at = now(), last_error = $2,
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 AND status IN ('available', 'waiting', 'running') AND expires_at <= now()
  AND (lease_expires_at IS NULL OR lease_expires_at <= now())";

#[derive(QueryableByName)]
struct Inspected {
    #[diesel(embed)]
    task: TaskRow,
    #[diesel(sql_type = Timestamptz)]
    db_now: DateTime<Utc>,
}

/// Claims task `id` for `lease`, or says why it cannot be claimed now.
pub(crate) async fn one(
    conn: &mut AsyncPgConnection,
    id: TaskId,
    lease: &LeaseRequest,
) -> Result<ClaimOutcome> {
    // Each pass either claims, or reads the row and acts on what the rules say;
    // a pass repeats only when a concurrent writer changed the row in between.
    for _ in 0..3 {
        let claimed: Option<TaskRow> = cached(CLAIM_ONE_SQL)
            .bind::<BigInt, _>(id.get())
            .bind::<Text, _>(&lease.owner)
            .bind::<BigInt, _>(micros(lease.duration))
            .returning::<outbox_tasks::SqlType>()
            .get_result(conn)
            .await
            .optional()
            .map_err(postgres_error)?;
        if let Some(row) = claimed {
            let record = decode_claimed(conn, vec![row], &lease.owner).await?;
            return match record.into_iter().next() {
                Some(record) => Ok(ClaimOutcome::Claimed(Box::new(record))),
                // Unreadable: `decode_claimed` failed the task; `get` says why.
                None => Ok(ClaimOutcome::Finished(diesel_outbox_core::Status::Failed)),
            };
        }
        let inspected: Option<Inspected> = cached(INSPECT_SQL)
            .bind::<BigInt, _>(id.get())
            .get_result(conn)
            .await
            .optional()
            .map_err(postgres_error)?;
        let Some(inspected) = inspected else {
            return Ok(ClaimOutcome::NotFound);
        };
        let record = Record::try_from(inspected.task)?;
        match transition::availability(&record.state(), inspected.db_now) {
            Availability::Claimable => continue,
            Availability::Expired => {
                let expired = cached(EXPIRE_ONE)
                    .bind::<BigInt, _>(id.get())
                    .bind::<Text, _>(EXPIRED_ERROR)
                    .execute(conn)
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

/// Available rows only, in id order; expired ones met on the way are failed.
///
/// The ids are locked first and handed to the update as an array
/// (`= ANY(ARRAY(...))`), so each row is reached through the primary key
/// on all but the smallest tables. Joined as a row set instead, the batch's
/// estimated size made PostgreSQL hash it against a full scan of the table
/// whenever the table held fewer than some tens of thousands of rows: 10,000
/// rows read for a claim of 256.
const CLAIM_DUE_SQL: &str = concat!(
    "\
UPDATE outbox_tasks t SET
    status = CASE WHEN t.expires_at <= now() THEN 'failed' ELSE 'running' END,
    finished_at = CASE WHEN t.expires_at <= now() THEN now() END,
    last_error = CASE WHEN t.expires_at <= now() THEN $5 ELSE t.last_error END,
    attempts = CASE WHEN t.expires_at <= now() THEN t.attempts ELSE t.attempts + 1 END,
    lease_owner = CASE WHEN t.expires_at <= now() THEN NULL ELSE $3 END,
    lease_expires_at = CASE WHEN t.expires_at <= now() THEN NULL
                            ELSE now() + $4 * interval '1 microsecond' END,
    updated_at = now()
WHERE t.id = ANY(ARRAY(
    SELECT d.id FROM outbox_tasks d
    WHERE d.status = 'available' AND d.id > $1
      AND d.next_attempt_at <= COALESCE($6, now())
    ORDER BY d.id
    LIMIT $2
    FOR UPDATE SKIP LOCKED))
RETURNING ",
    task_columns!()
);

/// Claims up to `request.limit` available tasks after the cursor, in id order.
/// Expired tasks met on the way come back already failed.
pub(crate) async fn due(
    conn: &mut AsyncPgConnection,
    request: &BatchRequest,
) -> Result<Vec<Record>> {
    let limit =
        i64::try_from(request.limit).map_err(|_| Error::invalid("batch_size", "too large"))?;
    let rows: Vec<TaskRow> = cached(CLAIM_DUE_SQL)
        .bind::<BigInt, _>(request.after.map_or(0, TaskId::get))
        .bind::<BigInt, _>(limit)
        .bind::<Text, _>(&request.lease.owner)
        .bind::<BigInt, _>(micros(request.lease.duration))
        .bind::<Text, _>(EXPIRED_ERROR)
        .bind::<Nullable<Timestamptz>, _>(request.due_by)
        .returning::<outbox_tasks::SqlType>()
        .load(conn)
        .await
        .map_err(postgres_error)?;
    let mut records = decode_claimed(conn, rows, &request.lease.owner).await?;
    records.sort_by_key(|record| record.id);
    Ok(records)
}

/// Decodes claimed rows one by one. A row that cannot be decoded (written by
/// another program or by hand) is failed under its fence with the reason in
/// `last_error`, so it never blocks the rest of the batch; if even that write
/// fails, the row's lease lapses and a later claim tries again.
async fn decode_claimed(
    conn: &mut AsyncPgConnection,
    rows: Vec<TaskRow>,
    owner: &str,
) -> Result<Vec<Record>> {
    let mut records = Vec::with_capacity(rows.len());
    let mut unreadable = Vec::new();
    for row in rows {
        let row = StoredRow::from(row);
        let fence = Fence {
            id: TaskId::new(row.id),
            owner: owner.to_owned(),
            attempt: row.attempts,
            ordering_key: row.ordering_key.clone(),
        };
        match Record::try_from(row) {
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

#[cfg(test)]
mod backlog_plans;
