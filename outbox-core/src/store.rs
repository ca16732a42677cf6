//! The backend boundary: the [`Store`] trait and the claim types it speaks.

use std::{future::Future, time::Duration};

use crate::{ClaimedTask, OutboxId, Record, Result, Task, TaskId, transition::Completion};

/// What a claim asks for: who claims, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The claiming worker's owner name.
    pub owner: String,
    /// How long the claim lasts on the database clock.
    pub duration: Duration,
}

/// The answer to a claim of one task by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Claimed: the record as it stands after the claim (attempts incremented,
    /// lease set to the caller).
    Claimed(Box<Record>),
    /// It was past `expires_at`; the claim marked it failed.
    Expired,
    /// No such task.
    NotFound,
    /// It is succeeded, failed or discarded.
    Finished(crate::Status),
    /// Another worker's lease is live.
    Leased {
        /// End of that lease.
        until: chrono::DateTime<chrono::Utc>,
    },
    /// Not due before `at`.
    NotDue {
        /// Earliest claim.
        at: chrono::DateTime<chrono::Utc>,
    },
    /// An older task with the same ordering key has neither succeeded nor
    /// been discarded.
    Blocked,
}

/// A request to claim available tasks in id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRequest {
    /// Who claims, and for how long.
    pub lease: LeaseRequest,
    /// At most this many tasks.
    pub limit: usize,
    /// Only tasks with a larger id (a round's cursor).
    pub after: Option<TaskId>,
    /// Only tasks due at or before this instant of the database clock (the
    /// start of a round), so a task retried during the round, by this worker
    /// or another, waits for the next round. `None`: due now.
    pub due_by: Option<chrono::DateTime<chrono::Utc>>,
}

/// What one [`Store::rescue`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rescued {
    /// Tasks moved: made available again, or failed.
    pub moved: u64,
    /// The tasks among them that were failed for good, because their runs
    /// had reached `max_attempts`.
    pub failed: Vec<TaskId>,
}

/// Where a task's rows live, and the few operations the worker needs.
///
/// Backends implement it with their own SQL; every decision comes from
/// [`transition`](crate::transition). Completion writes are fenced: a
/// [`Completion`] applies only while `id`, lease owner and attempts still match.
pub trait Store: Clone + Send + Sync + 'static {
    /// The connection type `enqueue` runs on: the caller's, inside its transaction.
    type Conn: Send;

    /// Inserts `task` inside the caller's open transaction and returns its id.
    ///
    /// Fails with [`Error::NotTransaction`](crate::Error::NotTransaction) outside
    /// a transaction and with [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a bad task; in both cases nothing is written. A `dedup_key` already
    /// in the table returns the existing task's id.
    fn enqueue(
        &self,
        conn: &mut Self::Conn,
        task: Task,
    ) -> impl Future<Output = Result<TaskId>> + Send;

    /// Inserts several tasks in one statement; ids come back in input order.
    /// Every task is validated before anything is written.
    fn enqueue_many(
        &self,
        conn: &mut Self::Conn,
        tasks: Vec<Task>,
    ) -> impl Future<Output = Result<Vec<TaskId>>> + Send;

    /// Claims the task `id` if it is claimable now; otherwise says why not.
    /// An expired task is marked failed by this call.
    fn claim(
        &self,
        id: TaskId,
        lease: &LeaseRequest,
    ) -> impl Future<Output = Result<ClaimOutcome>> + Send;

    /// Claims up to `limit` available tasks in id order, skipping rows other
    /// workers hold; waiting, running and blocked rows are never read.
    /// Expired tasks met on the way are marked failed and returned with
    /// status `Failed`, so a round can count them. Each comes back as what
    /// its delivery needs ([`ClaimedTask`]), not as the whole row.
    fn claim_due(
        &self,
        request: &BatchRequest,
    ) -> impl Future<Output = Result<Vec<ClaimedTask>>> + Send;

    /// Writes attempt results; each applies only under its fence. Returns how
    /// many applied. A result that lets an ordering key move on
    /// ([`transition::moves_key_on`](crate::transition::moves_key_on))
    /// unblocks the key's next task in the same transaction.
    fn complete(&self, completions: &[Completion]) -> impl Future<Output = Result<u64>> + Send;

    /// Writes attempt results like [`complete`](Store::complete), and
    /// returns the claims whose result applied, as `(id, attempt)` of their
    /// fences, so a caller knows exactly which results took effect (the
    /// failure hook runs for those). The default writes one result per
    /// statement; a backend that can tell in one batch overrides it.
    fn complete_applied(
        &self,
        completions: &[Completion],
    ) -> impl Future<Output = Result<Vec<(TaskId, i64)>>> + Send {
        async move {
            let mut applied = Vec::new();
            for completion in completions {
                if self.complete(std::slice::from_ref(completion)).await? > 0 {
                    applied.push((completion.fence.id, completion.fence.attempt));
                }
            }
            Ok(applied)
        }
    }

    /// Reads one task.
    fn get(&self, id: TaskId) -> impl Future<Output = Result<Record>> + Send;

    /// The outbox's own id, which its migration wrote once (`outbox_meta`):
    /// read on first use and kept. Deliveries carry it, and with it their
    /// message ids. Fails, saying to run the migrations, on a database
    /// that lacks it.
    fn outbox_id(&self) -> impl Future<Output = Result<OutboxId>> + Send;
    /// Makes up to `limit` waiting tasks whose time has come available
    /// ([`transition::promote`](crate::transition::promote)), oldest due
    /// first; returns how many. Reads only the rows it moves, and never waits
    /// on a row another transaction is changing: such a row is skipped
    /// (`SKIP LOCKED`), or found by a plain read and then updated by primary
    /// key with the rule checked again (MySQL/MariaDB).
    fn promote(&self, limit: u32) -> impl Future<Output = Result<u64>> + Send;
    /// Rescues up to `limit` running tasks whose lease lapsed
    /// ([`transition::rescue`](crate::transition::rescue)); returns how
    /// many, and which of them it failed for good (their runs had reached
    /// `max_attempts`). Locked rows are treated as by [`promote`](Store::promote).
    fn rescue(&self, limit: u32) -> impl Future<Output = Result<Rescued>> + Send;
}
