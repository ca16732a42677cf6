//! The model check: the transition functions are the specification every
//! store operation is held to.
//!
//! A task row is put in a state (every status; with an ordering key and a
//! task blocked behind it, or without; runs below, at or without
//! `max_attempts`; due or not; expired, expiring later or never; a running
//! task's lease live or lapsed), one store operation is applied, and the
//! rows that result are compared with what `transition::*` says for that
//! state at the database's time: the target row, the next task of its key,
//! and the key's count of open tasks. Whether a backend decides in Rust or
//! inside one statement (PostgreSQL's claims, the periodic moves), it must
//! decide the same.
//!
//! Times are set a day away from the operation, so the decision never
//! depends on when within the operation the database read its clock; the
//! times written are checked to lie between the clock read before the
//! operation and the one after.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use chrono::{DateTime, TimeDelta, Utc};
use diesel_async::AsyncConnection as _;
use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, LeaseRequest, Maintenance, RetryPolicy, Status, Store, Task,
    TaskId,
    transition::{self, Availability, Completion, Fence, Outcome, TaskState},
};

use super::support::{KIND, enqueue_one_on, get};
use crate::TestBackend;

/// The ordering key of the keyed cases.
const KEY: &str = "model-key";
/// The owner of a running task's lease.
const HOLDER: &str = "model-holder";
/// The owner of the claims the operations make.
const CLAIMER: &str = "model-claimer";
/// The lease the operations' claims take.
const LEASE: Duration = Duration::from_secs(60);
/// The clocks of the test and of the database may read a little apart
/// (microseconds stored, nanoseconds read).
const SLACK: TimeDelta = TimeDelta::milliseconds(2);

/// When a task's deadline is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    Never,
    Later,
    Passed,
}

/// How many runs a task has left before `max_attempts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runs {
    Unlimited,
    Below,
    AtMax,
}

/// The state one case puts the target row in.
#[derive(Debug, Clone, Copy)]
struct Case {
    status: Status,
    keyed: bool,
    runs: Runs,
    due: bool,
    expiry: Expiry,
    /// A running task's lease: live, or lapsed.
    lease_live: bool,
    /// Claims so far, and how many were given back unstarted.
    attempts: i64,
    released: i64,
}

/// Every state the check covers: each status, with and without a key (a
/// blocked task always has one), each of the run, schedule and deadline
/// choices, and for a running task a live or a lapsed lease.
fn cases() -> Vec<Case> {
    let statuses = [
        Status::Available,
        Status::Waiting,
        Status::Running,
        Status::Blocked,
        Status::Succeeded,
        Status::Failed,
        Status::Discarded,
    ];
    let mut cases = Vec::new();
    for status in statuses {
        for keyed in [false, true] {
            if status == Status::Blocked && !keyed {
                continue;
            }
            for runs in [Runs::Unlimited, Runs::Below, Runs::AtMax] {
                for due in [true, false] {
                    for expiry in [Expiry::Never, Expiry::Later, Expiry::Passed] {
                        for lease_live in [true, false] {
                            if status != Status::Running && !lease_live {
                                continue;
                            }
                            let n = cases.len() as i64;
                            let attempts = if status == Status::Available && n % 4 == 0 {
                                0
                            } else {
                                1 + n % 3
                            };
                            cases.push(Case {
                                status,
                                keyed,
                                runs,
                                due,
                                expiry,
                                lease_live,
                                attempts,
                                released: if attempts > 1 { n % 2 } else { 0 },
                            });
                        }
                    }
                }
            }
        }
    }
    cases
}

/// The rows of one case, as they stand before the operation.
struct Setup {
    target: TaskId,
    before: TaskState,
    /// The task blocked behind a keyed target, when the target holds its key.
    next: Option<(TaskId, TaskState)>,
}

/// A literal for `at` in the backend's time columns, or `NULL`.
fn instant<B: TestBackend>(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "NULL".to_owned(), B::instant_sql)
}

