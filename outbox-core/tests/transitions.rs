//! The task state machine (`diesel_outbox_core::transition`) through its public API:
//! unit tests of each rule, then property tests over random event sequences,
//! first of one task under a simulated clock, then of the tasks of one
//! ordering key.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use diesel_outbox_core::{
    Lease, RetryPolicy, Status, TaskId,
    limits::MAX_ERROR_BYTES,
    transition::{
        Availability, Completion, EXPIRED_ERROR, Fence, INTERRUPTED_ERROR, LAPSED_ERROR, Outcome,
        TaskState, after, availability, claim, complete, decide, discard, enqueued, expire, fail,
        interrupt, moves_key_on, promote, release, requeue, rescue, unblock,
    },
};
use proptest::prelude::*;

const ID: TaskId = TaskId::new(7);
const KEY: &str = "order-42";
const OWNERS: [&str; 3] = ["worker-a", "worker-b", "worker-c"];

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid fixed instant")
}

fn secs(n: i64) -> TimeDelta {
    TimeDelta::seconds(n)
}

/// A fresh available task, due at `t0`, without key, limit or deadline.
fn fresh() -> TaskState {
    TaskState {
        status: Status::Available,
        attempts: 0,
        released: 0,
        max_attempts: None,
        next_attempt_at: t0(),
        expires_at: None,
        lease: None,
        finished_at: None,
        ordering_key: None,
        last_error: String::new(),
    }
}

fn lease(owner: &str, expires_at: DateTime<Utc>) -> Option<Lease> {
    Some(Lease {
        owner: owner.to_owned(),
        expires_at,
    })
}

fn fence(owner: &str, attempt: i64) -> Fence {
    Fence {
        id: ID,
        owner: owner.into(),
        attempt,
        ordering_key: None,
    }
}

fn keyed_fence(owner: &str, attempt: i64) -> Fence {
    Fence {
        ordering_key: Some(KEY.to_owned()),
        ..fence(owner, attempt)
    }
}

/// A task running for `owner` as attempt `attempt`, lease live for a minute after `t0`.
fn claimed(owner: &str, attempt: i64) -> TaskState {
    TaskState {
        status: Status::Running,
        attempts: attempt,
        lease: lease(owner, t0() + secs(60)),
        ..fresh()
    }
}

/// A task in `status` with the lease and end time that status implies: a
/// running one is attempt 1 of `worker-a`, leased for a minute after `t0`.
fn in_status(status: Status) -> TaskState {
    match status {
        Status::Running => claimed("worker-a", 1),
        status if status.is_finished() => TaskState {
            status,
            attempts: 1,
            finished_at: Some(t0()),
            ..fresh()
        },
        status => TaskState {
            status,
            ordering_key: Some(KEY.to_owned()),
            ..fresh()
        },
    }
}

/// A policy whose every retry delay is zero.
fn zero_delays() -> RetryPolicy {
    RetryPolicy::new(Duration::ZERO, Duration::ZERO, 0.0).expect("zero delays are a valid policy")
}

// ---------------------------------------------------------------------------
// enqueued
// ---------------------------------------------------------------------------

#[test]
fn enqueued_is_blocked_behind_its_key_else_available_or_waiting_by_schedule() {
    assert_eq!(enqueued(true, true), Status::Available);
    assert_eq!(enqueued(true, false), Status::Waiting);
    // Behind an unfinished task of its key, the schedule does not matter.
    assert_eq!(enqueued(false, true), Status::Blocked);
    assert_eq!(enqueued(false, false), Status::Blocked);
}

// ---------------------------------------------------------------------------
// availability
// ---------------------------------------------------------------------------

#[test]
fn availability_of_a_due_task_is_claimable_including_at_the_exact_instant() {
    assert_eq!(availability(&fresh(), t0()), Availability::Claimable);
    assert_eq!(
        availability(&fresh(), t0() + secs(5)),
        Availability::Claimable
    );
}

#[test]
fn availability_finished_wins_over_everything() {
    for status in [Status::Succeeded, Status::Failed, Status::Discarded] {
        let state = TaskState {
            status,
            finished_at: Some(t0()),
            expires_at: Some(t0() - secs(10)),
            next_attempt_at: t0() + secs(100),
            ordering_key: Some(KEY.to_owned()),
            ..fresh()
        };
        assert_eq!(availability(&state, t0()), Availability::Finished(status));
    }
}

#[test]
fn availability_live_lease_wins_over_expiry() {
    let state = TaskState {
        expires_at: Some(t0() - secs(1)),
        ..claimed("worker-a", 1)
    };
    assert_eq!(
        availability(&state, t0()),
        Availability::Leased {
            until: t0() + secs(60)
        }
    );
}

#[test]
fn availability_of_a_running_task_lapses_at_its_lease_expiry_instant() {
    let state = claimed("worker-a", 1);
    let until = t0() + secs(60);
    assert_eq!(
        availability(&state, until - secs(1)),
        Availability::Leased { until }
    );
    // A lapsed lease may be taken over by a claim by id.
    assert_eq!(availability(&state, until), Availability::Claimable);
}

#[test]
fn availability_expired_wins_over_not_due() {
    let state = TaskState {
        status: Status::Waiting,
        expires_at: Some(t0()),
        next_attempt_at: t0() + secs(100),
        ..fresh()
    };
    assert_eq!(availability(&state, t0()), Availability::Expired);
    // A lapsed lease does not protect an expired task.
    let lapsed = TaskState {
        lease: lease("worker-a", t0() - secs(1)),
        ..claimed("worker-a", 1)
    };
    let lapsed = TaskState {
        expires_at: Some(t0()),
        ..lapsed
    };
    assert_eq!(availability(&lapsed, t0()), Availability::Expired);
}

#[test]
fn availability_of_a_waiting_task_is_not_due_until_its_time_then_claimable() {
    let state = TaskState {
        status: Status::Waiting,
        next_attempt_at: t0() + secs(30),
        expires_at: Some(t0() + secs(60)),
        ..fresh()
    };
    assert_eq!(
        availability(&state, t0()),
        Availability::NotDue {
            at: t0() + secs(30)
        }
    );
    // A claim by id need not wait for the promotion step.
    assert_eq!(
        availability(&state, t0() + secs(30)),
        Availability::Claimable
    );
}

#[test]
fn availability_of_a_blocked_task_is_blocked_whatever_its_schedule_or_deadline() {
    let due = TaskState {
        status: Status::Blocked,
        ordering_key: Some(KEY.to_owned()),
        ..fresh()
    };
    assert_eq!(availability(&due, t0()), Availability::Blocked);
    let not_due = TaskState {
        next_attempt_at: t0() + secs(30),
        ..due.clone()
    };
    assert_eq!(availability(&not_due, t0()), Availability::Blocked);
    // Past its deadline it is still only blocked: it is not the head of its
    // key, so it may neither be sent nor fail (a failed task holds its key,
    // and requeueing it would let it run beside the key's real head). It
    // expires once its key reaches it.
    let past = TaskState {
        expires_at: Some(t0() - secs(1)),
        ..due
    };
    assert_eq!(availability(&past, t0()), Availability::Blocked);
    assert_eq!(expire(&past, t0()), None);
    let head = unblock(&past, t0()).expect("a blocked task is unblocked");
    assert_eq!(availability(&head, t0()), Availability::Expired);
}

// ---------------------------------------------------------------------------
// claim
// ---------------------------------------------------------------------------

#[test]
fn claim_starts_the_next_attempt_under_a_lease() {
    let state = TaskState {
        attempts: 2,
        released: 1,
        ordering_key: Some(KEY.to_owned()),
        last_error: "earlier".to_owned(),
        ..fresh()
    };
    let (next, f) = claim(&state, ID, "worker-b", t0(), Duration::from_secs(30))
        .expect("an available task is claimable");
    assert_eq!(f, keyed_fence("worker-b", 3));
    assert_eq!(next.status, Status::Running);
    assert_eq!(next.attempts, 3);
    assert_eq!(next.released, 1);
    assert_eq!(next.lease, lease("worker-b", t0() + secs(30)));
    assert_eq!(next.next_attempt_at, state.next_attempt_at);
    assert_eq!(next.finished_at, None);
    assert_eq!(next.last_error, "earlier");
}

#[test]
fn claim_takes_a_waiting_task_whose_time_has_come() {
    let state = TaskState {
        status: Status::Waiting,
        next_attempt_at: t0() + secs(10),
        ..fresh()
    };
    assert_eq!(
        claim(&state, ID, "worker-a", t0(), Duration::from_secs(5)),
        Err(Availability::NotDue {
            at: t0() + secs(10)
        })
    );
    let (next, _) = claim(
        &state,
        ID,
        "worker-a",
        t0() + secs(10),
        Duration::from_secs(5),
    )
    .expect("due");
    assert_eq!(next.status, Status::Running);
}

#[test]
fn claim_is_refused_with_the_reason() {
    let live = claimed("worker-a", 1);
    assert_eq!(
        claim(&live, ID, "worker-b", t0(), Duration::from_secs(5)),
        Err(Availability::Leased {
            until: t0() + secs(60)
        })
    );
    assert_eq!(
        claim(
            &in_status(Status::Blocked),
            ID,
            "worker-b",
            t0(),
            Duration::from_secs(5)
        ),
        Err(Availability::Blocked)
    );
    let expired = TaskState {
        expires_at: Some(t0()),
        ..fresh()
    };
    assert_eq!(
        claim(&expired, ID, "worker-b", t0(), Duration::from_secs(5)),
        Err(Availability::Expired)
    );
    for status in [Status::Succeeded, Status::Failed, Status::Discarded] {
        assert_eq!(
            claim(
                &in_status(status),
                ID,
                "worker-b",
                t0(),
                Duration::from_secs(5)
            ),
            Err(Availability::Finished(status))
        );
    }
}

