//! Claims: the lock-decide-write flow of a backend that locks rows and
//! decides in Rust (MySQL's claims, SQLite's claim by id; PostgreSQL's
//! claims and SQLite's batch claim are one statement of their own), and
//! what every backend does with the rows a claim took that cannot be read
//! as tasks.

use chrono::{DateTime, Utc};
use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, ClaimedTask, Error, LeaseRequest, Record, Result, Status, TaskId,
    UnreadableRow, limits,
    transition::{self, Availability, Fence},
};

use crate::{Dialect, ReadRow};

/// The `last_error` of a row failed because it cannot be read as a task.
pub fn unreadable_reason(row: &diesel_outbox_core::UnreadableRow) -> String {
    limits::storable_error(&format!(
        "stored row is unreadable: {}",
        Error::from(row.clone()).chain()
    ))
}

/// `record` as [`transition::claim`] leaves it, claimed for `lease` at `now`.
pub fn claimed(mut record: Record, lease: &LeaseRequest, now: DateTime<Utc>) -> Result<Record> {
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

/// `record` as [`transition::expire`] leaves it at `now`.
pub fn expired(mut record: Record, now: DateTime<Utc>) -> Result<Record> {
    let state = transition::expire(&record.state(), now)
        .ok_or_else(|| Error::database("a row read as expired is not"))?;
    record.status = state.status;
    record.lease = state.lease;
    record.finished_at = state.finished_at;
    record.last_error = state.last_error;
    record.updated_at = now;
    Ok(record)
}

/// A locked row decoded; one that cannot be read is failed with the reason
/// when it is claimable (`None`), and its error returned otherwise.
async fn decoded<D: Dialect>(
    dialect: &D,
    conn: &mut D::Conn,
    row: ReadRow,
    now: DateTime<Utc>,
) -> Result<Option<Record>> {
    let unreadable = match row {
        Ok(record) => return Ok(Some(record)),
        Err(unreadable) => unreadable,
    };
    let reason = unreadable_reason(&unreadable);
    if dialect
        .fail_unreadable(conn, unreadable.id, &reason, now)
        .await?
    {
        tracing::warn!(task_id = unreadable.id.get(), row = %unreadable, "failed a task whose row cannot be decoded");
        return Ok(None);
    }
    Err(Error::from(unreadable))
}

/// [`Dialect::claim_one`] by locking: in one write transaction, lock the
/// row, decide with [`transition::availability`] on the database's time,
/// write the decision.
pub async fn one<D: Dialect>(
    dialect: &D,
    conn: &mut D::Conn,
    id: TaskId,
    lease: &LeaseRequest,
) -> Result<ClaimOutcome> {
    crate::transact(dialect, conn, async |conn| {
        let Some((row, now)) = dialect.lock_task(conn, id).await? else {
            return Ok(ClaimOutcome::NotFound);
        };
        let Some(record) = decoded(dialect, conn, row, now).await? else {
            return Ok(ClaimOutcome::Finished(Status::Failed));
        };
        match transition::availability(&record.state(), now) {
            Availability::Claimable => {
                let record = claimed(record, lease, now)?;
                dialect.set_leases(conn, &[id], lease, now).await?;
                Ok(ClaimOutcome::Claimed(Box::new(record)))
            }
            Availability::Expired => {
                dialect.expire(conn, &[id], now).await?;
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

/// [`Dialect::claim_due`] by locking: in one write transaction, lock the
/// due rows (skipping locked ones), decide each, write the leases and the
/// expiries, each in one statement.
pub async fn due<D: Dialect>(
    dialect: &D,
    conn: &mut D::Conn,
    request: &BatchRequest,
) -> Result<Vec<ClaimedTask>> {
    crate::transact(dialect, conn, async |conn| {
        let locked = dialect.lock_due(conn, request).await?;
        let mut records = Vec::with_capacity(locked.len());
        let (mut leased, mut failed) = (Vec::new(), Vec::new());
        let mut at = None;
        for (row, now) in locked {
            let Some(record) = decoded(dialect, conn, row, now).await? else {
                continue;
            };
            at = Some(now);
            if transition::availability(&record.state(), now) == Availability::Expired {
                failed.push(record.id);
                records.push(ClaimedTask::from(expired(record, now)?));
            } else {
                leased.push(record.id);
                records.push(ClaimedTask::from(claimed(record, &request.lease, now)?));
            }
        }
        if let Some(now) = at {
            if !leased.is_empty() {
                dialect
                    .set_leases(conn, &leased, &request.lease, now)
                    .await?;
            }
            if !failed.is_empty() {
                dialect.expire(conn, &failed, now).await?;
            }
        }
        Ok(records)
    })
    .await
}

/// A row a single-statement claim took: what it read (a [`Record`] for a
/// claim by id, a [`ClaimedTask`] for a batch claim), and the `attempts`
/// the claim left (its fence).
#[derive(Debug)]
pub struct Taken<T> {
    /// The row, decoded or not.
    pub row: std::result::Result<T, UnreadableRow>,
    /// Its `attempts` after the claim.
    pub attempts: i64,
}

/// What a claim reads a task as: something with the task's id.
pub trait ClaimRead {
    /// The task's id.
    fn id(&self) -> TaskId;
}

impl ClaimRead for Record {
    fn id(&self) -> TaskId {
        self.id
    }
}

impl ClaimRead for ClaimedTask {
    fn id(&self) -> TaskId {
        self.id
    }
}

/// The tasks of the rows a single-statement claim took, in id order. A
/// row that cannot be decoded (written by another program or by hand) is
/// failed under its fence with the reason in `last_error`, so it never
/// blocks the rest of the batch; if even that write fails, its lease lapses
/// and a later claim tries again.
pub async fn settle<D: Dialect, T: ClaimRead>(
    dialect: &D,
    conn: &mut D::Conn,
    taken: Vec<Taken<T>>,
    owner: &str,
) -> Result<Vec<T>> {
    let mut records = Vec::with_capacity(taken.len());
    let mut unreadable = Vec::new();
    for Taken { row, attempts } in taken {
        match row {
            Ok(record) => records.push(record),
            Err(row) => {
                tracing::warn!(task_id = row.id.get(), row = %row, "failing a task whose row cannot be decoded");
                let fence = Fence {
                    id: row.id,
                    owner: owner.into(),
                    attempt: attempts,
                    // A failed task keeps its key: nothing moves on.
                    ordering_key: None,
                };
                unreadable.push(transition::fail(fence, &unreadable_reason(&row)));
            }
        }
    }
    if !unreadable.is_empty()
        && let Err(error) = dialect.apply_completions(conn, &unreadable).await
    {
        tracing::warn!(error = %error.chain(), "could not fail the tasks whose rows cannot be decoded");
    }
    records.sort_by_key(ClaimRead::id);
    Ok(records)
}
