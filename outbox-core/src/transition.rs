//! The task state machine as pure functions (described in [semantics.md](https://github.com/outbox-rs/outbox/blob/main/docs/semantics.md)).
//!
//! These functions are the specification every store is checked against.
//! Where a store decides in Rust (the SQL flows of `diesel-outbox-sql`
//! claim by id, expire, fail unreadable rows and pick the completions that
//! move a key on with them), it calls them. Where a backend keeps a
//! decision inside one statement for speed (PostgreSQL's claims, SQLite's
//! batch claim, every backend's promotion, rescue and requeue) or applies
//! one the flows made (fenced completions, unblocking a key, discard), the
//! statement re-states the rule in its `WHERE` clause, so a concurrent writer can never make a stale
//! decision stick, and the testkit's model check puts rows in every state,
//! runs each store operation and compares the rows that result with these
//! functions, on every backend.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};

use crate::{Lease, RetryPolicy, Status, TaskId, limits::storable_error};

/// The fields of a task row the rules depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskState {
    /// Current status.
    pub status: Status,
    /// Claims taken, including claims given back unstarted: the fence token.
    pub attempts: i64,
    /// Claims given back before their handler started; `attempts - released`
    /// is how often a handler ran, which is what `max_attempts` limits.
    pub released: i64,
    /// Attempt limit.
    pub max_attempts: Option<i32>,
    /// Earliest next claim.
    pub next_attempt_at: DateTime<Utc>,
    /// Deadline.
    pub expires_at: Option<DateTime<Utc>>,
    /// Current claim: set exactly while the task is [`Status::Running`].
    pub lease: Option<Lease>,
    /// End time, set exactly when the status is final.
    pub finished_at: Option<DateTime<Utc>>,
    /// The task's ordering key, if any.
    pub ordering_key: Option<String>,
    /// The latest failure, empty after success.
    pub last_error: String,
}

/// The status a new task is stored with.
///
/// `head` says whether no unfinished task of its ordering key is in the table
/// (always true without a key); `due` whether its `not_before` has come.
/// Backends learn `head` from the key's count of open tasks, which they
/// update in the same statement that locks it, so two transactions enqueueing
/// one key take turns and the second one's task is blocked behind the first.
pub fn enqueued(head: bool, due: bool) -> Status {
    match (head, due) {
        (false, _) => Status::Blocked,
        (true, false) => Status::Waiting,
        (true, true) => Status::Available,
    }
}

/// Whether a task can be claimed now, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// A worker may claim it.
    Claimable,
    /// Another worker's lease is live until `until`.
    Leased {
        /// End of the live lease.
        until: DateTime<Utc>,
    },
    /// Past its deadline: claiming must mark it failed instead.
    Expired,
    /// Waiting for `at` (schedule or backoff).
    NotDue {
        /// Earliest claim.
        at: DateTime<Utc>,
    },
    /// An older task with the same ordering key is not finished.
    Blocked,
    /// Already succeeded, failed or discarded.
    Finished(Status),
}

/// Decides whether `state` may be claimed by id at `now`.
///
/// Batch claims read only available rows; a claim by id (`send`) also takes
/// a waiting task whose time has come and a running one whose lease lapsed,
/// since finding it costs nothing. A live lease wins over expiry (its holder
/// decides), and expiry wins over the schedule. A blocked task is only
/// blocked, past its deadline too: failing it would make a second task hold
/// its key beside the head, and requeueing that one would run it beside the
/// head and out of order. It expires once its key reaches it.
pub fn availability(state: &TaskState, now: DateTime<Utc>) -> Availability {
    if state.status.is_finished() {
        return Availability::Finished(state.status);
    }
    if state.status == Status::Blocked {
        return Availability::Blocked;
    }
    if let Some(lease) = &state.lease
        && lease.expires_at > now
    {
        return Availability::Leased {
            until: lease.expires_at,
        };
    }
    if state.expires_at.is_some_and(|at| at <= now) {
        return Availability::Expired;
    }
    if state.next_attempt_at > now {
        return Availability::NotDue {
            at: state.next_attempt_at,
        };
    }
    Availability::Claimable
}