#[test]
fn claim_takes_over_a_lapsed_lease_and_the_old_fence_goes_stale() {
    let state = claimed("worker-a", 1);
    let later = t0() + secs(61);
    let (next, f) = claim(&state, ID, "worker-b", later, Duration::from_secs(5))
        .expect("lapsed lease can be taken over");
    assert_eq!(f, fence("worker-b", 2));
    assert_eq!(next.status, Status::Running);
    let old = decide(
        fence("worker-a", 1),
        1,
        None,
        Outcome::Succeeded,
        &RetryPolicy::default(),
    );
    assert_eq!(complete(&next, &old, later), None);
}

// ---------------------------------------------------------------------------
// expire
// ---------------------------------------------------------------------------

#[test]
fn expire_fails_an_expired_task_and_keeps_attempts() {
    let state = TaskState {
        attempts: 4,
        expires_at: Some(t0()),
        ..claimed("worker-a", 4)
    };
    let state = TaskState {
        lease: lease("worker-a", t0() - secs(1)),
        ..state
    };
    let next = expire(&state, t0() + secs(2)).expect("expired task");
    assert_eq!(next.status, Status::Failed);
    assert_eq!(next.finished_at, Some(t0() + secs(2)));
    assert_eq!(next.lease, None);
    assert_eq!(next.attempts, 4);
    assert_eq!(next.last_error, EXPIRED_ERROR);
    // Available and waiting tasks expire alike.
    for status in [Status::Available, Status::Waiting] {
        let state = TaskState {
            status,
            expires_at: Some(t0()),
            ..fresh()
        };
        let next = expire(&state, t0()).expect("expired task");
        assert_eq!(next.status, Status::Failed);
    }
}

#[test]
fn expire_does_nothing_before_the_deadline_under_a_live_lease_when_blocked_or_finished() {
    let not_yet = TaskState {
        expires_at: Some(t0() + secs(1)),
        ..fresh()
    };
    assert_eq!(expire(&not_yet, t0()), None);
    let leased = TaskState {
        expires_at: Some(t0() - secs(1)),
        ..claimed("worker-a", 1)
    };
    assert_eq!(expire(&leased, t0()), None);
    for status in [
        Status::Blocked,
        Status::Succeeded,
        Status::Failed,
        Status::Discarded,
    ] {
        let state = TaskState {
            expires_at: Some(t0() - secs(1)),
            ..in_status(status)
        };
        assert_eq!(expire(&state, t0()), None, "{status}");
    }
    assert_eq!(expire(&fresh(), t0()), None);
}

// ---------------------------------------------------------------------------
// decide
// ---------------------------------------------------------------------------

fn assert_retry_window(completion: &Completion, attempt: i64) {
    let policy = RetryPolicy::default();
    let delay = completion
        .retry_in
        .expect("a task tried again gets a delay");
    assert!(delay <= policy.delay_with(attempt, 0.0), "{delay:?}");
    assert!(
        delay >= policy.delay_with(attempt, 1.0) - Duration::from_nanos(1),
        "{delay:?}"
    );
}

#[test]
fn decide_retryable_below_the_limit_waits_for_its_backoff() {
    let c = decide(
        fence("worker-a", 2),
        2,
        Some(3),
        Outcome::Retryable("boom".into()),
        &RetryPolicy::default(),
    );
    assert_eq!(c.status, Status::Waiting);
    assert_eq!(c.last_error.as_deref(), Some("boom"));
    assert_eq!(c.fence, fence("worker-a", 2));
    assert!(!c.released);
    assert_retry_window(&c, 2);
}

#[test]
fn decide_retryable_without_a_delay_is_available_at_once() {
    let c = decide(
        fence("worker-a", 1),
        1,
        Some(3),
        Outcome::Retryable("boom".into()),
        &zero_delays(),
    );
    assert_eq!(c.status, Status::Available);
    assert_eq!(c.retry_in, Some(Duration::ZERO));
    let c = decide(
        fence("worker-a", 7),
        7,
        Some(3),
        Outcome::NoHandler("none".into()),
        &zero_delays(),
    );
    assert_eq!(c.status, Status::Available);
    assert_eq!(c.retry_in, Some(Duration::ZERO));
}

#[test]
fn decide_retryable_on_the_last_attempt_gives_up() {
    let c = decide(
        fence("worker-a", 3),
        3,
        Some(3),
        Outcome::Retryable("boom".into()),
        &RetryPolicy::default(),
    );
    assert_eq!(c.status, Status::Failed);
    assert_eq!(c.retry_in, None);
    let error = c.last_error.expect("an error is recorded");
    assert!(error.starts_with("gave up after 3 attempts"), "{error}");
    assert!(error.ends_with("boom"), "{error}");
    // Beyond the limit (e.g. after a requeue) it gives up as well.
    let c = decide(
        fence("worker-a", 5),
        5,
        Some(3),
        Outcome::Retryable("boom".into()),
        &RetryPolicy::default(),
    );
    assert_eq!(c.status, Status::Failed);
}

#[test]
fn decide_without_a_limit_never_gives_up() {
    let c = decide(
        fence("worker-a", 10_000),
        10_000,
        None,
        Outcome::Retryable("boom".into()),
        &RetryPolicy::default(),
    );
    assert_eq!(c.status, Status::Waiting);
    assert_retry_window(&c, 10_000);
}

#[test]
fn decide_no_handler_waits_even_past_the_limit() {
    let c = decide(
        fence("worker-a", 9),
        9,
        Some(3),
        Outcome::NoHandler("no handler for x v1".into()),
        &RetryPolicy::default(),
    );
    assert_eq!(c.status, Status::Waiting);
    assert_eq!(c.last_error.as_deref(), Some("no handler for x v1"));
    // A missing handler does not back off exponentially: it waits the first
    // step, so a deploy that adds the handler soon gets the task.
    assert_retry_window(&c, 1);
}

#[test]
fn decide_permanent_fails_at_once() {
    let c = decide(
        fence("worker-a", 1),
        1,
        Some(5),
        Outcome::Permanent("bad payload".into()),
        &RetryPolicy::default(),
    );
    assert_eq!(c.status, Status::Failed);
    assert_eq!(c.retry_in, None);
    assert_eq!(c.last_error.as_deref(), Some("bad payload"));
}

#[test]
fn decide_success_clears_the_error() {
    let c = decide(
        fence("worker-a", 3),
        3,
        Some(3),
        Outcome::Succeeded,
        &RetryPolicy::default(),
    );
    assert_eq!(c.status, Status::Succeeded);
    assert_eq!(c.retry_in, None);
    assert_eq!(c.last_error.as_deref(), Some(""));
}

#[test]
fn decide_cuts_last_error_on_a_utf8_boundary() {
    let policy = RetryPolicy::default();
    // 3-byte characters: 4096 is not a boundary, so the cut is at 4095.
    let c = decide(
        fence("worker-a", 1),
        1,
        None,
        Outcome::Permanent("€".repeat(2000)),
        &policy,
    );
    let error = c.last_error.expect("an error");
    assert_eq!(error.len(), MAX_ERROR_BYTES - 1);
    assert!(error.chars().all(|ch| ch == '€'));
    // ASCII: cut at exactly 4096, the "gave up" prefix included.
    let c = decide(
        fence("worker-a", 2),
        2,
        Some(2),
        Outcome::Retryable("x".repeat(5000)),
        &policy,
    );
    let error = c.last_error.expect("an error");
    assert_eq!(error.len(), MAX_ERROR_BYTES);
    assert!(error.starts_with("gave up after 2 attempts: xxx"));
    // Exactly at the limit: kept whole.
    let c = decide(
        fence("worker-a", 1),
        1,
        None,
        Outcome::NoHandler("y".repeat(MAX_ERROR_BYTES)),
        &policy,
    );
    assert_eq!(c.last_error.map(|e| e.len()), Some(MAX_ERROR_BYTES));
}

// ---------------------------------------------------------------------------
// complete
// ---------------------------------------------------------------------------

#[test]
fn complete_with_the_current_fence_applies_the_decision() {
    let policy = RetryPolicy::default();
    let state = TaskState {
        max_attempts: Some(5),
        last_error: "earlier".to_owned(),
        ..claimed("worker-a", 2)
    };
    let now = t0() + secs(10);

    let ok = decide(
        fence("worker-a", 2),
        2,
        Some(5),
        Outcome::Succeeded,
        &policy,
    );
    let done = complete(&state, &ok, now).expect("current fence");
    assert_eq!(done.status, Status::Succeeded);
    assert_eq!(done.finished_at, Some(now));
    assert_eq!(done.lease, None);
    assert_eq!(done.attempts, 2);
    assert_eq!(done.last_error, "");

    let retry = decide(
        fence("worker-a", 2),
        2,
        Some(5),
        Outcome::Retryable("e".into()),
        &policy,
    );
    let delay = retry.retry_in.expect("a retry gets a delay");
    let waiting = complete(&state, &retry, now).expect("current fence");
    assert_eq!(waiting.status, Status::Waiting);
    assert_eq!(waiting.finished_at, None);
    assert_eq!(waiting.lease, None);
    assert_eq!(waiting.next_attempt_at, after(now, delay));
    assert!(waiting.next_attempt_at > now);
    assert_eq!(waiting.last_error, "e");
    assert_eq!(
        availability(&waiting, now),
        Availability::NotDue {
            at: waiting.next_attempt_at
        }
    );

    let retry_now = decide(
        fence("worker-a", 2),
        2,
        Some(5),
        Outcome::Retryable("e".into()),
        &zero_delays(),
    );
    let available = complete(&state, &retry_now, now).expect("current fence");
    assert_eq!(available.status, Status::Available);
    assert_eq!(available.next_attempt_at, now);
    assert_eq!(availability(&available, now), Availability::Claimable);
}

