//! One completion write holding several results for the same task.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, LeaseRequest, Record, RetryPolicy, Status, Store, Task, TaskId,
    transition::{self, Completion, Fence, Outcome},
};

use super::support::{enqueue_batch, enqueue_one, get, immediate_retry, task};
use crate::TestBackend;

/// How one case ends a claim: a result for its fence.
type Verdict = fn(Fence) -> Completion;

/// What the current attempt's result must leave in the row.
struct Expected {
    status: Status,
    last_error: &'static str,
    /// The retry is at least this far off (a pending result).
    retry_after: Option<TimeDelta>,
}

/// A claim given back and then claimed again by the same worker leaves a
/// stale result (attempt N) and a current one (attempt N + 1). Written in one
/// `complete` call, in either order, the current result applies, the stale
/// one changes nothing, and the call counts one row.
pub async fn a_write_with_a_stale_and_a_current_result_applies_the_current<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let cases: [(&str, Verdict, Verdict, Expected); 3] = [
        (
            "both succeeded",
            |fence| decide(fence, Outcome::Succeeded, &immediate_retry()),
            |fence| decide(fence, Outcome::Succeeded, &immediate_retry()),
            Expected {
                status: Status::Succeeded,
                last_error: "",
                retry_after: None,
            },
        ),
        (
            "stale release, current failed",
            transition::release,
            |fence| {
                decide(
                    fence,
                    Outcome::Permanent("current".into()),
                    &immediate_retry(),
                )
            },
            Expected {
                status: Status::Failed,
                last_error: "current",
                retry_after: None,
            },
        ),
        (
            "both retryable",
            |fence| {
                decide(
                    fence,
                    Outcome::Retryable("stale".into()),
                    &immediate_retry(),
                )
            },
            |fence| decide(fence, Outcome::Retryable("current".into()), &in_an_hour()),
            Expected {
                status: Status::Waiting,
                last_error: "current",
                retry_after: Some(TimeDelta::minutes(30)),
            },
        ),
    ];
    for (case, stale_result, current_result, expected) in &cases {
        for stale_first in [true, false] {
            let what = format!("{case}, stale first: {stale_first}");
            let (first, second) = claimed_twice(db).await?;
            let stale = stale_result(fence(&first));
            let current = current_result(fence(&second));
            let batch = if stale_first {
                [stale, current]
            } else {
                [current, stale]
            };
            let started = Utc::now();
            assert_eq!(db.store().complete(&batch).await?, 1, "{what}");
            let row = get(db, first.id).await?;
            assert_eq!(row.status, expected.status, "{what}");
            assert_eq!(row.last_error, expected.last_error, "{what}");
            assert_eq!(row.attempts, second.attempts, "{what}");
            assert!(row.lease.is_none(), "{what}: the lease was kept");
            assert_eq!(
                row.finished_at.is_some(),
                expected.status.is_finished(),
                "{what}"
            );
            if let Some(after) = expected.retry_after {
                assert!(
                    row.next_attempt_at > started + after,
                    "{what}: the stale retry time was written: {}",
                    row.next_attempt_at
                );
            }
        }
    }
    Ok(())
}

/// Results of every kind for thousands of tasks in one `complete` call all
/// apply: a backend that binds several values per result must still fit
/// the statement limits of its database.
pub async fn a_write_of_thousands_of_results_applies_them_all<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    const TASKS: usize = 6_000;
    enqueue_batch(db, (0..TASKS).map(task).collect()).await?;
    let claimed = db
        .store()
        .claim_due(&BatchRequest {
            lease: LeaseRequest {
                owner: "w".to_owned(),
                duration: Duration::from_secs(60),
            },
            limit: TASKS,
            after: None,
            due_by: None,
        })
        .await?;
    assert_eq!(claimed.len(), TASKS);
    let outcomes = |n: usize| match n % 3 {
        0 => Outcome::Succeeded,
        1 => Outcome::Retryable(format!("retry {n}")),
        _ => Outcome::Permanent(format!("failed {n}")),
    };
    let completions: Vec<Completion> = claimed
        .iter()
        .enumerate()
        .map(|(n, claimed)| {
            let fence = claim_fence(claimed.id, claimed.attempts, &claimed.task);
            decide(fence, outcomes(n), &in_an_hour())
        })
        .collect();
    assert_eq!(db.store().complete(&completions).await?, TASKS as u64);
    for n in [0, 1, 2, TASKS / 2, TASKS - 1] {
        let row = get(db, claimed[n].id).await?;
        let expected = completions[n].status;
        assert_eq!(row.status, expected, "task {n}");
        assert!(row.lease.is_none(), "task {n} kept its lease");
    }
    Ok(())
}

/// The decision of a first run under `fence`, without an attempt limit.
fn decide(fence: Fence, outcome: Outcome, policy: &RetryPolicy) -> Completion {
    transition::decide(fence, 1, None, outcome, policy)
}

/// Retries an hour later, every time.
fn in_an_hour() -> RetryPolicy {
    let hour = Duration::from_secs(3600);
    // Infallible for these constants; the default's short delays would fail
    // the assertion that relies on this one.
    RetryPolicy::new(hour, hour, 0.0).unwrap_or_default()
}

/// A new task claimed by `w`, given back, and claimed again by `w`: the
/// first and the second claim.
async fn claimed_twice<B: TestBackend>(db: &B) -> anyhow::Result<(Record, Record)> {
    let store = db.store();
    let id = enqueue_one(db, task(1)).await?;
    let lease = LeaseRequest {
        owner: "w".to_owned(),
        duration: Duration::from_secs(30),
    };
    let first = claimed(store.claim(id, &lease).await?)?;
    let given_back = transition::release(fence(&first));
    anyhow::ensure!(store.complete(&[given_back]).await? == 1, "release failed");
    let second = claimed(store.claim(id, &lease).await?)?;
    anyhow::ensure!(second.attempts == first.attempts + 1, "{second:?}");
    Ok((first, second))
}

fn claimed(outcome: ClaimOutcome) -> anyhow::Result<Record> {
    match outcome {
        ClaimOutcome::Claimed(record) => Ok(*record),
        other => anyhow::bail!("expected a claim, got {other:?}"),
    }
}

/// The fence of `record`'s claim by `w`.
fn fence(record: &Record) -> Fence {
    claim_fence(record.id, record.attempts, &record.task)
}

/// The fence of a claim by `w` of task `id` (holding `task`) that left
/// `attempts`.
fn claim_fence(id: TaskId, attempts: i64, task: &Task) -> Fence {
    Fence {
        id,
        owner: "w".into(),
        attempt: attempts,
        ordering_key: task.ordering_key.clone(),
    }
}