/// Puts the rows of `case` in the (emptied) table, as of `now`, enqueueing
/// on `conn` (one connection for every case of a check).
async fn set_up<B: TestBackend>(
    db: &B,
    conn: &mut B::Conn,
    case: &Case,
    now: DateTime<Utc>,
) -> anyhow::Result<Setup> {
    db.execute_sql("DELETE FROM outbox_tasks").await?;
    db.execute_sql("DELETE FROM outbox_ordering_keys").await?;
    let task = || {
        let task = Task::new(KIND, 1, "{}");
        if case.keyed {
            task.ordering_key(KEY)
        } else {
            task
        }
    };
    // A blocked target waits behind an older task that failed holding the key.
    if case.status == Status::Blocked {
        let head = enqueue_one_on(db, conn, task()).await?;
        db.execute_sql(&format!(
            "UPDATE outbox_tasks SET status = 'failed', attempts = 1, finished_at = {} \
             WHERE id = {head}",
            B::instant_sql(now - TimeDelta::hours(1)),
        ))
        .await?;
    }
    let target = enqueue_one_on(db, conn, task()).await?;
    let holds_key = !matches!(case.status, Status::Succeeded | Status::Discarded);
    let next = if case.keyed && holds_key && case.status != Status::Blocked {
        Some(enqueue_one_on(db, conn, task().not_before(now + TimeDelta::days(1))).await?)
    } else {
        None
    };
    if let Some(next) = next {
        // Half the successors are due when they go, half not yet.
        if case.due {
            db.execute_sql(&format!(
                "UPDATE outbox_tasks SET next_attempt_at = {} WHERE id = {next}",
                B::instant_sql(now - TimeDelta::days(1))
            ))
            .await?;
        }
    }
    if case.keyed && !holds_key {
        // A finished task no longer counts on its key.
        db.execute_sql("DELETE FROM outbox_ordering_keys").await?;
    }
    let runs = case.attempts - case.released;
    let max_attempts = match case.runs {
        Runs::Unlimited => None,
        Runs::Below => Some(runs + 1),
        Runs::AtMax => Some(runs.max(1)),
    };
    let day = TimeDelta::days(1);
    let next_attempt_at = if case.due { now - day } else { now + day };
    let expires_at = match case.expiry {
        Expiry::Never => None,
        Expiry::Later => Some(now + day),
        Expiry::Passed => Some(now - day),
    };
    let running = case.status == Status::Running;
    let lease_expires_at = running.then(|| {
        if case.lease_live {
            now + day
        } else {
            now - day
        }
    });
    let finished_at = case.status.is_finished().then(|| now - TimeDelta::hours(1));
    db.execute_sql(&format!(
        "UPDATE outbox_tasks SET status = '{status}', attempts = {attempts}, \
         released = {released}, max_attempts = {max_attempts}, next_attempt_at = {next_attempt_at}, \
         lease_owner = {owner}, lease_expires_at = {lease_expires_at}, expires_at = {expires_at}, \
         last_error = 'before the operation', finished_at = {finished_at} WHERE id = {target}",
        status = case.status.as_str(),
        attempts = case.attempts,
        released = case.released,
        max_attempts = max_attempts.map_or_else(|| "NULL".to_owned(), |max| max.to_string()),
        next_attempt_at = B::instant_sql(next_attempt_at),
        owner = if running { format!("'{HOLDER}'") } else { "NULL".to_owned() },
        lease_expires_at = instant::<B>(lease_expires_at),
        expires_at = instant::<B>(expires_at),
        finished_at = instant::<B>(finished_at),
    ))
    .await?;
    let before = get(db, target).await?.state();
    let next = match next {
        Some(id) => Some((id, get(db, id).await?.state())),
        None => None,
    };
    Ok(Setup {
        target,
        before,
        next,
    })
}