#[test]
fn complete_is_accepted_after_the_lease_lapsed_if_nobody_took_over() {
    let state = claimed("worker-a", 1);
    let c = decide(
        fence("worker-a", 1),
        1,
        None,
        Outcome::Succeeded,
        &RetryPolicy::default(),
    );
    let late = t0() + secs(3600);
    let done = complete(&state, &c, late).expect("fence still current");
    assert_eq!(done.status, Status::Succeeded);
}

#[test]
fn complete_with_a_stale_fence_changes_nothing() {
    let policy = RetryPolicy::default();
    let state = claimed("worker-a", 3);
    let now = t0() + secs(1);
    let stale = [
        fence("worker-b", 3), // other owner
        fence("worker-a", 2), // older attempt
        fence("worker-a", 4), // attempt that never started
    ];
    for f in stale {
        for outcome in [
            Outcome::Succeeded,
            Outcome::Permanent("p".into()),
            Outcome::Retryable("r".into()),
            Outcome::NoHandler("n".into()),
        ] {
            let c = decide(f.clone(), f.attempt, None, outcome, &policy);
            assert_eq!(complete(&state, &c, now), None, "{f:?}");
        }
        assert_eq!(complete(&state, &release(f.clone()), now), None, "{f:?}");
        assert_eq!(complete(&state, &interrupt(f.clone()), now), None, "{f:?}");
        assert_eq!(complete(&state, &fail(f.clone(), "x"), now), None, "{f:?}");
    }
    // No lease at all (e.g. already released).
    let released = TaskState {
        status: Status::Available,
        lease: None,
        ..state.clone()
    };
    let c = decide(fence("worker-a", 3), 3, None, Outcome::Succeeded, &policy);
    assert_eq!(complete(&released, &c, now), None);
}

#[test]
fn complete_applies_only_while_running() {
    let policy = RetryPolicy::default();
    for status in Status::ALL
        .into_iter()
        .filter(|status| *status != Status::Running)
    {
        // Even with a matching owner, attempt and lease, only a running task
        // takes a result.
        let state = TaskState {
            lease: lease("worker-a", t0() + secs(60)),
            attempts: 2,
            ..in_status(status)
        };
        let c = decide(fence("worker-a", 2), 2, None, Outcome::Succeeded, &policy);
        assert_eq!(complete(&state, &c, t0()), None, "{status}");
        let state = TaskState {
            lease: None,
            ..state
        };
        assert_eq!(complete(&state, &c, t0()), None, "{status}");
        assert_eq!(
            complete(&state, &release(fence("worker-a", 2)), t0()),
            None,
            "{status}"
        );
    }
}

// ---------------------------------------------------------------------------
// release, interrupt, fail
// ---------------------------------------------------------------------------

#[test]
fn release_keeps_attempts_and_error_and_is_available_at_once() {
    let f = fence("worker-a", 4);
    let c = release(f.clone());
    assert_eq!(c.fence, f);
    assert_eq!(c.status, Status::Available);
    assert_eq!(c.retry_in, Some(Duration::ZERO));
    assert_eq!(c.last_error, None);
    assert!(c.released);

    let state = TaskState {
        next_attempt_at: t0() - secs(100),
        released: 1,
        last_error: "earlier".to_owned(),
        ..claimed("worker-a", 4)
    };
    let now = t0() + secs(3);
    let next = complete(&state, &c, now).expect("current fence");
    assert_eq!(next.attempts, 4);
    assert_eq!(next.released, 2);
    assert_eq!(next.status, Status::Available);
    assert_eq!(next.lease, None);
    assert_eq!(next.finished_at, None);
    assert_eq!(next.next_attempt_at, now);
    assert_eq!(next.last_error, "earlier");
    assert_eq!(availability(&next, now), Availability::Claimable);
}

#[test]
fn interrupt_counts_the_run_but_never_fails_the_task() {
    let c = interrupt(fence("worker-a", 3));
    assert_eq!(c.status, Status::Available);
    assert_eq!(c.retry_in, Some(Duration::ZERO));
    assert_eq!(c.last_error.as_deref(), Some(INTERRUPTED_ERROR));
    assert!(!c.released);
    // The limit is reached, yet the task is available again.
    let state = TaskState {
        max_attempts: Some(3),
        ..claimed("worker-a", 3)
    };
    let now = t0() + secs(2);
    let next = complete(&state, &c, now).expect("current fence");
    assert_eq!(next.status, Status::Available);
    assert_eq!((next.attempts, next.released), (3, 0));
    assert_eq!(next.next_attempt_at, now);
    assert_eq!(next.last_error, INTERRUPTED_ERROR);
}

#[test]
fn fail_fails_for_good_with_a_storable_reason() {
    let c = fail(fence("worker-a", 1), "bad\0row");
    assert_eq!(c.status, Status::Failed);
    assert_eq!(c.retry_in, None);
    assert_eq!(c.last_error.as_deref(), Some("bad\\0row"));
    let next = complete(&claimed("worker-a", 1), &c, t0()).expect("current fence");
    assert_eq!(next.status, Status::Failed);
    assert_eq!(next.finished_at, Some(t0()));
}

// ---------------------------------------------------------------------------
// moves_key_on
// ---------------------------------------------------------------------------