/// Identifies one claim; a completion write applies only while it still matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The task.
    pub id: TaskId,
    /// The claiming worker's owner name: an `Arc`, so that a worker's
    /// fences share one copy of it.
    pub owner: Arc<str>,
    /// The attempt number the claim started (the row's `attempts` after the claim).
    pub attempt: i64,
    /// The task's ordering key: a write that finishes the task moves the key
    /// on in the same transaction.
    pub ordering_key: Option<String>,
}

/// Claims `state` for `owner` until `now + lease`, starting the next attempt.
pub fn claim(
    state: &TaskState,
    id: TaskId,
    owner: &str,
    now: DateTime<Utc>,
    lease: Duration,
) -> Result<(TaskState, Fence), Availability> {
    match availability(state, now) {
        Availability::Claimable => {
            let attempt = state.attempts + 1;
            let next = TaskState {
                status: Status::Running,
                attempts: attempt,
                lease: Some(Lease {
                    owner: owner.to_owned(),
                    expires_at: after(now, lease),
                }),
                ..state.clone()
            };
            let fence = Fence {
                id,
                owner: owner.into(),
                attempt,
                ordering_key: state.ordering_key.clone(),
            };
            Ok((next, fence))
        }
        other => Err(other),
    }
}

/// Marks an expired task failed; `None` unless it is [`Availability::Expired`]
/// (never for a blocked task). An expired task with an ordering key keeps
/// holding its key, like any failed one.
pub fn expire(state: &TaskState, now: DateTime<Utc>) -> Option<TaskState> {
    (availability(state, now) == Availability::Expired).then(|| TaskState {
        status: Status::Failed,
        lease: None,
        finished_at: Some(now),
        last_error: EXPIRED_ERROR.to_owned(),
        ..state.clone()
    })
}

/// The `last_error` written when a task expires unsent.
pub const EXPIRED_ERROR: &str = "expired before it could be sent";

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler returned `Ok`.
    Succeeded,
    /// The handler failed, timed out or panicked; another attempt may help.
    Retryable(String),
    /// The handler failed in a way no retry can fix.
    Permanent(String),
    /// No handler is registered for the task. The task waits for another
    /// attempt whatever its attempt limit, retried at the policy's first
    /// delay, so a deployment that adds the handler gets it soon.
    NoHandler(String),
}

/// The decided end of one attempt, ready to be written under its fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The claim this result belongs to.
    pub fence: Fence,
    /// The new status: succeeded, failed, or waiting/available for another
    /// attempt.
    pub status: Status,
    /// For a task tried again: how long after the database's "now" it
    /// becomes due again (zero exactly when `status` is available).
    pub retry_in: Option<Duration>,
    /// The new `last_error` (empty on success), already storable: NUL
    /// characters escaped and cut to 4 KiB on a character boundary. `None`
    /// keeps the stored one (a claim given back).
    pub last_error: Option<String>,
    /// The claim is given back before its handler started: `released` goes
    /// up by one, so the claim does not count against `max_attempts`.
    pub released: bool,
}

/// Decides how an attempt ends: success, another try after a backoff, or failed.
///
/// `run` is the number of this handler run (1 for the first), which is
/// `attempts - released` of the claimed record: claims given back unstarted
/// never count against `max_attempts` nor lengthen the backoff.
pub fn decide(
    fence: Fence,
    run: i64,
    max_attempts: Option<i32>,
    outcome: Outcome,
    policy: &RetryPolicy,
) -> Completion {
    let exhausted = max_attempts.is_some_and(|max| run >= i64::from(max));
    // A missing handler is a deployment gap, not a delivery failure: retry at
    // the first backoff step so a deploy that adds the handler soon gets it.
    let unhandled = matches!(outcome, Outcome::NoHandler(_));
    let (status, error) = match outcome {
        Outcome::Succeeded => (Status::Succeeded, String::new()),
        Outcome::Permanent(error) => (Status::Failed, error),
        Outcome::Retryable(error) if exhausted => (Status::Failed, gave_up(run, &error)),
        Outcome::Retryable(error) | Outcome::NoHandler(error) => (Status::Waiting, error),
    };
    let retry_in =
        (status == Status::Waiting).then(|| policy.delay(if unhandled { 1 } else { run }));
    Completion {
        fence,
        status: retry_status(status, retry_in),
        retry_in,
        last_error: Some(storable_error(&error)),
        released: false,
    }
}

