//! The task state machine (`outbox_core::transition`) through its public API:
//! unit tests of each rule, then property tests over random event sequences.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use outbox_core::{
    Lease, RetryPolicy, Status, TaskId,
    limits::MAX_ERROR_BYTES,
    transition::{
        self, Availability, Completion, Fence, Outcome, TaskState, after, availability, claim,
        complete, decide, expire, release, requeue,
    },
};
use proptest::prelude::*;

const ID: TaskId = TaskId::new(7);
const OWNERS: [&str; 3] = ["worker-a", "worker-b", "worker-c"];

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("a valid fixed instant")
}

fn secs(n: i64) -> TimeDelta {
    TimeDelta::seconds(n)
}

/// A fresh pending task, due at `t0`, without limit or deadline.
fn fresh() -> TaskState {
    TaskState {
        status: Status::Pending,
        attempts: 0,
        released: 0,
        max_attempts: None,
        next_attempt_at: t0(),
        expires_at: None,
        lease: None,
        finished_at: None,
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
        owner: owner.to_owned(),
        attempt,
    }
}

/// A task claimed by `owner` as attempt `attempt`, lease live for a minute after `t0`.
fn claimed(owner: &str, attempt: i64) -> TaskState {
    TaskState {
        attempts: attempt,
        lease: lease(owner, t0() + secs(60)),
        ..fresh()
    }
}

// ---------------------------------------------------------------------------
// availability
// ---------------------------------------------------------------------------

#[test]
fn availability_of_a_due_task_is_claimable_including_at_the_exact_instant() {
    assert_eq!(availability(&fresh(), t0(), false), Availability::Claimable);
    assert_eq!(
        availability(&fresh(), t0() + secs(5), false),
        Availability::Claimable
    );
}

#[test]
fn availability_finished_wins_over_everything() {
    for status in [Status::Succeeded, Status::Failed] {
        let state = TaskState {
            status,
            finished_at: Some(t0()),
            expires_at: Some(t0() - secs(10)),
            next_attempt_at: t0() + secs(100),
            ..fresh()
        };
        assert_eq!(
            availability(&state, t0(), true),
            Availability::Finished(status)
        );
    }
}

#[test]
fn availability_live_lease_wins_over_expiry() {
    let state = TaskState {
        expires_at: Some(t0() - secs(1)),
        ..claimed("worker-a", 1)
    };
    assert_eq!(
        availability(&state, t0(), true),
        Availability::Leased {
            until: t0() + secs(60)
        }
    );
}

#[test]
fn availability_lease_lapses_at_its_expiry_instant() {
    let state = claimed("worker-a", 1);
    let until = t0() + secs(60);
    assert_eq!(
        availability(&state, until - secs(1), false),
        Availability::Leased { until }
    );
    assert_eq!(availability(&state, until, false), Availability::Claimable);
}

#[test]
fn availability_expired_wins_over_not_due_and_blocked() {
    let state = TaskState {
        expires_at: Some(t0()),
        next_attempt_at: t0() + secs(100),
        ..fresh()
    };
    assert_eq!(availability(&state, t0(), true), Availability::Expired);
    // A lapsed lease does not protect an expired task.
    let lapsed = TaskState {
        lease: lease("worker-a", t0() - secs(1)),
        ..state
    };
    assert_eq!(availability(&lapsed, t0(), false), Availability::Expired);
}

#[test]
fn availability_blocked_wins_over_not_due_and_not_due_reports_when() {
    let state = TaskState {
        next_attempt_at: t0() + secs(30),
        expires_at: Some(t0() + secs(60)),
        ..fresh()
    };
    assert_eq!(availability(&state, t0(), true), Availability::Blocked);
    assert_eq!(
        availability(&state, t0(), false),
        Availability::NotDue {
            at: t0() + secs(30)
        }
    );
}

// ---------------------------------------------------------------------------
// claim
// ---------------------------------------------------------------------------

#[test]
fn claim_starts_the_next_attempt_under_a_lease() {
    let state = TaskState {
        attempts: 2,
        ..fresh()
    };
    let (next, f) = claim(&state, ID, "worker-b", t0(), Duration::from_secs(30), false)
        .expect("a due task is claimable");
    assert_eq!(f, fence("worker-b", 3));
    assert_eq!(next.attempts, 3);
    assert_eq!(next.lease, lease("worker-b", t0() + secs(30)));
    assert_eq!(next.status, Status::Pending);
    assert_eq!(next.next_attempt_at, state.next_attempt_at);
    assert_eq!(next.finished_at, None);
}