#[test]
fn only_a_keyed_success_moves_its_key_on() {
    let policy = RetryPolicy::default();
    for keyed in [false, true] {
        let f = if keyed {
            keyed_fence("worker-a", 1)
        } else {
            fence("worker-a", 1)
        };
        let completions = [
            decide(f.clone(), 1, Some(1), Outcome::Succeeded, &policy),
            decide(
                f.clone(),
                1,
                Some(3),
                Outcome::Retryable("r".into()),
                &policy,
            ),
            decide(
                f.clone(),
                1,
                Some(1),
                Outcome::Retryable("r".into()),
                &policy,
            ),
            decide(
                f.clone(),
                1,
                None,
                Outcome::Retryable("r".into()),
                &zero_delays(),
            ),
            decide(f.clone(), 1, None, Outcome::Permanent("p".into()), &policy),
            decide(f.clone(), 1, None, Outcome::NoHandler("n".into()), &policy),
            release(f.clone()),
            interrupt(f.clone()),
            fail(f.clone(), "unreadable"),
        ];
        for c in completions {
            // A completion never discards: only an operator does.
            assert_ne!(c.status, Status::Discarded);
            let expected = keyed && c.status == Status::Succeeded;
            assert_eq!(moves_key_on(&c), expected, "{c:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// promote
// ---------------------------------------------------------------------------

#[test]
fn promote_makes_a_waiting_task_available_once_due_and_nothing_else() {
    let waiting = TaskState {
        status: Status::Waiting,
        next_attempt_at: t0() + secs(30),
        attempts: 2,
        last_error: "e".to_owned(),
        ..fresh()
    };
    assert_eq!(promote(&waiting, t0()), None);
    assert_eq!(promote(&waiting, t0() + secs(29)), None);
    let due = t0() + secs(30);
    let next = promote(&waiting, due).expect("due at the exact instant");
    assert_eq!(
        next,
        TaskState {
            status: Status::Available,
            ..waiting.clone()
        }
    );
    assert_eq!(availability(&next, due), Availability::Claimable);
    // Only waiting tasks, however long overdue.
    let late = t0() + secs(3600);
    for status in Status::ALL
        .into_iter()
        .filter(|status| *status != Status::Waiting)
    {
        assert_eq!(promote(&in_status(status), late), None, "{status}");
    }
}

// ---------------------------------------------------------------------------
// rescue
// ---------------------------------------------------------------------------

#[test]
fn rescue_makes_a_lapsed_running_task_available_again() {
    let state = TaskState {
        max_attempts: Some(3),
        last_error: "earlier".to_owned(),
        ..claimed("worker-a", 2)
    };
    let until = t0() + secs(60);
    // A live lease is never rescued, up to the last instant.
    assert_eq!(rescue(&state, t0()), None);
    assert_eq!(rescue(&state, until - TimeDelta::nanoseconds(1)), None);
    let next = rescue(&state, until).expect("lapsed at its expiry instant");
    assert_eq!(next.status, Status::Available);
    assert_eq!(next.lease, None);
    assert_eq!(next.finished_at, None);
    assert_eq!((next.attempts, next.released), (2, 0));
    assert_eq!(next.next_attempt_at, state.next_attempt_at);
    assert_eq!(next.last_error, LAPSED_ERROR);
    assert_eq!(availability(&next, until), Availability::Claimable);
    // The worker that lost its lease can no longer write its result.
    let late = decide(
        fence("worker-a", 2),
        2,
        Some(3),
        Outcome::Succeeded,
        &RetryPolicy::default(),
    );
    assert_eq!(complete(&next, &late, until), None);
}

#[test]
fn rescue_fails_a_task_whose_runs_reached_the_limit() {
    // Four claims, one given back unstarted: three runs, the limit.
    let state = TaskState {
        max_attempts: Some(3),
        released: 1,
        ..claimed("worker-a", 4)
    };
    let now = t0() + secs(61);
    let next = rescue(&state, now).expect("lapsed");
    assert_eq!(next.status, Status::Failed);
    assert_eq!(next.finished_at, Some(now));
    assert_eq!(next.lease, None);
    assert_eq!(next.attempts, 4);
    assert_eq!(
        next.last_error,
        format!("gave up after 3 attempts: {LAPSED_ERROR}")
    );
    // One run fewer: available again.
    let below = TaskState {
        released: 2,
        ..state.clone()
    };
    assert_eq!(
        rescue(&below, now).map(|s| s.status),
        Some(Status::Available)
    );
    // Without a limit, never failed.
    let unlimited = TaskState {
        max_attempts: None,
        ..claimed("worker-a", 1_000)
    };
    assert_eq!(
        rescue(&unlimited, now).map(|s| s.status),
        Some(Status::Available)
    );
}

#[test]
fn rescue_touches_only_running_tasks() {
    let late = t0() + secs(3600);
    for status in Status::ALL
        .into_iter()
        .filter(|status| *status != Status::Running)
    {
        assert_eq!(rescue(&in_status(status), late), None, "{status}");
    }
}

// ---------------------------------------------------------------------------
// unblock
// ---------------------------------------------------------------------------

#[test]
fn unblock_lets_a_blocked_task_go_by_its_schedule() {
    let blocked = TaskState {
        status: Status::Blocked,
        ordering_key: Some(KEY.to_owned()),
        next_attempt_at: t0() + secs(30),
        ..fresh()
    };
    let early = unblock(&blocked, t0()).expect("blocked");
    assert_eq!(
        early,
        TaskState {
            status: Status::Waiting,
            ..blocked.clone()
        }
    );
    let due = unblock(&blocked, t0() + secs(30)).expect("blocked");
    assert_eq!(
        due,
        TaskState {
            status: Status::Available,
            ..blocked.clone()
        }
    );
    assert_eq!(availability(&due, t0() + secs(30)), Availability::Claimable);
    for status in Status::ALL
        .into_iter()
        .filter(|status| *status != Status::Blocked)
    {
        assert_eq!(unblock(&in_status(status), t0()), None, "{status}");
    }
}

// ---------------------------------------------------------------------------
// requeue
// ---------------------------------------------------------------------------

#[test]
fn requeue_only_from_failed() {
    let now = t0() + secs(50);
    let failed = TaskState {
        status: Status::Failed,
        attempts: 3,
        released: 1,
        max_attempts: Some(3),
        finished_at: Some(t0()),
        next_attempt_at: t0() + secs(999),
        expires_at: Some(t0() + secs(10)),
        ordering_key: Some(KEY.to_owned()),
        last_error: "gave up".to_owned(),
        ..fresh()
    };
    let next = requeue(&failed, now).expect("failed task is requeued");
    assert_eq!(next.status, Status::Available);
    assert_eq!((next.attempts, next.released), (3, 1));
    assert_eq!(next.finished_at, None);
    assert_eq!(next.lease, None);
    assert_eq!(next.next_attempt_at, now);
    assert_eq!(next.expires_at, None);
    assert_eq!(next.last_error, "gave up");
    assert_eq!(next.ordering_key.as_deref(), Some(KEY));
    assert_eq!(availability(&next, now), Availability::Claimable);

    for status in Status::ALL
        .into_iter()
        .filter(|status| *status != Status::Failed)
    {
        assert_eq!(requeue(&in_status(status), now), None, "{status}");
    }
}

#[test]
fn an_expired_task_requeued_can_be_claimed() {
    let state = TaskState {
        expires_at: Some(t0()),
        ..fresh()
    };
    assert_eq!(
        claim(&state, ID, "worker-a", t0(), Duration::from_secs(5)),
        Err(Availability::Expired)
    );
    let failed = expire(&state, t0() + secs(1)).expect("expired");
    let now = t0() + secs(2);
    let requeued = requeue(&failed, now).expect("failed");
    // The deadline is gone: the task would otherwise expire again at once.
    assert_eq!(requeued.expires_at, None);
    assert_eq!(requeued.last_error, EXPIRED_ERROR);
    let (running, f) =
        claim(&requeued, ID, "worker-a", now, Duration::from_secs(5)).expect("claimable");
    assert_eq!(running.status, Status::Running);
    let done = decide(f, 1, None, Outcome::Succeeded, &RetryPolicy::default());
    let done = complete(&running, &done, now).expect("current fence");
    assert_eq!(done.status, Status::Succeeded);
    assert_eq!(done.last_error, "");
}

// ---------------------------------------------------------------------------
// discard
// ---------------------------------------------------------------------------

#[test]
fn discard_gives_up_a_task_that_is_not_running_nor_finished_but_failed() {
    let now = t0() + secs(5);
    for status in [
        Status::Available,
        Status::Waiting,
        Status::Blocked,
        Status::Failed,
    ] {
        let state = TaskState {
            attempts: 2,
            last_error: "e".to_owned(),
            ..in_status(status)
        };
        let next = discard(&state, now).expect("discardable");
        assert_eq!(
            next,
            TaskState {
                status: Status::Discarded,
                finished_at: Some(now),
                ..state
            },
            "{status}"
        );
        assert_eq!(
            availability(&next, now),
            Availability::Finished(Status::Discarded)
        );
        // Discarded is final.
        assert_eq!(requeue(&next, now), None);
        assert_eq!(discard(&next, now), None);
        assert_eq!(unblock(&next, now), None);
        assert_eq!(promote(&next, now), None);
    }
}

#[test]
fn discard_is_refused_for_running_succeeded_and_discarded_tasks() {
    for status in [Status::Running, Status::Succeeded, Status::Discarded] {
        assert_eq!(discard(&in_status(status), t0()), None, "{status}");
        // A lapsed lease does not make a running task discardable: it is
        // rescued first.
        assert_eq!(
            discard(&in_status(status), t0() + secs(3600)),
            None,
            "{status}"
        );
    }
}

// ---------------------------------------------------------------------------
// after
// ---------------------------------------------------------------------------

#[test]
fn after_adds_and_saturates() {
    assert_eq!(after(t0(), Duration::from_secs(90)), t0() + secs(90));
    assert_eq!(after(t0(), Duration::ZERO), t0());
    assert_eq!(after(t0(), Duration::MAX), DateTime::<Utc>::MAX_UTC);
    assert_eq!(
        after(
            DateTime::<Utc>::MAX_UTC - secs(1),
            Duration::from_secs(3600)
        ),
        DateTime::<Utc>::MAX_UTC
    );
}

// ---------------------------------------------------------------------------
// Property tests: random event sequences over one task and a simulated clock
// ---------------------------------------------------------------------------

/// Which fence a completion or release is written under.
#[derive(Debug, Clone)]
enum FenceChoice {
    /// The fence of the latest granted claim.
    Current,
    /// The latest fence with another owner of the pool.
    ForeignOwner(usize),
    /// The latest fence with its attempt shifted by a non-zero amount.
    ShiftedAttempt(i64),
}

#[derive(Debug, Clone)]
enum Event {
    Advance(i64),
    Claim {
        owner: usize,
        lease_secs: u64,
    },
    Complete {
        fence: FenceChoice,
        outcome: Outcome,
    },
    Release {
        fence: FenceChoice,
    },
    Interrupt {
        fence: FenceChoice,
    },
    Fail {
        fence: FenceChoice,
        reason: String,
    },
    Expire,
    Promote,
    Rescue,
    Requeue,
    Discard,
    /// The task's key moves on to it: every older task of its key succeeded
    /// or was discarded.
    Unblock,
}

fn error_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z €é]{0,12}",
        1 => (any::<char>(), 1usize..2100).prop_map(|(c, n)| c.to_string().repeat(n)),
    ]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Succeeded),
        error_text().prop_map(Outcome::Retryable),
        error_text().prop_map(Outcome::Permanent),
        error_text().prop_map(Outcome::NoHandler),
    ]
}

fn fence_choice() -> impl Strategy<Value = FenceChoice> {
    prop_oneof![
        3 => Just(FenceChoice::Current),
        1 => (1usize..3).prop_map(FenceChoice::ForeignOwner),
        1 => prop_oneof![-3i64..0, 1i64..3].prop_map(FenceChoice::ShiftedAttempt),
    ]
}

/// How far the clock moves: often a little, sometimes past leases and backoffs.
fn advance() -> impl Strategy<Value = i64> {
    prop_oneof![0i64..5, 0i64..120, 0i64..1200]
}

/// The default backoff, or none at all (a retry is available at once).
fn policy() -> impl Strategy<Value = RetryPolicy> {
    prop_oneof![
        3 => Just(RetryPolicy::default()),
        1 => Just(zero_delays()),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => advance().prop_map(Event::Advance),
        6 => (0usize..3, 1u64..90)
            .prop_map(|(owner, lease_secs)| Event::Claim { owner, lease_secs }),
        6 => (fence_choice(), outcome())
            .prop_map(|(fence, outcome)| Event::Complete { fence, outcome }),
        2 => fence_choice().prop_map(|fence| Event::Release { fence }),
        1 => fence_choice().prop_map(|fence| Event::Interrupt { fence }),
        1 => (fence_choice(), error_text()).prop_map(|(fence, reason)| Event::Fail { fence, reason }),
        2 => Just(Event::Expire),
        3 => Just(Event::Promote),
        3 => Just(Event::Rescue),
        2 => Just(Event::Requeue),
        1 => Just(Event::Discard),
        2 => Just(Event::Unblock),
    ]
}

/// A new task with a random key, place in its key, limit, schedule and
/// deadline, stored as `enqueued` says.
fn initial_state() -> impl Strategy<Value = TaskState> {
    (
        prop::option::of(1i32..4),
        prop_oneof![Just(0i64), 0i64..60],
        prop::option::of(0i64..1800),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(max_attempts, due, deadline, keyed, head)| TaskState {
            // Without a key a task is always first in line.
            status: enqueued(head || !keyed, due == 0),
            max_attempts,
            next_attempt_at: t0() + secs(due),
            expires_at: deadline.map(|d| t0() + secs(d)),
            ordering_key: keyed.then(|| KEY.to_owned()),
            ..fresh()
        })
}