/// Checks `actual` against the state the rules give at the clock read
/// before the operation (`early`) and the one read after (`late`): equal
/// but for the instants the operation wrote, which lie between the two.
fn check_state(
    what: &str,
    actual: &TaskState,
    early: &TaskState,
    late: &TaskState,
) -> anyhow::Result<()> {
    let owner = |state: &TaskState| state.lease.as_ref().map(|lease| lease.owner.clone());
    ensure!(
        actual.status == early.status
            && actual.attempts == early.attempts
            && actual.released == early.released
            && actual.max_attempts == early.max_attempts
            && actual.expires_at == early.expires_at
            && actual.ordering_key == early.ordering_key
            && actual.last_error == early.last_error
            && owner(actual) == owner(early)
            && actual.finished_at.is_some() == early.finished_at.is_some(),
        "{what}:\n  actual:   {actual:?}\n  expected: {early:?}"
    );
    let within = |field: &str, actual: DateTime<Utc>, early: DateTime<Utc>, late: DateTime<Utc>| {
        ensure!(
            actual >= early - SLACK && actual <= late + SLACK,
            "{what}: {field} is {actual}, not between {early} and {late}"
        );
        Ok(())
    };
    within(
        "next_attempt_at",
        actual.next_attempt_at,
        early.next_attempt_at,
        late.next_attempt_at,
    )?;
    if let (Some(actual), Some(early), Some(late)) = (&actual.lease, &early.lease, &late.lease) {
        within(
            "lease_expires_at",
            actual.expires_at,
            early.expires_at,
            late.expires_at,
        )?;
    }
    if let (Some(actual), Some(early), Some(late)) =
        (actual.finished_at, early.finished_at, late.finished_at)
    {
        within("finished_at", actual, early, late)?;
    }
    Ok(())
}

/// What the rules say an operation did to the target's state at `now`: the
/// state it leaves, and whether the target's key moved on.
type Expect = Box<dyn Fn(&TaskState, DateTime<Utc>) -> (TaskState, bool) + Send>;

/// Runs `operate` on each case (it returns what the rules say it did) and
/// checks the target, the task blocked behind it and the key's count.
async fn check_each<B, F>(db: &B, name: &str, operate: F) -> anyhow::Result<()>
where
    B: TestBackend,
    F: AsyncFn(&B, &Setup, usize) -> anyhow::Result<Expect>,
{
    let mut conn = db.connect().await?;
    for (n, case) in cases().into_iter().enumerate() {
        let what = format!("{name} of case {n} {case:?}");
        let setup = set_up(db, &mut conn, &case, Utc::now()).await?;
        let early = Utc::now();
        let rule = operate(db, &setup, n).await.with_context(|| what.clone())?;
        let late = Utc::now();
        let actual = get(db, setup.target).await?.state();
        let (at_early, moved) = rule(&setup.before, early);
        let (at_late, _) = rule(&setup.before, late);
        check_state(&what, &actual, &at_early, &at_late)?;
        if let Some((next, next_before)) = &setup.next {
            let expected = |now| match moved {
                true => or_same(transition::unblock(next_before, now), next_before),
                false => next_before.clone(),
            };
            let actual = get(db, *next).await?.state();
            check_state(
                &format!("{what}, the next task of its key"),
                &actual,
                &expected(early),
                &expected(late),
            )?;
        }
        if case.keyed {
            check_key_count(db, &what).await?;
        }
    }
    Ok(())
}

/// The key's count says how many of its tasks are open (neither succeeded
/// nor discarded), and a key with none has no row.
async fn check_key_count<B: TestBackend>(db: &B, what: &str) -> anyhow::Result<()> {
    let open = db
        .count(&format!(
            "outbox_tasks WHERE ordering_key = '{KEY}' AND status NOT IN ('succeeded', 'discarded')"
        ))
        .await?;
    let rows = db
        .count(&format!(
            "outbox_ordering_keys WHERE ordering_key = '{KEY}'"
        ))
        .await?;
    let counted = db
        .count(&format!(
            "outbox_ordering_keys WHERE ordering_key = '{KEY}' AND open_tasks = {open}"
        ))
        .await?;
    ensure!(
        (open == 0 && rows == 0) || counted == 1,
        "{what}: the key's count does not say its {open} open tasks"
    );
    Ok(())
}

/// The state `transition` gives, or the state unchanged when the rule does
/// not apply.
fn or_same(next: Option<TaskState>, before: &TaskState) -> TaskState {
    next.unwrap_or_else(|| before.clone())
}

/// [`transition::claim`] for the operations' claimer, or `None`.
fn claimed(before: &TaskState, now: DateTime<Utc>) -> Option<TaskState> {
    transition::claim(before, TaskId::new(0), CLAIMER, now, LEASE)
        .ok()
        .map(|(state, _)| state)
}

/// A claim by id decides as [`transition::availability`].
fn claim_rule(before: &TaskState, now: DateTime<Utc>) -> (TaskState, bool) {
    let next = match transition::availability(before, now) {
        Availability::Claimable => claimed(before, now),
        Availability::Expired => transition::expire(before, now),
        _ => None,
    };
    (or_same(next, before), false)
}

