//! The task state machine as pure functions (described in docs/semantics.md).
//!
//! Backends never decide a transition themselves: they read a [`TaskState`],
//! ask these functions, and translate the answer into one conditional SQL
//! statement whose `WHERE` clause re-checks the same rule, so a concurrent
//! writer can never make a stale decision stick.

use std::time::Duration;

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
    /// Current claim.
    pub lease: Option<Lease>,
    /// End time, set exactly when the status is final.
    pub finished_at: Option<DateTime<Utc>>,
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
    /// Already succeeded or failed.
    Finished(Status),
}

/// Decides whether `state` may be claimed at `now`.
///
/// `blocked` says whether an older task with the same ordering key is still
/// pending or failed. A live lease wins over expiry (its holder decides), and
/// expiry wins over the schedule.
pub fn availability(state: &TaskState, now: DateTime<Utc>, blocked: bool) -> Availability {
    if state.status.is_finished() {
        return Availability::Finished(state.status);
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
    if blocked {
        return Availability::Blocked;
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
    /// The claiming worker.
    pub owner: String,
    /// The attempt number the claim started (the row's `attempts` after the claim).
    pub attempt: i64,
}

/// Claims `state` for `owner` until `now + lease`, starting the next attempt.
pub fn claim(
    state: &TaskState,
    id: TaskId,
    owner: &str,
    now: DateTime<Utc>,
    lease: Duration,
    blocked: bool,
) -> Result<(TaskState, Fence), Availability> {
    match availability(state, now, blocked) {
        Availability::Claimable => {
            let attempt = state.attempts + 1;
            let next = TaskState {
                attempts: attempt,
                lease: Some(Lease {
                    owner: owner.to_owned(),
                    expires_at: after(now, lease),
                }),
                ..state.clone()
            };
            let fence = Fence {
                id,
                owner: owner.to_owned(),
                attempt,
            };
            Ok((next, fence))
        }
        other => Err(other),
    }
}

/// Marks an expired task failed; `None` unless it is [`Availability::Expired`].
pub fn expire(state: &TaskState, now: DateTime<Utc>) -> Option<TaskState> {
    (availability(state, now, false) == Availability::Expired).then(|| TaskState {
        status: Status::Failed,
        lease: None,
        finished_at: Some(now),
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
    /// No handler is registered for the task. The task stays pending whatever
    /// its attempt limit, retried at the policy's first delay, so a deployment
    /// that adds the handler gets it soon.
    NoHandler(String),
}

/// The decided end of one attempt, ready to be written under its fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The claim this result belongs to.
    pub fence: Fence,
    /// The new status.
    pub status: Status,
    /// For a task staying pending: how long after the database's "now" it
    /// becomes due again.
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
        Outcome::Retryable(error) if exhausted => (
            Status::Failed,
            format!("gave up after {run} attempts: {error}"),
        ),
        Outcome::Retryable(error) | Outcome::NoHandler(error) => (Status::Pending, error),
    };
    let retry_in =
        (status == Status::Pending).then(|| policy.delay(if unhandled { 1 } else { run }));
    Completion {
        fence,
        status,
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
        status: Status::Pending,
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
        status: Status::Pending,
        retry_in: Some(Duration::ZERO),
        last_error: Some(INTERRUPTED_ERROR.to_owned()),
        released: false,
    }
}

/// Applies `completion` to `state`; `None` when the fence is stale (the lease
/// was taken over, or the task is no longer pending), which changes nothing.
pub fn complete(
    state: &TaskState,
    completion: &Completion,
    now: DateTime<Utc>,
) -> Option<TaskState> {
    let fence = &completion.fence;
    let current = state.status == Status::Pending
        && state.attempts == fence.attempt
        && state
            .lease
            .as_ref()
            .is_some_and(|lease| lease.owner == fence.owner);
    current.then(|| TaskState {
        status: completion.status,
        released: state.released + i64::from(completion.released),
        lease: None,
        next_attempt_at: match completion.retry_in {
            Some(delay) => after(now, delay),
            None => state.next_attempt_at,
        },
        finished_at: completion.status.is_finished().then_some(now),
        ..state.clone()
    })
}

/// Gives a failed task another chance: pending and due now, attempts kept.
/// `None` unless the task is failed.
pub fn requeue(state: &TaskState, now: DateTime<Utc>) -> Option<TaskState> {
    (state.status == Status::Failed).then(|| TaskState {
        status: Status::Pending,
        next_attempt_at: now,
        lease: None,
        finished_at: None,
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