#[test]
fn claim_is_refused_with_the_reason() {
    let live = claimed("worker-a", 1);
    assert_eq!(
        claim(&live, ID, "worker-b", t0(), Duration::from_secs(5), false),
        Err(Availability::Leased {
            until: t0() + secs(60)
        })
    );
    assert_eq!(
        claim(&fresh(), ID, "worker-b", t0(), Duration::from_secs(5), true),
        Err(Availability::Blocked)
    );
    let expired = TaskState {
        expires_at: Some(t0()),
        ..fresh()
    };
    assert_eq!(
        claim(
            &expired,
            ID,
            "worker-b",
            t0(),
            Duration::from_secs(5),
            false
        ),
        Err(Availability::Expired)
    );
}

#[test]
fn claim_takes_over_a_lapsed_lease_and_the_old_fence_goes_stale() {
    let state = claimed("worker-a", 1);
    let later = t0() + secs(61);
    let (next, f) = claim(&state, ID, "worker-b", later, Duration::from_secs(5), false)
        .expect("lapsed lease can be taken over");
    assert_eq!(f, fence("worker-b", 2));
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
        lease: lease("worker-a", t0() - secs(1)),
        ..fresh()
    };
    let next = expire(&state, t0() + secs(2)).expect("expired task");
    assert_eq!(next.status, Status::Failed);
    assert_eq!(next.finished_at, Some(t0() + secs(2)));
    assert_eq!(next.lease, None);
    assert_eq!(next.attempts, 4);
}

#[test]
fn expire_does_nothing_before_the_deadline_under_a_live_lease_or_when_finished() {
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
    let done = TaskState {
        status: Status::Succeeded,
        finished_at: Some(t0()),
        expires_at: Some(t0() - secs(1)),
        ..fresh()
    };
    assert_eq!(expire(&done, t0()), None);
    assert_eq!(expire(&fresh(), t0()), None);
}

// ---------------------------------------------------------------------------
// decide
// ---------------------------------------------------------------------------

fn assert_retry_window(completion: &Completion, attempt: i64) {
    let policy = RetryPolicy::default();
    let delay = completion.retry_in.expect("a pending task gets a delay");
    assert!(delay <= policy.delay_with(attempt, 0.0), "{delay:?}");
    assert!(
        delay >= policy.delay_with(attempt, 1.0) - Duration::from_nanos(1),
        "{delay:?}"
    );
}

#[test]
fn decide_retryable_below_the_limit_stays_pending_with_backoff() {
    let c = decide(
        fence("worker-a", 2),
        2,
        Some(3),
        Outcome::Retryable("boom".into()),
        &RetryPolicy::default(),
    );
    assert_eq!(c.status, Status::Pending);
    assert_eq!(c.last_error.as_deref(), Some("boom"));
    assert_eq!(c.fence, fence("worker-a", 2));
    assert_retry_window(&c, 2);
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
    assert_eq!(c.status, Status::Pending);
    assert_retry_window(&c, 10_000);
}

#[test]
fn decide_no_handler_stays_pending_even_past_the_limit() {
    let c = decide(
        fence("worker-a", 9),
        9,
        Some(3),
        Outcome::NoHandler("no handler for x v1".into()),
        &RetryPolicy::default(),
    );
    assert_eq!(c.status, Status::Pending);
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

    let retry = decide(
        fence("worker-a", 2),
        2,
        Some(5),
        Outcome::Retryable("e".into()),
        &policy,
    );
    let delay = retry.retry_in.expect("pending gets a delay");
    let pending = complete(&state, &retry, now).expect("current fence");
    assert_eq!(pending.status, Status::Pending);
    assert_eq!(pending.finished_at, None);
    assert_eq!(pending.lease, None);
    assert_eq!(pending.next_attempt_at, after(now, delay));
    assert!(pending.next_attempt_at > now);
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
    }
    // No lease at all (e.g. already released).
    let released = TaskState {
        lease: None,
        ..state.clone()
    };
    let c = decide(fence("worker-a", 3), 3, None, Outcome::Succeeded, &policy);
    assert_eq!(complete(&released, &c, now), None);
}

#[test]
fn complete_on_a_finished_task_changes_nothing() {
    let policy = RetryPolicy::default();
    for status in [Status::Succeeded, Status::Failed] {
        let finished = TaskState {
            status,
            finished_at: Some(t0()),
            ..claimed("worker-a", 2)
        };
        // Even with a matching owner and attempt, a finished task is final.
        let c = decide(fence("worker-a", 2), 2, None, Outcome::Succeeded, &policy);
        assert_eq!(complete(&finished, &c, t0()), None);
        let finished = TaskState {
            lease: None,
            ..finished
        };
        assert_eq!(complete(&finished, &c, t0()), None);
        assert_eq!(
            complete(&finished, &release(fence("worker-a", 2)), t0()),
            None
        );
    }
}