/// A batch claim takes only available tasks that are due (its `due_by`,
/// here now), and decides as a claim by id.
fn batch_rule(before: &TaskState, now: DateTime<Utc>) -> (TaskState, bool) {
    if before.status == Status::Available && before.next_attempt_at <= now {
        claim_rule(before, now)
    } else {
        (before.clone(), false)
    }
}

/// The lease the operations' claims ask for.
fn lease() -> LeaseRequest {
    LeaseRequest {
        owner: CLAIMER.to_owned(),
        duration: LEASE,
    }
}

/// A record a claim returned holds what its row holds now (MySQL and
/// SQLite build it in Rust from the state they wrote).
async fn same_as_stored<B: TestBackend>(
    db: &B,
    what: &str,
    record: &diesel_outbox_core::Record,
) -> anyhow::Result<()> {
    let stored = get(db, record.id).await?.state();
    check_state(what, &record.state(), &stored, &stored)
}

/// A task a batch claim returned holds what its row holds now: the same
/// [`ClaimedTask`](diesel_outbox_core::ClaimedTask) as the record read back,
/// column for column.
async fn claimed_as_stored<B: TestBackend>(
    db: &B,
    claimed: &diesel_outbox_core::ClaimedTask,
) -> anyhow::Result<()> {
    let stored = diesel_outbox_core::ClaimedTask::from(get(db, claimed.id).await?);
    ensure!(
        *claimed == stored,
        "a task of the batch:\n  claimed: {claimed:?}\n  stored:  {stored:?}"
    );
    Ok(())
}

/// A claim by id ([`Store::claim`]) writes what [`transition::availability`]
/// decides ([`transition::claim`] or [`transition::expire`]), and answers
/// what it says.
pub async fn model_claim_by_id_decides_as_the_transitions<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    check_each(db, "claim by id", async |db: &B, setup: &Setup, _| {
        let outcome = db.store().claim(setup.target, &lease()).await?;
        let expected = transition::availability(&setup.before, Utc::now());
        let agrees = match (&outcome, &expected) {
            (ClaimOutcome::Claimed(_), Availability::Claimable)
            | (ClaimOutcome::Expired, Availability::Expired)
            | (ClaimOutcome::Blocked, Availability::Blocked)
            | (ClaimOutcome::NotDue { .. }, Availability::NotDue { .. }) => true,
            (ClaimOutcome::Leased { until }, Availability::Leased { until: expected }) => {
                until == expected
            }
            (ClaimOutcome::Finished(status), Availability::Finished(expected)) => {
                status == expected
            }
            _ => false,
        };
        ensure!(
            agrees,
            "the claim answered {outcome:?} where availability says {expected:?}"
        );
        if let ClaimOutcome::Claimed(record) = &outcome {
            same_as_stored(db, "the claimed record", record).await?;
        }
        Ok(Box::new(claim_rule) as Expect)
    })
    .await
}

/// A batch claim ([`Store::claim_due`]) takes only available tasks that are
/// due, claiming those [`transition::availability`] finds claimable and
/// failing those it finds expired, and returns exactly those.
pub async fn model_batch_claim_decides_as_the_transitions<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    check_each(db, "batch claim", async |db: &B, setup: &Setup, _| {
        let request = BatchRequest {
            lease: lease(),
            limit: 10,
            after: Some(TaskId::new(setup.target.get() - 1)),
            due_by: None,
        };
        let taken = db.store().claim_due(&request).await?;
        let changed = batch_rule(&setup.before, Utc::now()).0 != setup.before;
        ensure!(
            taken.iter().any(|record| record.id == setup.target) == changed,
            "the claim returned {taken:?}"
        );
        for claimed in &taken {
            claimed_as_stored(db, claimed).await?;
        }
        Ok(Box::new(batch_rule) as Expect)
    })
    .await
}