/// The simulation: the state plus what the test knows independently of it.
struct Sim {
    state: TaskState,
    now: DateTime<Utc>,
    /// The fence of the latest granted claim, if any claim was granted.
    last_fence: Option<Fence>,
    /// The claim that may still complete: granted and not yet ended by a
    /// completion, an expiry or a rescue. Kept by the test, not read from the
    /// state.
    holder: Option<Fence>,
    /// What a backend would store as `last_error`.
    last_error: String,
    /// The deadline: fixed at enqueue, cleared by a requeue.
    expires_at: Option<DateTime<Utc>>,
    /// How many handler runs past `max_attempts` the documented exceptions
    /// allow: one for each requeue, retry of a missing handler, run cut at
    /// shutdown, and takeover of a lapsed lease.
    over_limit: i64,
    policy: RetryPolicy,
}

impl Sim {
    fn new(state: TaskState, policy: RetryPolicy) -> Self {
        Self {
            now: t0(),
            last_fence: None,
            holder: None,
            last_error: state.last_error.clone(),
            expires_at: state.expires_at,
            over_limit: 0,
            policy,
            state,
        }
    }

    fn pick_fence(&self, choice: &FenceChoice) -> Fence {
        let base = self.last_fence.clone().unwrap_or_else(|| Fence {
            id: ID,
            owner: OWNERS[0].into(),
            attempt: self.state.attempts,
            ordering_key: self.state.ordering_key.clone(),
        });
        match choice {
            FenceChoice::Current => base,
            FenceChoice::ForeignOwner(shift) => {
                let index = OWNERS
                    .iter()
                    .position(|o| **o == *base.owner)
                    .expect("owners come from the pool");
                Fence {
                    owner: OWNERS[(index + shift) % OWNERS.len()].into(),
                    ..base
                }
            }
            FenceChoice::ShiftedAttempt(by) => Fence {
                attempt: base.attempt + by,
                ..base
            },
        }
    }

    /// Whether `fence` matches the state's status, current lease and attempt count.
    fn fence_is_current(&self, fence: &Fence) -> bool {
        self.state.status == Status::Running
            && self.state.attempts == fence.attempt
            && self
                .state
                .lease
                .as_ref()
                .is_some_and(|l| *l.owner == *fence.owner)
    }

    /// Applies `event` (a refused event leaves the state as it was), checking
    /// the rules of that event and then the invariants of every step.
    fn apply(&mut self, event: &Event) -> Result<(), TestCaseError> {
        let before = self.state.clone();
        let now = self.now;
        match event {
            Event::Advance(by) => {
                self.now += secs(*by);
            }
            Event::Claim { owner, lease_secs } => {
                let owner = OWNERS[*owner];
                let lease_len = Duration::from_secs(*lease_secs);
                let expected = availability(&before, now);
                match claim(&before, ID, owner, now, lease_len) {
                    Ok((next, fence)) => {
                        prop_assert_eq!(&expected, &Availability::Claimable);
                        prop_assert!(
                            matches!(
                                before.status,
                                Status::Available | Status::Waiting | Status::Running
                            ),
                            "claimed a {} task",
                            before.status
                        );
                        prop_assert!(before.next_attempt_at <= now, "claimed before due");
                        prop_assert!(
                            before.expires_at.is_none_or(|at| now < at),
                            "claimed at {} a task expiring at {:?}",
                            now,
                            before.expires_at
                        );
                        prop_assert_eq!(next.status, Status::Running);
                        prop_assert_eq!(next.attempts, before.attempts + 1);
                        prop_assert_eq!(next.released, before.released);
                        prop_assert_eq!(fence.attempt, next.attempts);
                        prop_assert_eq!(fence.id, ID);
                        prop_assert_eq!(&*fence.owner, owner);
                        prop_assert_eq!(&fence.ordering_key, &before.ordering_key);
                        prop_assert_eq!(
                            next.lease.clone(),
                            Some(Lease {
                                owner: owner.to_owned(),
                                expires_at: after(now, lease_len),
                            })
                        );
                        prop_assert_eq!(next.next_attempt_at, before.next_attempt_at);
                        prop_assert_eq!(&next.last_error, &before.last_error);
                        if before.status == Status::Running {
                            // A lapsed lease taken over: the lost run counted.
                            self.over_limit += 1;
                        }
                        // A claim takes over: any earlier claim is now stale.
                        self.holder = Some(fence.clone());
                        self.last_fence = Some(fence);
                        self.state = next;
                    }
                    Err(reason) => {
                        prop_assert_ne!(&reason, &Availability::Claimable);
                        prop_assert_eq!(reason, expected);
                    }
                }
            }
            Event::Complete { fence, outcome } => {
                let fence = self.pick_fence(fence);
                let run = fence.attempt - before.released;
                let completion = decide(
                    fence.clone(),
                    run,
                    before.max_attempts,
                    outcome.clone(),
                    &self.policy,
                );
                check_decision(
                    &completion,
                    &fence,
                    run,
                    before.max_attempts,
                    outcome,
                    &self.policy,
                )?;
                let applied = self.apply_completion(&fence, &completion)?;
                if applied && matches!(outcome, Outcome::NoHandler(_)) {
                    self.over_limit += 1;
                }
            }
            Event::Release { fence } => {
                let fence = self.pick_fence(fence);
                let completion = release(fence.clone());
                prop_assert_eq!(completion.last_error.clone(), None);
                prop_assert!(!moves_key_on(&completion));
                if self.apply_completion(&fence, &completion)? {
                    prop_assert_eq!(self.state.next_attempt_at, now);
                    prop_assert_eq!(self.state.status, Status::Available);
                    // Given back unstarted: the fence token stays, the run is not counted.
                    prop_assert_eq!(self.state.attempts, before.attempts);
                    prop_assert_eq!(self.state.released, before.released + 1);
                }
            }
            Event::Interrupt { fence } => {
                let fence = self.pick_fence(fence);
                let completion = interrupt(fence.clone());
                prop_assert!(!moves_key_on(&completion));
                if self.apply_completion(&fence, &completion)? {
                    prop_assert_eq!(self.state.next_attempt_at, now);
                    prop_assert_eq!(self.state.status, Status::Available);
                    // The run counts, yet never fails the task by itself.
                    prop_assert_eq!(self.state.released, before.released);
                    prop_assert_eq!(self.state.last_error.as_str(), INTERRUPTED_ERROR);
                    self.over_limit += 1;
                }
            }
            Event::Fail { fence, reason } => {
                let fence = self.pick_fence(fence);
                let completion = fail(fence.clone(), reason);
                prop_assert_eq!(completion.status, Status::Failed);
                prop_assert!(!moves_key_on(&completion));
                let error = completion
                    .last_error
                    .as_deref()
                    .ok_or_else(|| TestCaseError::fail("fail must set last_error"))?;
                check_storable(error, reason)?;
                if self.apply_completion(&fence, &completion)? {
                    prop_assert_eq!(self.state.finished_at, Some(now));
                }
            }
            Event::Expire => {
                let was_expired = availability(&before, now) == Availability::Expired;
                match expire(&before, now) {
                    Some(next) => {
                        prop_assert!(was_expired);
                        prop_assert!(
                            before.lease.as_ref().is_none_or(|l| l.expires_at <= now),
                            "expired under a live lease"
                        );
                        prop_assert_ne!(before.status, Status::Blocked, "a blocked task expired");
                        prop_assert_eq!(next.status, Status::Failed);
                        prop_assert_eq!(next.finished_at, Some(now));
                        prop_assert_eq!(next.lease.clone(), None);
                        prop_assert_eq!(next.attempts, before.attempts);
                        self.holder = None;
                        EXPIRED_ERROR.clone_into(&mut self.last_error);
                        self.state = next;
                    }
                    None => prop_assert!(!was_expired),
                }
            }
            Event::Promote => {
                let due = before.status == Status::Waiting && before.next_attempt_at <= now;
                match promote(&before, now) {
                    Some(next) => {
                        prop_assert!(due, "promoted {:?} at {}", before, now);
                        prop_assert_eq!(
                            &next,
                            &TaskState {
                                status: Status::Available,
                                ..before.clone()
                            }
                        );
                        self.state = next;
                    }
                    None => prop_assert!(!due, "a due waiting task was not promoted"),
                }
            }
            Event::Rescue => {
                let lapsed = before.status == Status::Running
                    && before.lease.as_ref().is_none_or(|l| l.expires_at <= now);
                match rescue(&before, now) {
                    Some(next) => {
                        prop_assert!(lapsed, "rescued {:?} at {}", before, now);
                        let runs = before.attempts - before.released;
                        let exhausted = before
                            .max_attempts
                            .is_some_and(|max| runs >= i64::from(max));
                        if exhausted {
                            prop_assert_eq!(next.status, Status::Failed);
                            prop_assert_eq!(next.finished_at, Some(now));
                            self.last_error =
                                format!("gave up after {runs} attempts: {LAPSED_ERROR}");
                        } else {
                            prop_assert_eq!(next.status, Status::Available);
                            prop_assert_eq!(next.finished_at, None);
                            LAPSED_ERROR.clone_into(&mut self.last_error);
                        }
                        prop_assert_eq!(next.lease.clone(), None);
                        prop_assert_eq!(next.attempts, before.attempts);
                        prop_assert_eq!(next.released, before.released);
                        prop_assert_eq!(next.next_attempt_at, before.next_attempt_at);
                        self.holder = None;
                        self.state = next;
                    }
                    None => prop_assert!(!lapsed, "a lapsed lease was not rescued"),
                }
            }
            Event::Requeue => match requeue(&before, now) {
                Some(next) => {
                    prop_assert_eq!(before.status, Status::Failed);
                    prop_assert_eq!(
                        &next,
                        &TaskState {
                            status: Status::Available,
                            next_attempt_at: now,
                            expires_at: None,
                            finished_at: None,
                            ..before.clone()
                        }
                    );
                    self.expires_at = None;
                    self.over_limit += 1;
                    self.state = next;
                }
                None => prop_assert_ne!(before.status, Status::Failed),
            },
            Event::Discard => {
                let discardable = matches!(
                    before.status,
                    Status::Available | Status::Waiting | Status::Blocked | Status::Failed
                );
                match discard(&before, now) {
                    Some(next) => {
                        prop_assert!(discardable, "discarded a {} task", before.status);
                        prop_assert_eq!(
                            &next,
                            &TaskState {
                                status: Status::Discarded,
                                finished_at: Some(now),
                                ..before.clone()
                            }
                        );
                        self.state = next;
                    }
                    None => prop_assert!(!discardable, "a {} task was kept", before.status),
                }
            }
            Event::Unblock => match unblock(&before, now) {
                Some(next) => {
                    prop_assert_eq!(before.status, Status::Blocked);
                    let status = if before.next_attempt_at <= now {
                        Status::Available
                    } else {
                        Status::Waiting
                    };
                    prop_assert_eq!(
                        &next,
                        &TaskState {
                            status,
                            ..before.clone()
                        }
                    );
                    self.state = next;
                }
                None => prop_assert_ne!(before.status, Status::Blocked),
            },
        }
        self.check_step(&before, event)
    }