// ---------------------------------------------------------------------------
// release
// ---------------------------------------------------------------------------

#[test]
fn release_keeps_attempts_and_error_and_is_due_at_once() {
    let f = fence("worker-a", 4);
    let c = release(f.clone());
    assert_eq!(c.fence, f);
    assert_eq!(c.status, Status::Pending);
    assert_eq!(c.retry_in, Some(Duration::ZERO));
    assert_eq!(c.last_error, None);

    let state = TaskState {
        next_attempt_at: t0() - secs(100),
        ..claimed("worker-a", 4)
    };
    let now = t0() + secs(3);
    let next = complete(&state, &c, now).expect("current fence");
    assert_eq!(next.attempts, 4);
    assert_eq!(next.status, Status::Pending);
    assert_eq!(next.lease, None);
    assert_eq!(next.finished_at, None);
    assert_eq!(next.next_attempt_at, now);
    assert_eq!(availability(&next, now, false), Availability::Claimable);
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
        max_attempts: Some(3),
        finished_at: Some(t0()),
        next_attempt_at: t0() + secs(999),
        ..fresh()
    };
    let next = requeue(&failed, now).expect("failed task is requeued");
    assert_eq!(next.status, Status::Pending);
    assert_eq!(next.attempts, 3);
    assert_eq!(next.finished_at, None);
    assert_eq!(next.lease, None);
    assert_eq!(next.next_attempt_at, now);
    assert_eq!(availability(&next, now, false), Availability::Claimable);

    let succeeded = TaskState {
        status: Status::Succeeded,
        ..failed
    };
    assert_eq!(requeue(&succeeded, now), None);
    assert_eq!(requeue(&fresh(), now), None);
    assert_eq!(requeue(&claimed("worker-a", 1), now), None);
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
        blocked: bool,
    },
    Complete {
        fence: FenceChoice,
        outcome: Outcome,
    },
    Release {
        fence: FenceChoice,
    },
    Expire,
    Requeue,
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

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => prop_oneof![0i64..5, 0i64..120, 0i64..1200].prop_map(Event::Advance),
        3 => (0usize..3, 1u64..90, prop::bool::weighted(0.15)).prop_map(
            |(owner, lease_secs, blocked)| Event::Claim { owner, lease_secs, blocked }
        ),
        3 => (fence_choice(), outcome())
            .prop_map(|(fence, outcome)| Event::Complete { fence, outcome }),
        1 => fence_choice().prop_map(|fence| Event::Release { fence }),
        1 => Just(Event::Expire),
        1 => Just(Event::Requeue),
    ]
}