/// One of the results the worker writes, picked by `n`: success, a retry
/// (or the failure at `max_attempts`), a permanent failure, a claim given
/// back, a run cut at shutdown, a result that cannot be written; every
/// seventh under a stale claim.
fn completion(before: &TaskState, target: TaskId, n: usize) -> Completion {
    let attempt = if n % 7 == 6 {
        before.attempts - 1
    } else {
        before.attempts
    };
    let fence = Fence {
        id: target,
        owner: before
            .lease
            .as_ref()
            .map_or(HOLDER, |lease| lease.owner.as_str())
            .into(),
        attempt,
        ordering_key: before.ordering_key.clone(),
    };
    let run = before.attempts - before.released;
    let policy = RetryPolicy::default();
    let decide =
        |outcome| transition::decide(fence.clone(), run, before.max_attempts, outcome, &policy);
    match n % 6 {
        0 => decide(Outcome::Succeeded),
        1 => decide(Outcome::Retryable("timed out".into())),
        2 => decide(Outcome::Permanent("refused".into())),
        3 => transition::release(fence),
        4 => transition::interrupt(fence),
        _ => transition::fail(fence, "cannot be written"),
    }
}

/// Completion writes ([`Store::complete`], [`Store::complete_applied`])
/// apply [`transition::complete`] under the fence, and let the key's next
/// task go ([`transition::unblock`]) exactly when the result moves the key
/// on; `complete_applied` answers exactly the claims that applied.
pub async fn model_completions_decide_as_the_transitions<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    // Each pass shifts which result a case gets, so every state meets every
    // kind of result, current and stale, through both writes.
    for pass in 0..7 {
        check_each(
            db,
            &format!("completion (pass {pass})"),
            async |db: &B, setup: &Setup, n| {
                let c = completion(&setup.before, setup.target, n + pass);
                let applies = transition::complete(&setup.before, &c, Utc::now()).is_some();
                if (n + pass) % 2 == 0 {
                    let applied = db.store().complete(std::slice::from_ref(&c)).await?;
                    ensure!((applied == 1) == applies, "{c:?} applied to {applied} rows");
                } else {
                    let applied = db
                        .store()
                        .complete_applied(std::slice::from_ref(&c))
                        .await?;
                    ensure!(
                        applied.contains(&(c.fence.id, c.fence.attempt)) == applies,
                        "{c:?} answered {applied:?}"
                    );
                }
                Ok(Box::new(move |before: &TaskState, now| {
                    match transition::complete(before, &c, now) {
                        Some(next) => (next, transition::moves_key_on(&c)),
                        None => (before.clone(), false),
                    }
                }) as Expect)
            },
        )
        .await?;
    }
    Ok(())
}

/// Promotion ([`Store::promote`]) writes [`transition::promote`].
pub async fn model_promotion_decides_as_the_transitions<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    check_each(db, "promotion", async |db: &B, _: &Setup, _| {
        db.store().promote(100).await?;
        Ok(Box::new(|before: &TaskState, now| {
            (or_same(transition::promote(before, now), before), false)
        }) as Expect)
    })
    .await
}

/// Rescue ([`Store::rescue`]) writes [`transition::rescue`], and names the
/// tasks it failed.
pub async fn model_rescue_decides_as_the_transitions<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    check_each(db, "rescue", async |db: &B, setup: &Setup, _| {
        let rescued = db.store().rescue(100).await?;
        let failed = transition::rescue(&setup.before, Utc::now())
            .is_some_and(|next| next.status == Status::Failed);
        ensure!(
            rescued.failed.contains(&setup.target) == failed,
            "the rescue answered {rescued:?}"
        );
        Ok(Box::new(|before: &TaskState, now| {
            (or_same(transition::rescue(before, now), before), false)
        }) as Expect)
    })
    .await
}

/// A requeue ([`Maintenance::requeue_failed`]) writes
/// [`transition::requeue`], and says whether it did.
pub async fn model_requeue_decides_as_the_transitions<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    check_each(db, "requeue", async |db: &B, setup: &Setup, _| {
        let done = db.store().requeue_failed(setup.target).await?;
        let expected = transition::requeue(&setup.before, Utc::now()).is_some();
        ensure!(done == expected, "the requeue answered {done}");
        Ok(Box::new(|before: &TaskState, now| {
            (or_same(transition::requeue(before, now), before), false)
        }) as Expect)
    })
    .await
}