/// Gives back a claim whose handler never started: the task is due again at
/// once, its `last_error` untouched, and `released` goes up by one so the
/// claim does not count against `max_attempts`. `attempts` (the fence token)
/// never decreases.
pub fn release(fence: Fence) -> Completion {
    Completion {
        fence,
        status: Status::Available,
        retry_in: Some(Duration::ZERO),
        last_error: None,
        released: true,
    }
}

/// Fails a claimed task for good without a handler outcome, with `reason`
/// (made storable) in `last_error`: its stored row cannot be decoded (written
/// by another program or by hand), or its result cannot be written.
pub fn fail(fence: Fence, reason: &str) -> Completion {
    Completion {
        fence,
        status: Status::Failed,
        retry_in: None,
        last_error: Some(storable_error(reason)),
        released: false,
    }
}

/// The `last_error` written when a running handler is cut at shutdown.
pub const INTERRUPTED_ERROR: &str = "handler cut at shutdown before it finished";

/// Gives back a claim whose handler started but was cut at shutdown: the
/// task is due again at once. The run counts against `max_attempts` (the
/// handler may have had effects), yet never fails the task by itself.
pub fn interrupt(fence: Fence) -> Completion {
    Completion {
        fence,
        status: Status::Available,
        retry_in: Some(Duration::ZERO),
        last_error: Some(INTERRUPTED_ERROR.to_owned()),
        released: false,
    }
}

/// A task tried again waits for its delay, or is available at once when
/// there is none.
fn retry_status(status: Status, retry_in: Option<Duration>) -> Status {
    match retry_in {
        Some(delay) if delay.is_zero() && status == Status::Waiting => Status::Available,
        _ => status,
    }
}

/// Applies `completion` to `state`; `None` when the fence is stale (the lease
/// was taken over or rescued, or the task is no longer running), which
/// changes nothing.
///
/// A completion that finishes a task with an ordering key as succeeded lets
/// the key move on: the backend then [`unblock`]s the key's next task in the
/// same transaction. A failed one keeps holding its key.
pub fn complete(
    state: &TaskState,
    completion: &Completion,
    now: DateTime<Utc>,
) -> Option<TaskState> {
    let fence = &completion.fence;
    let current = state.status == Status::Running
        && state.attempts == fence.attempt
        && state
            .lease
            .as_ref()
            .is_some_and(|lease| *lease.owner == *fence.owner);
    current.then(|| TaskState {
        status: completion.status,
        released: state.released + i64::from(completion.released),
        lease: None,
        next_attempt_at: match completion.retry_in {
            Some(delay) => after(now, delay),
            None => state.next_attempt_at,
        },
        finished_at: completion.status.is_finished().then_some(now),
        last_error: completion
            .last_error
            .clone()
            .unwrap_or_else(|| state.last_error.clone()),
        ..state.clone()
    })
}

/// Whether a completion lets its task's ordering key move on: it finishes a
/// task that has a key, in a status that no longer holds it.
pub fn moves_key_on(completion: &Completion) -> bool {
    completion.fence.ordering_key.is_some() && !completion.status.holds_key()
}

/// Makes a waiting task available once its time has come; `None` otherwise.
/// Relays run this in bounded batches (see `Store::promote`).
pub fn promote(state: &TaskState, now: DateTime<Utc>) -> Option<TaskState> {
    (state.status == Status::Waiting && state.next_attempt_at <= now).then(|| TaskState {
        status: Status::Available,
        ..state.clone()
    })
}