/// A fresh pending task with a random limit, schedule and deadline.
fn initial_state() -> impl Strategy<Value = TaskState> {
    (
        prop::option::of(1i32..5),
        0i64..60,
        prop::option::of(0i64..1800),
    )
        .prop_map(|(max_attempts, due, deadline)| TaskState {
            max_attempts,
            next_attempt_at: t0() + secs(due),
            expires_at: deadline.map(|d| t0() + secs(d)),
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
    /// completion or an expiry. Kept by the test, not read from the state.
    holder: Option<Fence>,
    /// What a backend would store as `last_error`.
    last_error: String,
    policy: RetryPolicy,
}

impl Sim {
    fn new(state: TaskState) -> Self {
        Self {
            state,
            now: t0(),
            last_fence: None,
            holder: None,
            last_error: String::new(),
            policy: RetryPolicy::default(),
        }
    }

    fn pick_fence(&self, choice: &FenceChoice) -> Fence {
        let base = self.last_fence.clone().unwrap_or_else(|| Fence {
            id: ID,
            owner: OWNERS[0].to_owned(),
            attempt: self.state.attempts,
        });
        match choice {
            FenceChoice::Current => base,
            FenceChoice::ForeignOwner(shift) => {
                let index = OWNERS
                    .iter()
                    .position(|o| *o == base.owner)
                    .expect("owners come from the pool");
                Fence {
                    owner: OWNERS[(index + shift) % OWNERS.len()].to_owned(),
                    ..base
                }
            }
            FenceChoice::ShiftedAttempt(by) => Fence {
                attempt: base.attempt + by,
                ..base
            },
        }
    }

    /// Whether `fence` matches the state's current lease and attempt count.
    fn fence_is_current(&self, fence: &Fence) -> bool {
        self.state.status == Status::Pending
            && self.state.attempts == fence.attempt
            && self
                .state
                .lease
                .as_ref()
                .is_some_and(|l| l.owner == fence.owner)
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
            Event::Claim {
                owner,
                lease_secs,
                blocked,
            } => {
                let owner = OWNERS[*owner];
                let lease_len = Duration::from_secs(*lease_secs);
                let expected = availability(&before, now, *blocked);
                match claim(&before, ID, owner, now, lease_len, *blocked) {
                    Ok((next, fence)) => {
                        prop_assert_eq!(&expected, &Availability::Claimable);
                        prop_assert!(!blocked, "claimed while blocked");
                        prop_assert!(
                            before.expires_at.is_none_or(|at| now < at),
                            "claimed at {} a task expiring at {:?}",
                            now,
                            before.expires_at
                        );
                        prop_assert_eq!(before.status, Status::Pending);
                        prop_assert_eq!(next.attempts, before.attempts + 1);
                        prop_assert_eq!(fence.attempt, next.attempts);
                        prop_assert_eq!(fence.id, ID);
                        prop_assert_eq!(fence.owner.as_str(), owner);
                        prop_assert_eq!(
                            next.lease.clone(),
                            Some(Lease {
                                owner: owner.to_owned(),
                                expires_at: after(now, lease_len),
                            })
                        );
                        prop_assert_eq!(next.next_attempt_at, before.next_attempt_at);
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
                check_decision(&completion, &fence, run, before.max_attempts, outcome)?;
                self.apply_completion(&fence, &completion)?;
            }
            Event::Release { fence } => {
                let fence = self.pick_fence(fence);
                let completion = release(fence.clone());
                prop_assert_eq!(completion.last_error.clone(), None);
                self.apply_completion(&fence, &completion)?;
                if self.state != before {
                    prop_assert_eq!(self.state.next_attempt_at, now);
                    prop_assert_eq!(self.state.status, Status::Pending);
                    // Given back unstarted: the fence token stays, the run is not counted.
                    prop_assert_eq!(self.state.attempts, before.attempts);
                    prop_assert_eq!(self.state.released, before.released + 1);
                }
                prop_assert!(self.state.released <= self.state.attempts);
            }
            Event::Expire => {
                let was_expired = availability(&before, now, false) == Availability::Expired;
                match expire(&before, now) {
                    Some(next) => {
                        prop_assert!(was_expired);
                        prop_assert!(
                            before.lease.as_ref().is_none_or(|l| l.expires_at <= now),
                            "expired under a live lease"
                        );
                        prop_assert_eq!(next.status, Status::Failed);
                        prop_assert_eq!(next.finished_at, Some(now));
                        prop_assert_eq!(next.lease.clone(), None);
                        self.holder = None;
                        self.last_error = transition::EXPIRED_ERROR.to_owned();
                        self.state = next;
                    }
                    None => prop_assert!(!was_expired),
                }
            }
            Event::Requeue => match requeue(&before, now) {
                Some(next) => {
                    prop_assert_eq!(before.status, Status::Failed);
                    prop_assert_eq!(next.status, Status::Pending);
                    prop_assert_eq!(next.next_attempt_at, now);
                    prop_assert_eq!(next.lease.clone(), None);
                    self.state = next;
                }
                None => prop_assert_ne!(before.status, Status::Failed),
            },
        }
        self.check_step(&before, event)
    }

    fn apply_completion(
        &mut self,
        fence: &Fence,
        completion: &Completion,
    ) -> Result<(), TestCaseError> {
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
        match complete(&self.state, completion, self.now) {
            Some(next) => {
                prop_assert!(
                    current,
                    "stale fence {:?} applied to {:?}",
                    fence,
                    self.state
                );
                prop_assert_eq!(next.status, completion.status);
                prop_assert_eq!(next.attempts, self.state.attempts);
                prop_assert_eq!(next.lease.clone(), None);
                if let Some(delay) = completion.retry_in {
                    prop_assert_eq!(next.next_attempt_at, after(self.now, delay));
                }
                if let Some(error) = &completion.last_error {
                    self.last_error.clone_from(error);
                }
                self.holder = None;
                self.state = next;
            }
            None => prop_assert!(!current, "current fence {:?} refused", fence),
        }
        Ok(())
    }

    /// The invariants that hold after every step.
    fn check_step(&self, before: &TaskState, event: &Event) -> Result<(), TestCaseError> {
        let state = &self.state;
        prop_assert!(
            state.attempts >= before.attempts,
            "attempts went from {} to {}",
            before.attempts,
            state.attempts
        );
        prop_assert!(state.attempts <= before.attempts + 1);
        if before.status.is_finished() && state.status == Status::Pending {
            prop_assert!(
                matches!(event, Event::Requeue),
                "{:?} reopened a finished task",
                event
            );
        }
        if before.status == Status::Succeeded {
            prop_assert_eq!(state, before, "a succeeded task changed");
        }
        prop_assert_eq!(state.finished_at.is_some(), state.status.is_finished());
        if state.lease.is_some() {
            prop_assert_eq!(state.status, Status::Pending);
        }
        prop_assert_eq!(state.max_attempts, before.max_attempts);
        prop_assert_eq!(state.expires_at, before.expires_at);
        prop_assert!(self.last_error.len() <= MAX_ERROR_BYTES);
        if state.status == Status::Succeeded {
            prop_assert_eq!(self.last_error.as_str(), "");
        }
        if self.holder.is_some() {
            prop_assert!(state.lease.is_some());
        }
        Ok(())
    }
}

/// `decide` picks the status the outcome, limit and attempt call for.
fn check_decision(
    completion: &Completion,
    fence: &Fence,
    run: i64,
    max_attempts: Option<i32>,
    outcome: &Outcome,
) -> Result<(), TestCaseError> {
    // Claims given back unstarted never count: only handler runs do.
    let exhausted = max_attempts.is_some_and(|max| run >= i64::from(max));
    let (status, full_error) = match outcome {
        Outcome::Succeeded => (Status::Succeeded, String::new()),
        Outcome::Permanent(e) => (Status::Failed, e.clone()),
        Outcome::Retryable(e) if exhausted => {
            (Status::Failed, format!("gave up after {run} attempts: {e}"))
        }
        Outcome::Retryable(e) | Outcome::NoHandler(e) => (Status::Pending, e.clone()),
    };
    // Stored text never holds NUL (PostgreSQL cannot): it is escaped as `\0`.
    let full_error = full_error.replace('\0', "\\0");
    prop_assert_eq!(&completion.fence, fence);
    prop_assert_eq!(completion.status, status);
    prop_assert_eq!(completion.retry_in.is_some(), status == Status::Pending);
    let error = completion
        .last_error
        .as_deref()
        .ok_or_else(|| TestCaseError::fail("decide must set last_error"))?;
    prop_assert!(error.len() <= MAX_ERROR_BYTES);
    prop_assert!(!error.contains('\0'));
    prop_assert!(full_error.starts_with(error));
    if full_error.len() <= MAX_ERROR_BYTES {
        prop_assert_eq!(error, full_error.as_str());
    } else {
        // Cut on the last boundary at or below the limit: less than one
        // character (at most 4 bytes) short of it.
        prop_assert!(error.len() > MAX_ERROR_BYTES - 4);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_event_sequences_keep_the_invariants(
        initial in initial_state(),
        events in prop::collection::vec(event(), 1..80),
    ) {
        let mut sim = Sim::new(initial);
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
        let mut sim = Sim::new(initial);
        for event in &events {
            sim.apply(event)?;
        }
        let owner = OWNERS[owner];
        let current_owner = sim.state.lease.as_ref().map(|l| l.owner.as_str());
        let mut stale = vec![Fence { id: ID, owner: owner.to_owned(), attempt: sim.state.attempts + shift }];
        if current_owner != Some(owner) {
            stale.push(Fence { id: ID, owner: owner.to_owned(), attempt: sim.state.attempts });
        }
        for fence in stale {
            let decided = decide(fence.clone(), fence.attempt, sim.state.max_attempts, outcome.clone(), &sim.policy);
            prop_assert_eq!(complete(&sim.state, &decided, sim.now), None);
            prop_assert_eq!(complete(&sim.state, &release(fence), sim.now), None);
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
        let mut sim = Sim::new(initial);
        for event in &events {
            sim.apply(event)?;
        }
        if let Some(deadline) = sim.state.expires_at {
            let late = sim.now.max(deadline);
            let lease_until = sim.state.lease.as_ref().map(|l| l.expires_at);
            let late = lease_until.map_or(late, |until| late.max(until));
            let result = claim(&sim.state, ID, OWNERS[owner], late, Duration::from_secs(lease_secs), false);
            prop_assert!(result.is_err(), "claimed past the deadline: {:?}", result);
            if sim.state.status == Status::Pending {
                prop_assert_eq!(result, Err(Availability::Expired));
                let failed = expire(&sim.state, late).expect("an expired pending task expires");
                prop_assert_eq!(failed.status, Status::Failed);
            }
        }
    }
}