/// A discard ([`Maintenance::discard_task`]) writes
/// [`transition::discard`], and a discarded head lets its key's next task
/// go.
pub async fn model_discard_decides_as_the_transitions<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    check_each(db, "discard", async |db: &B, setup: &Setup, _| {
        let done = db.store().discard_task(setup.target).await?;
        let expected = transition::discard(&setup.before, Utc::now()).is_some();
        ensure!(done == expected, "the discard answered {done}");
        Ok(Box::new(|before: &TaskState, now| {
            match transition::discard(before, now) {
                // Only a task that heads its key lets the next one go.
                Some(next) => (
                    next,
                    before.ordering_key.is_some() && before.status != Status::Blocked,
                ),
                None => (before.clone(), false),
            }
        }) as Expect)
    })
    .await
}

/// An enqueue ([`Store::enqueue`], [`Store::enqueue_many`]) stores its
/// tasks as [`transition::enqueued`] says: heading its key when no task of
/// the key is open, blocked otherwise; waiting until its `not_before` when
/// it heads. The cases take turns: one task due by its `not_before`, one
/// not due yet, one plain task (no options, the short insert), and two
/// tasks of the key in one `enqueue_many`, the second behind the first.
pub async fn model_enqueue_decides_as_the_transitions<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    check_each(db, "enqueue", async |db: &B, setup: &Setup, n| {
        let keyed = setup.before.ordering_key.is_some();
        let open = keyed && !matches!(setup.before.status, Status::Succeeded | Status::Discarded);
        let task = |not_before: Option<DateTime<Utc>>| {
            let mut task = Task::new(KIND, 1, "{}");
            if let Some(at) = not_before {
                task = task.not_before(at);
            }
            if keyed {
                task = task.ordering_key(KEY);
            }
            task
        };
        let day = TimeDelta::days(1);
        let (tasks, expected) = match n % 4 {
            0 => (
                vec![task(Some(Utc::now() - day))],
                vec![transition::enqueued(!open, true)],
            ),
            1 => (
                vec![task(Some(Utc::now() + day))],
                vec![transition::enqueued(!open, false)],
            ),
            2 => (vec![task(None)], vec![transition::enqueued(!open, true)]),
            _ => (
                vec![task(None), task(Some(Utc::now() + day))],
                vec![
                    transition::enqueued(!open, true),
                    // The second heads only without a key.
                    transition::enqueued(!keyed, false),
                ],
            ),
        };
        let store = db.store();
        let mut conn = db.connect().await?;
        let ids = conn
            .transaction::<_, anyhow::Error, _>(async |tx| {
                Ok(store.enqueue_many(tx, tasks).await?)
            })
            .await?;
        ensure!(ids.len() == expected.len(), "{} ids came back", ids.len());
        for (id, expected) in ids.iter().zip(expected) {
            let status = get(db, *id).await?.status;
            ensure!(
                status == expected,
                "new task {id} is {status:?}, not {expected:?}"
            );
        }
        Ok(Box::new(|before: &TaskState, _| (before.clone(), false)) as Expect)
    })
    .await
}

/// A purge ([`Maintenance::purge_batch`]) deletes the finished rows past
/// retention, except a failed task that holds its key (its key stays
/// stopped until an operator acts), and leaves every other row as it was.
pub async fn model_purge_keeps_what_the_rules_keep<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let mut conn = db.connect().await?;
    for (n, case) in cases().into_iter().enumerate() {
        let what = format!("purge of case {n} {case:?}");
        let setup = set_up(db, &mut conn, &case, Utc::now()).await?;
        // Finished rows were finished an hour ago.
        db.store()
            .purge_batch(Duration::from_secs(30 * 60), 1000)
            .await
            .with_context(|| what.clone())?;
        let status = setup.before.status;
        let holds_key = status == Status::Failed && setup.before.ordering_key.is_some();
        let purged = status.is_finished() && !holds_key;
        let left = db
            .count(&format!("outbox_tasks WHERE id = {}", setup.target))
            .await?;
        ensure!(
            left == i64::from(!purged),
            "{what}: the target is {}",
            if left == 0 { "gone" } else { "kept" }
        );
        if !purged {
            let actual = get(db, setup.target).await?.state();
            check_state(&what, &actual, &setup.before, &setup.before)?;
        }
        if let Some((next, before)) = &setup.next {
            let actual = get(db, *next).await?.state();
            check_state(&format!("{what}, the next task"), &actual, before, before)?;
        }
        if case.keyed {
            check_key_count(db, &what).await?;
        }
    }
    Ok(())
}