/// The `last_error` of a task failed because its runs reached
/// `max_attempts`: its last `error`, after how many `runs` it had.
///
/// A statement that counts the runs itself binds the text with [`RUNS`] in
/// place of the count and replaces it:
///
/// ```
/// use diesel_outbox_core::transition::{RUNS, gave_up};
///
/// assert_eq!(gave_up(3, "timed out"), "gave up after 3 attempts: timed out");
/// assert_eq!(gave_up(RUNS, "x").replace(RUNS, "3"), gave_up(3, "x"));
/// ```
pub fn gave_up(runs: impl std::fmt::Display, error: &str) -> String {
    format!("gave up after {runs} attempts: {error}")
}

/// What stands for the count of runs in a [`gave_up`] text that a statement
/// completes.
pub const RUNS: &str = "{runs}";

/// The `last_error` written when a lapsed lease is rescued.
pub const LAPSED_ERROR: &str = "lease lapsed before a result was written (the worker stopped or the handler outlived its lease)";

/// Rescues a running task whose lease lapsed without a result: available
/// again, or failed when its runs already reached `max_attempts` (so a task
/// whose handler brings its worker down every time cannot loop forever).
/// `None` unless it is running with a lapsed lease.
pub fn rescue(state: &TaskState, now: DateTime<Utc>) -> Option<TaskState> {
    let lapsed = state.status == Status::Running
        && state
            .lease
            .as_ref()
            .is_none_or(|lease| lease.expires_at <= now);
    if !lapsed {
        return None;
    }
    let runs = state.attempts - state.released;
    let exhausted = state.max_attempts.is_some_and(|max| runs >= i64::from(max));
    Some(if exhausted {
        TaskState {
            status: Status::Failed,
            lease: None,
            finished_at: Some(now),
            last_error: storable_error(&gave_up(runs, LAPSED_ERROR)),
            ..state.clone()
        }
    } else {
        TaskState {
            status: Status::Available,
            lease: None,
            last_error: LAPSED_ERROR.to_owned(),
            ..state.clone()
        }
    })
}

/// Lets the next task of an ordering key go, once every older task of the
/// key succeeded or was discarded: waiting if its time has not come,
/// available otherwise. `None` unless it is blocked.
pub fn unblock(state: &TaskState, now: DateTime<Utc>) -> Option<TaskState> {
    (state.status == Status::Blocked).then(|| TaskState {
        status: enqueued(true, state.next_attempt_at <= now),
        ..state.clone()
    })
}

/// Whether [`requeue`] takes a task in `status`: only a failed one.
pub const fn requeueable(status: Status) -> bool {
    matches!(status, Status::Failed)
}

/// Whether [`discard`] takes a task in `status`: available, waiting, blocked
/// or failed; never a running one, whose handler may be under way, nor one
/// that succeeded or was discarded already.
pub const fn discardable(status: Status) -> bool {
    matches!(
        status,
        Status::Available | Status::Waiting | Status::Blocked | Status::Failed
    )
}

/// Gives a failed task another chance: available at once, its deadline
/// cleared (an expired task would otherwise expire again), attempts and last
/// error kept. It keeps its place at the head of its ordering key. `None`
/// unless the task is failed.
pub fn requeue(state: &TaskState, now: DateTime<Utc>) -> Option<TaskState> {
    requeueable(state.status).then(|| TaskState {
        status: Status::Available,
        next_attempt_at: now,
        expires_at: None,
        lease: None,
        finished_at: None,
        ..state.clone()
    })
}

/// Gives a task up without sending it: discarded, finished now. A task
/// holding its ordering key lets the key move on. Refused (`None`) for a
/// running task, whose handler may be under way, and for finished ones but
/// failed.
pub fn discard(state: &TaskState, now: DateTime<Utc>) -> Option<TaskState> {
    discardable(state.status).then(|| TaskState {
        status: Status::Discarded,
        lease: None,
        finished_at: Some(now),
        ..state.clone()
    })
}

/// `now + delay`, saturating at the largest representable instant.
pub fn after(now: DateTime<Utc>, delay: Duration) -> DateTime<Utc> {
    chrono::TimeDelta::from_std(delay)
        .ok()
        .and_then(|delta| now.checked_add_signed(delta))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