    /// Writes `completion` under `fence`; whether it applied.
    fn apply_completion(
        &mut self,
        fence: &Fence,
        completion: &Completion,
    ) -> Result<bool, TestCaseError> {
        let current = self.fence_is_current(fence);
        // The test's own bookkeeping agrees with the state on who holds the task.
        prop_assert_eq!(
            current,
            self.holder.as_ref() == Some(fence),
            "fence {:?}, holder {:?}, state {:?}",
            fence,
            self.holder,
            self.state
        );
        prop_assert_eq!(
            moves_key_on(completion),
            fence.ordering_key.is_some() && completion.status == Status::Succeeded
        );
        match complete(&self.state, completion, self.now) {
            Some(next) => {
                prop_assert!(
                    current,
                    "stale fence {:?} applied to {:?}",
                    fence,
                    self.state
                );
                prop_assert_eq!(
                    self.state.status,
                    Status::Running,
                    "a completion applied to a task not running"
                );
                prop_assert_eq!(next.status, completion.status);
                prop_assert_eq!(next.attempts, self.state.attempts);
                prop_assert_eq!(
                    next.released,
                    self.state.released + i64::from(completion.released)
                );
                prop_assert_eq!(next.lease.clone(), None);
                prop_assert_eq!(
                    next.finished_at,
                    next.status.is_finished().then_some(self.now)
                );
                match completion.retry_in {
                    Some(delay) => {
                        prop_assert_eq!(next.next_attempt_at, after(self.now, delay));
                    }
                    None => prop_assert_eq!(next.next_attempt_at, self.state.next_attempt_at),
                }
                if next.status == Status::Waiting {
                    prop_assert!(next.next_attempt_at > self.now, "waiting yet due");
                }
                if let Some(error) = &completion.last_error {
                    self.last_error.clone_from(error);
                }
                self.holder = None;
                self.state = next;
                Ok(true)
            }
            None => {
                prop_assert!(!current, "current fence {:?} refused", fence);
                Ok(false)
            }
        }
    }

    /// The invariants that hold after every step.
    fn check_step(&self, before: &TaskState, event: &Event) -> Result<(), TestCaseError> {
        let state = &self.state;
        // The fence token and the runs.
        prop_assert!(
            state.attempts >= before.attempts,
            "attempts went from {} to {}",
            before.attempts,
            state.attempts
        );
        prop_assert!(state.attempts <= before.attempts + 1);
        prop_assert!(state.released >= before.released);
        prop_assert!(state.released <= state.attempts);
        prop_assert_eq!(
            self.holder.is_some(),
            state.status == Status::Running,
            "holder {:?}, state {:?}",
            self.holder,
            state
        );
        check_consistent(state, self.now)?;
        check_availability(state, self.now)?;
        // What never changes, and what only a requeue clears.
        prop_assert_eq!(state.max_attempts, before.max_attempts);
        prop_assert_eq!(&state.ordering_key, &before.ordering_key);
        prop_assert_eq!(state.expires_at, self.expires_at);
        // The stored error is the one the last write decided, always storable.
        prop_assert_eq!(&state.last_error, &self.last_error);
        prop_assert!(state.last_error.len() <= MAX_ERROR_BYTES);
        prop_assert!(!state.last_error.contains('\0'));
        if state.status == Status::Succeeded {
            prop_assert_eq!(state.last_error.as_str(), "");
        }
        // Final statuses stay; failed leaves only by requeue or discard;
        // blocked only when its key moves on, or by discard.
        if matches!(before.status, Status::Succeeded | Status::Discarded) {
            prop_assert_eq!(state, before, "a {} task changed", before.status);
        }
        if before.status == Status::Failed && state.status != Status::Failed {
            prop_assert!(
                matches!(
                    (event, state.status),
                    (Event::Requeue, Status::Available) | (Event::Discard, Status::Discarded)
                ),
                "{:?} took a failed task to {}",
                event,
                state.status
            );
        }
        if before.status == Status::Blocked && state.status != Status::Blocked {
            prop_assert!(
                matches!(event, Event::Unblock | Event::Discard),
                "{:?} took a blocked task to {}",
                event,
                state.status
            );
        }
        if state.status.is_finished() {
            check_unmovable(state, self.now)?;
        }
        // The limit on handler runs holds but for the documented exceptions;
        // a task that may be claimed again has a run left.
        if let Some(max) = state.max_attempts {
            let runs = state.attempts - state.released;
            let claimable_again = matches!(
                state.status,
                Status::Available | Status::Waiting | Status::Blocked
            );
            prop_assert!(
                runs + i64::from(claimable_again) <= i64::from(max) + self.over_limit,
                "{} runs of at most {} (+{}) in {:?}",
                runs,
                max,
                self.over_limit,
                state
            );
        }
        Ok(())
    }
}

/// The fields a status implies: a lease exactly while running, an end time
/// exactly when finished, a key when blocked, and an available task is due.
fn check_consistent(state: &TaskState, now: DateTime<Utc>) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        state.lease.is_some(),
        state.status == Status::Running,
        "{:?}",
        state
    );
    prop_assert_eq!(
        state.finished_at.is_some(),
        state.status.is_finished(),
        "{:?}",
        state
    );
    if state.status == Status::Blocked {
        prop_assert!(state.ordering_key.is_some(), "blocked without a key");
    }
    if state.status == Status::Available {
        prop_assert!(state.next_attempt_at <= now, "available yet not due");
    }
    Ok(())
}

/// `availability` as the statuses define it: only an available task, a
/// waiting one whose time has come, and a running one whose lease lapsed may
/// be claimed; a blocked one never, whatever the time.
fn check_availability(state: &TaskState, now: DateTime<Utc>) -> Result<(), TestCaseError> {
    let live_lease = state
        .lease
        .as_ref()
        .map(|l| l.expires_at)
        .filter(|until| *until > now);
    let expired = state.expires_at.is_some_and(|at| at <= now);
    let expected = match (state.status, live_lease) {
        (status, _) if status.is_finished() => Availability::Finished(status),
        (Status::Blocked, _) => Availability::Blocked,
        (Status::Running, Some(until)) => Availability::Leased { until },
        _ if expired => Availability::Expired,
        (Status::Waiting, _) if state.next_attempt_at > now => Availability::NotDue {
            at: state.next_attempt_at,
        },
        _ => Availability::Claimable,
    };
    let got = availability(state, now);
    prop_assert_eq!(&got, &expected, "{:?} at {}", state, now);
    if got == Availability::Claimable {
        let claimable = match state.status {
            Status::Available => true,
            Status::Waiting => state.next_attempt_at <= now,
            Status::Running => live_lease.is_none(),
            _ => false,
        };
        prop_assert!(claimable, "{:?} claimable at {}", state, now);
    }
    if state.status == Status::Blocked {
        for later in [now + secs(3600), DateTime::<Utc>::MAX_UTC] {
            prop_assert_eq!(availability(state, later), Availability::Blocked);
        }
    }
    Ok(())
}

/// A finished task refuses every move, now or later; a failed one all but
/// requeue and discard.
fn check_unmovable(state: &TaskState, now: DateTime<Utc>) -> Result<(), TestCaseError> {
    let policy = RetryPolicy::default();
    for at in [now, now + secs(86_400)] {
        prop_assert_eq!(
            claim(state, ID, OWNERS[1], at, Duration::from_secs(5)).err(),
            Some(Availability::Finished(state.status))
        );
        prop_assert_eq!(expire(state, at), None);
        prop_assert_eq!(promote(state, at), None);
        prop_assert_eq!(rescue(state, at), None);
        prop_assert_eq!(unblock(state, at), None);
        for owner in OWNERS {
            let f = Fence {
                id: ID,
                owner: owner.into(),
                attempt: state.attempts,
                ordering_key: state.ordering_key.clone(),
            };
            let run = state.attempts - state.released;
            let completions = [
                decide(f.clone(), run, None, Outcome::Succeeded, &policy),
                decide(
                    f.clone(),
                    run,
                    None,
                    Outcome::NoHandler("n".into()),
                    &policy,
                ),
                release(f.clone()),
                interrupt(f.clone()),
                fail(f, "f"),
            ];
            for c in &completions {
                prop_assert_eq!(complete(state, c, at), None);
            }
        }
        if state.status != Status::Failed {
            prop_assert_eq!(requeue(state, at), None);
            prop_assert_eq!(discard(state, at), None);
        }
    }
    Ok(())
}

/// `error` is `full` made storable: NUL escaped, cut to the limit on a
/// character boundary.
fn check_storable(error: &str, full: &str) -> Result<(), TestCaseError> {
    // Stored text never holds NUL (PostgreSQL cannot): it is escaped as `\0`.
    let full = full.replace('\0', "\\0");
    prop_assert!(error.len() <= MAX_ERROR_BYTES);
    prop_assert!(!error.contains('\0'));
    prop_assert!(full.starts_with(error));
    if full.len() <= MAX_ERROR_BYTES {
        prop_assert_eq!(error, full.as_str());
    } else {
        // Cut on the last boundary at or below the limit: less than one
        // character (at most 4 bytes) short of it.
        prop_assert!(error.len() > MAX_ERROR_BYTES - 4);
    }
    Ok(())
}

/// `decide` picks the status the outcome, limit and attempt call for.
fn check_decision(
    completion: &Completion,
    fence: &Fence,
    run: i64,
    max_attempts: Option<i32>,
    outcome: &Outcome,
    policy: &RetryPolicy,
) -> Result<(), TestCaseError> {
    // Claims given back unstarted never count: only handler runs do.
    let exhausted = max_attempts.is_some_and(|max| run >= i64::from(max));
    let (retried, full_error) = match outcome {
        Outcome::Succeeded => (None, String::new()),
        Outcome::Permanent(e) => (None, e.clone()),
        Outcome::Retryable(e) if exhausted => (None, format!("gave up after {run} attempts: {e}")),
        // A missing handler waits the first backoff step, whatever the run.
        Outcome::NoHandler(e) => (Some(1), e.clone()),
        Outcome::Retryable(e) => (Some(run), e.clone()),
    };
    prop_assert_eq!(&completion.fence, fence);
    prop_assert!(!completion.released);
    prop_assert_eq!(completion.retry_in.is_some(), retried.is_some());
    match (retried, completion.retry_in) {
        (Some(step), Some(delay)) => {
            prop_assert!(delay <= policy.delay_with(step, 0.0), "{:?}", delay);
            prop_assert!(
                delay
                    >= policy
                        .delay_with(step, 1.0)
                        .saturating_sub(Duration::from_nanos(1)),
                "{:?}",
                delay
            );
            // Tried again: waiting for its delay, or available when there is none.
            let status = if delay.is_zero() {
                Status::Available
            } else {
                Status::Waiting
            };
            prop_assert_eq!(completion.status, status);
        }
        _ => {
            let status = if matches!(outcome, Outcome::Succeeded) {
                Status::Succeeded
            } else {
                Status::Failed
            };
            prop_assert_eq!(completion.status, status);
        }
    }
    let error = completion
        .last_error
        .as_deref()
        .ok_or_else(|| TestCaseError::fail("decide must set last_error"))?;
    check_storable(error, &full_error)
}

// ---------------------------------------------------------------------------
// Property tests: the tasks of one ordering key
// ---------------------------------------------------------------------------

/// The length of every lease in the key simulation.
const KEY_LEASE: Duration = Duration::from_secs(30);

/// Which task of the key an event is about.
#[derive(Debug, Clone)]
enum Pick {
    /// The key's head (the one task holding it that is not blocked), else
    /// the newest task.
    Head,
    /// Any task, in enqueue order.
    Any(prop::sample::Index),
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        3 => Just(Pick::Head),
        2 => any::<prop::sample::Index>().prop_map(Pick::Any),
    ]
}

/// What happens to one ordering key: new tasks, and moves of one of its tasks.
#[derive(Debug, Clone)]
enum KeyEvent {
    Advance(i64),
    Enqueue {
        due_in: i64,
        deadline: Option<i64>,
        max_attempts: Option<i32>,
    },
    Claim {
        task: Pick,
        owner: usize,
    },
    Complete {
        task: Pick,
        outcome: Outcome,
    },
    Release {
        task: Pick,
    },
    Interrupt {
        task: Pick,
    },
    Rescue {
        task: Pick,
    },
    Promote {
        task: Pick,
    },
    Expire {
        task: Pick,
    },
    Requeue {
        task: Pick,
    },
    Discard {
        task: Pick,
    },
}

fn enqueue_event() -> impl Strategy<Value = KeyEvent> {
    (
        prop_oneof![Just(0i64), 1i64..120],
        prop::option::of(0i64..600),
        prop::option::of(1i32..4),
    )
        .prop_map(|(due_in, deadline, max_attempts)| KeyEvent::Enqueue {
            due_in,
            deadline,
            max_attempts,
        })
}

fn key_event() -> impl Strategy<Value = KeyEvent> {
    let task = pick;
    prop_oneof![
        4 => advance().prop_map(KeyEvent::Advance),
        2 => enqueue_event(),
        5 => (task(), 0usize..3).prop_map(|(task, owner)| KeyEvent::Claim { task, owner }),
        5 => (task(), outcome()).prop_map(|(task, outcome)| KeyEvent::Complete { task, outcome }),
        1 => task().prop_map(|task| KeyEvent::Release { task }),
        1 => task().prop_map(|task| KeyEvent::Interrupt { task }),
        2 => task().prop_map(|task| KeyEvent::Rescue { task }),
        3 => task().prop_map(|task| KeyEvent::Promote { task }),
        2 => task().prop_map(|task| KeyEvent::Expire { task }),
        3 => task().prop_map(|task| KeyEvent::Requeue { task }),
        1 => task().prop_map(|task| KeyEvent::Discard { task }),
    ]
}

/// One task of the key and the claim that may still complete it.
#[derive(Debug)]
struct KeyTask {
    state: TaskState,
    holder: Option<Fence>,
}

/// One ordering key driven only through the pure functions, with the step a
/// backend takes when a write moves the key on: its oldest blocked task is
/// unblocked in the same transaction.
struct KeySim {
    tasks: Vec<KeyTask>,
    now: DateTime<Utc>,
    policy: RetryPolicy,
    /// The tasks that succeeded, in the order they did.
    succeeded: Vec<usize>,
}

impl KeySim {
    fn new(policy: RetryPolicy) -> Self {
        Self {
            tasks: Vec::new(),
            now: t0(),
            policy,
            succeeded: Vec::new(),
        }
    }

    /// The index `pick` names, if the key has any task.
    fn resolve(&self, pick: &Pick) -> Option<usize> {
        match pick {
            _ if self.tasks.is_empty() => None,
            Pick::Any(index) => Some(index.index(self.tasks.len())),
            Pick::Head => self
                .tasks
                .iter()
                .position(|t| t.state.status.holds_key() && t.state.status != Status::Blocked)
                .or(Some(self.tasks.len() - 1)),
        }
    }

    fn id(index: usize) -> TaskId {
        TaskId::new(i64::try_from(index).expect("few tasks") + 1)
    }

    /// Applies `event`, then checks the key's invariants.
    fn apply(&mut self, event: &KeyEvent) -> Result<(), TestCaseError> {
        let before: Vec<TaskState> = self.tasks.iter().map(|t| t.state.clone()).collect();
        let now = self.now;
        let target = match event {
            KeyEvent::Claim { task, .. }
            | KeyEvent::Complete { task, .. }
            | KeyEvent::Release { task }
            | KeyEvent::Interrupt { task }
            | KeyEvent::Rescue { task }
            | KeyEvent::Promote { task }
            | KeyEvent::Expire { task }
            | KeyEvent::Requeue { task }
            | KeyEvent::Discard { task } => self.resolve(task),
            KeyEvent::Advance(_) | KeyEvent::Enqueue { .. } => None,
        };
        // Whether this write finished the key's head as succeeded or discarded.
        let mut moves_on = false;
        match (event, target) {
            (KeyEvent::Advance(by), _) => self.now += secs(*by),
            (
                KeyEvent::Enqueue {
                    due_in,
                    deadline,
                    max_attempts,
                },
                _,
            ) => {
                // The backend's count of the key's open tasks: those that hold it.
                let head = !before.iter().any(|s| s.status.holds_key());
                let status = enqueued(head, *due_in == 0);
                self.tasks.push(KeyTask {
                    state: TaskState {
                        status,
                        max_attempts: *max_attempts,
                        next_attempt_at: now + secs(*due_in),
                        expires_at: deadline.map(|d| now + secs(d)),
                        ordering_key: Some(KEY.to_owned()),
                        ..fresh()
                    },
                    holder: None,
                });
            }
            (_, None) => {}
            (KeyEvent::Claim { owner, .. }, Some(i)) => {
                let task = &mut self.tasks[i];
                if let Ok((next, fence)) =
                    claim(&task.state, Self::id(i), OWNERS[*owner], now, KEY_LEASE)
                {
                    prop_assert_eq!(fence.ordering_key.as_deref(), Some(KEY));
                    task.state = next;
                    task.holder = Some(fence);
                }
            }
            (KeyEvent::Complete { outcome, .. }, Some(i)) => {
                let completion = self.decided(i, outcome.clone());
                moves_on = self.write(i, &completion)?;
            }
            (KeyEvent::Release { .. }, Some(i)) => {
                let completion = self.tasks[i].holder.clone().map(release);
                if let Some(completion) = completion {
                    moves_on = self.write(i, &completion)?;
                }
            }
            (KeyEvent::Interrupt { .. }, Some(i)) => {
                let completion = self.tasks[i].holder.clone().map(interrupt);
                if let Some(completion) = completion {
                    moves_on = self.write(i, &completion)?;
                }
            }
            (KeyEvent::Rescue { .. }, Some(i)) => {
                let task = &mut self.tasks[i];
                if let Some(next) = rescue(&task.state, now) {
                    task.state = next;
                    task.holder = None;
                }
            }
            (KeyEvent::Promote { .. }, Some(i)) => {
                let task = &mut self.tasks[i];
                if let Some(next) = promote(&task.state, now) {
                    task.state = next;
                }
            }
            (KeyEvent::Expire { .. }, Some(i)) => {
                let task = &mut self.tasks[i];
                if let Some(next) = expire(&task.state, now) {
                    task.state = next;
                    task.holder = None;
                }
            }
            (KeyEvent::Requeue { .. }, Some(i)) => {
                let task = &mut self.tasks[i];
                if let Some(next) = requeue(&task.state, now) {
                    task.state = next;
                }
            }
            (KeyEvent::Discard { .. }, Some(i)) => {
                let task = &mut self.tasks[i];
                if let Some(next) = discard(&task.state, now) {
                    // Only the head lets the key move on; a discarded blocked
                    // task just leaves the line.
                    moves_on = task.state.status != Status::Blocked;
                    task.state = next;
                }
            }
        }
        let unblocked = if moves_on {
            self.move_on(&before, target)?
        } else {
            None
        };
        self.check(&before, event, target, unblocked)
    }

    /// The completion of `outcome` under task `i`'s claim, or under a fence
    /// that matches no claim when it has none.
    fn decided(&self, i: usize, outcome: Outcome) -> Completion {
        let task = &self.tasks[i];
        let fence = task.holder.clone().unwrap_or_else(|| Fence {
            id: Self::id(i),
            owner: OWNERS[0].into(),
            attempt: task.state.attempts,
            ordering_key: Some(KEY.to_owned()),
        });
        let run = fence.attempt - task.state.released;
        decide(fence, run, task.state.max_attempts, outcome, &self.policy)
    }

    /// Writes `completion` to task `i`; whether it moves the key on.
    fn write(&mut self, i: usize, completion: &Completion) -> Result<bool, TestCaseError> {
        let now = self.now;
        let task = &mut self.tasks[i];
        match complete(&task.state, completion, now) {
            Some(next) => {
                prop_assert_eq!(task.state.status, Status::Running);
                prop_assert_eq!(task.holder.as_ref(), Some(&completion.fence));
                task.state = next;
                task.holder = None;
                Ok(moves_key_on(completion))
            }
            None => {
                prop_assert_ne!(task.holder.as_ref(), Some(&completion.fence));
                Ok(false)
            }
        }
    }

    /// The key moved on: its oldest blocked task goes, if any.
    fn move_on(
        &mut self,
        before: &[TaskState],
        target: Option<usize>,
    ) -> Result<Option<usize>, TestCaseError> {
        let i = target.ok_or_else(|| TestCaseError::fail("moved on without a write"))?;
        // Only the head, succeeded or discarded, moves the key on.
        prop_assert!(
            before[i].status.holds_key() && before[i].status != Status::Blocked,
            "task {} was no head: {:?}",
            i,
            before[i]
        );
        prop_assert!(!self.tasks[i].state.status.holds_key());
        let Some(next) = self
            .tasks
            .iter()
            .position(|t| t.state.status == Status::Blocked)
        else {
            return Ok(None);
        };
        let task = &mut self.tasks[next];
        let unblocked =
            unblock(&task.state, self.now).ok_or_else(|| TestCaseError::fail("not blocked"))?;
        let due = task.state.next_attempt_at <= self.now;
        prop_assert_eq!(
            unblocked.status,
            if due {
                Status::Available
            } else {
                Status::Waiting
            }
        );
        task.state = unblocked;
        Ok(Some(next))
    }

    fn check(
        &mut self,
        before: &[TaskState],
        event: &KeyEvent,
        target: Option<usize>,
        unblocked: Option<usize>,
    ) -> Result<(), TestCaseError> {
        let states: Vec<&TaskState> = self.tasks.iter().map(|t| &t.state).collect();
        for (k, task) in self.tasks.iter().enumerate() {
            let state = &task.state;
            check_consistent(state, self.now)?;
            check_availability(state, self.now)?;
            prop_assert_eq!(task.holder.is_some(), state.status == Status::Running);
            let Some(prev) = before.get(k) else {
                continue;
            };
            if matches!(prev.status, Status::Succeeded | Status::Discarded) {
                prop_assert_eq!(state, prev, "a {} task changed", prev.status);
            }
            if prev.status == Status::Blocked && state.status != Status::Blocked {
                // Out of line only by its own discard, or because the head
                // before it succeeded or was discarded.
                let discarded = state.status == Status::Discarded
                    && target == Some(k)
                    && matches!(event, KeyEvent::Discard { .. });
                prop_assert!(
                    discarded || unblocked == Some(k),
                    "{:?} took blocked task {} to {}: {:?}",
                    event,
                    k,
                    state.status,
                    states
                );
            }
            if state.status == Status::Succeeded && prev.status != Status::Succeeded {
                // The key's tasks succeed in the order they were enqueued.
                prop_assert!(
                    self.succeeded.last().is_none_or(|last| *last < k),
                    "task {} succeeded after {:?}",
                    k,
                    self.succeeded
                );
                self.succeeded.push(k);
            }
        }
        // One head at a time: every task that holds the key but one is blocked.
        let holders: Vec<usize> = (0..states.len())
            .filter(|k| states[*k].status.holds_key())
            .collect();
        let heads: Vec<usize> = holders
            .iter()
            .copied()
            .filter(|k| states[*k].status != Status::Blocked)
            .collect();
        prop_assert!(heads.len() <= 1, "heads {:?}: {:?}", heads, states);
        // The key never stalls: while a task holds it, one of them is the head.
        if !holders.is_empty() {
            prop_assert_eq!(heads.len(), 1, "no head: {:?}", states);
        }
        if let Some(&head) = heads.first() {
            for k in &holders {
                if *k != head {
                    // Behind the head, blocked; a failed head included.
                    prop_assert!(*k > head, "task {} is before head {}", k, head);
                    prop_assert_eq!(states[*k].status, Status::Blocked);
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_event_sequences_keep_the_invariants(
        initial in initial_state(),
        policy in policy(),
        events in prop::collection::vec(event(), 1..80),
    ) {
        let mut sim = Sim::new(initial, policy);
        sim.check_step(&sim.state.clone(), &Event::Advance(0))?;
        for event in &events {
            sim.apply(event)?;
        }
    }

    /// A stale fence is refused whatever the state and the decision.
    #[test]
    fn stale_fences_never_change_the_state(
        initial in initial_state(),
        events in prop::collection::vec(event(), 0..40),
        owner in 0usize..3,
        shift in prop_oneof![-3i64..0, 1i64..4],
        outcome in outcome(),
    ) {
        let mut sim = Sim::new(initial, RetryPolicy::default());
        for event in &events {
            sim.apply(event)?;
        }
        let owner = OWNERS[owner];
        let current_owner = sim.state.lease.as_ref().map(|l| l.owner.as_str());
        let stale_fence = |attempt| Fence {
            id: ID,
            owner: owner.into(),
            attempt,
            ordering_key: sim.state.ordering_key.clone(),
        };
        let mut stale = vec![stale_fence(sim.state.attempts + shift)];
        if current_owner != Some(owner) {
            stale.push(stale_fence(sim.state.attempts));
        }
        for fence in stale {
            let decided = decide(fence.clone(), fence.attempt, sim.state.max_attempts, outcome.clone(), &sim.policy);
            prop_assert_eq!(complete(&sim.state, &decided, sim.now), None);
            prop_assert_eq!(complete(&sim.state, &release(fence.clone()), sim.now), None);
            prop_assert_eq!(complete(&sim.state, &interrupt(fence.clone()), sim.now), None);
            prop_assert_eq!(complete(&sim.state, &fail(fence, "stale"), sim.now), None);
        }
    }

    /// A task is never claimed at or after its deadline, however it got there.
    #[test]
    fn past_the_deadline_only_expiry_applies(
        initial in initial_state(),
        events in prop::collection::vec(event(), 0..40),
        owner in 0usize..3,
        lease_secs in 1u64..90,
    ) {
        let mut sim = Sim::new(initial, RetryPolicy::default());
        for event in &events {
            sim.apply(event)?;
        }
        if let Some(deadline) = sim.state.expires_at {
            let late = sim.now.max(deadline);
            let lease_until = sim.state.lease.as_ref().map(|l| l.expires_at);
            let late = lease_until.map_or(late, |until| late.max(until));
            let result = claim(&sim.state, ID, OWNERS[owner], late, Duration::from_secs(lease_secs));
            prop_assert!(result.is_err(), "claimed past the deadline: {:?}", result);
            match sim.state.status {
                Status::Available | Status::Waiting | Status::Running => {
                    prop_assert_eq!(result, Err(Availability::Expired));
                    let failed = expire(&sim.state, late).expect("an expired unfinished task expires");
                    prop_assert_eq!(failed.status, Status::Failed);
                }
                // Not the head of its key: it expires once its key reaches it.
                Status::Blocked => {
                    prop_assert_eq!(result, Err(Availability::Blocked));
                    prop_assert_eq!(expire(&sim.state, late), None);
                }
                status => prop_assert_eq!(result, Err(Availability::Finished(status))),
            }
        }
    }

    /// The tasks of one ordering key run one at a time, in order: only the
    /// head is ever out of line, its successors wait blocked until it
    /// succeeded or was discarded, and a failed head holds them all.
    #[test]
    fn an_ordering_key_runs_its_tasks_one_at_a_time_in_order(
        first in prop::collection::vec(enqueue_event(), 1..5),
        policy in policy(),
        events in prop::collection::vec(key_event(), 1..120),
    ) {
        let mut sim = KeySim::new(policy);
        for event in first.iter().chain(&events) {
            sim.apply(event)?;
        }
    }
}
