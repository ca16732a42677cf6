//! The delivery pipeline under ordinary production conditions: a steady
//! trickle, poisoned text, rows other programs wrote, few handler slots, and
//! bursts of `send_async`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use diesel_outbox_core::{
    BatchRequest, CancellationToken, Delivery, Error, HandlerError, Listed, Maintenance,
    PageRequest, RelayConfig, RelayReport, Status, Store, TaskFilter, TaskId, Worker, WorkerConfig,
    handler_fn,
    transition::{self, Completion, Fence},
};

use super::relay::spawn_relay;
use super::support::{KIND, config, enqueue_committed, enqueue_one, get, registry, task, worker};
use crate::{TestBackend, handler, wait::eventually};

/// Per task id: when each handler call ended (wall clock).
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<HashMap<TaskId, Vec<DateTime<Utc>>>>>);

impl Calls {
    fn record(&self, id: TaskId) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id)
            .or_default()
            .push(Utc::now());
    }

    fn snapshot(&self) -> HashMap<TaskId, Vec<DateTime<Utc>>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Runs a relay with `config` over `worker` until `done` holds, then shuts it
/// down and returns its report.
async fn run_until<S: diesel_outbox_core::Maintenance>(
    worker: Worker<S>,
    config: RelayConfig,
    done: impl AsyncFn() -> anyhow::Result<bool>,
) -> anyhow::Result<RelayReport> {
    let shutdown = CancellationToken::new();
    let running = spawn_relay(worker, config, &shutdown)?;
    let waited = eventually(done).await;
    shutdown.cancel();
    let report = running.await?;
    waited?;
    Ok(report)
}

/// How many tasks have `status`.
async fn count_status<B: TestBackend>(db: &B, status: Status) -> anyhow::Result<usize> {
    let n = db
        .count(&format!(
            "outbox_tasks WHERE status = '{}'",
            status.as_str()
        ))
        .await?;
    Ok(usize::try_from(n)?)
}

/// One relay with default settings, one task every 200 ms for 20 s, each
/// handler taking 1.5 s, so handlers always overlap and a batch never fills:
/// every handler runs exactly once, and every result reaches the table
/// within the write delay (plus a generous margin for a loaded machine) of
/// its handler's end, long before the lease lapses.
pub async fn trickle_runs_each_handler_once_and_writes_promptly<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let calls = Calls::default();
    let handler = handler_fn({
        let calls = calls.clone();
        move |delivery: Delivery| {
            let calls = calls.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                calls.record(delivery.id);
                Ok::<(), HandlerError>(())
            }
        }
    });
    let defaults = WorkerConfig::default().owner("trickle");
    let worker = worker(db, registry(handler)?, defaults)?;
    let shutdown = CancellationToken::new();
    let running = spawn_relay(worker, RelayConfig::default(), &shutdown)?;
    let mut ids = Vec::new();
    let mut ticks = tokio::time::interval(Duration::from_millis(200));
    for n in 0..100 {
        ticks.tick().await;
        ids.push(enqueue_one(db, task(n)).await?);
    }
    let waited =
        eventually(async || Ok(count_status(db, Status::Succeeded).await? == ids.len())).await;
    shutdown.cancel();
    let report = running.await?;
    waited?;

    let calls = calls.snapshot();
    // The write delay is 20 ms; the rest of the margin absorbs a loaded
    // machine. Without the delay, results waited for the lease (30 s).
    let margin = chrono::TimeDelta::milliseconds(750);
    let mut slowest = chrono::TimeDelta::zero();
    for id in &ids {
        let ends = calls.get(id).cloned().unwrap_or_default();
        assert_eq!(ends.len(), 1, "task {id} ran {} times", ends.len());
        let finished = get(db, *id)
            .await?
            .finished_at
            .context("a succeeded task has finished_at")?;
        let waited = finished - ends[0];
        slowest = slowest.max(waited);
        assert!(
            waited <= margin,
            "task {id}: its result reached the table {waited} after the handler ended"
        );
    }
    eprintln!("slowest result write after its handler ended: {slowest}");
    assert_eq!(report.succeeded, 100, "{report:?}");
    assert_eq!(report.dropped, 0, "{report:?}");
    Ok(())
}

/// Handler errors holding NUL and text decoded from invalid UTF-8 are stored
/// readably, and the tasks claimed beside them succeed; the relay's unwritten
/// results stay bounded.
pub async fn poisoned_error_text_is_stored_and_neighbours_succeed<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let handler = handler_fn(|delivery: Delivery| async move {
        match delivery.json::<serde_json::Value>()?["order"].as_u64() {
            Some(0) => Err(HandlerError::permanent(anyhow::anyhow!("bad\0byte"))),
            Some(1) => Err(HandlerError::permanent(anyhow::anyhow!(
                "{}",
                String::from_utf8_lossy(b"broker said \xff\xfe")
            ))),
            _ => Ok(()),
        }
    });
    let worker = worker(db, registry(handler)?, config("poison"))?;
    let ids = enqueue_committed(db, (0..6).map(task).collect()).await?;
    let report = run_until(worker, RelayConfig::default(), async || {
        Ok(diesel_outbox_core::Maintenance::stats(db.store())
            .await?
            .backlog()
            == 0)
    })
    .await?;

    let nul = get(db, ids[0]).await?;
    assert_eq!(nul.status, Status::Failed);
    assert_eq!(nul.last_error, "bad\\0byte");
    let lossy = get(db, ids[1]).await?;
    assert_eq!(lossy.status, Status::Failed);
    assert_eq!(lossy.last_error, "broker said \u{fffd}\u{fffd}");
    assert_eq!(count_status(db, Status::Succeeded).await?, 4);
    assert_eq!(
        (
            report.succeeded,
            report.failed,
            report.errors,
            report.dropped
        ),
        (4, 2, 0, 0),
        "{report:?}"
    );
    Ok(())
}

/// A result the database refuses (here: a retry time past what it can store)
/// is isolated: the results beside it in the same write apply, and the
/// refused one is recorded as a failure of its task.
pub async fn a_refused_result_is_isolated_and_recorded<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let (mock, _handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("isolating"))?;
    let ids = enqueue_committed(db, (0..5).map(task).collect()).await?;
    let claimed = db
        .store()
        .claim_due(&BatchRequest {
            lease: diesel_outbox_core::LeaseRequest {
                owner: "isolating".into(),
                duration: Duration::from_secs(30),
            },
            limit: 5,
            after: None,
            due_by: None,
        })
        .await?;
    assert_eq!(claimed.len(), 5);
    let fence = |i: usize| Fence {
        id: claimed[i].id,
        owner: "isolating".into(),
        attempt: claimed[i].attempts,
        ordering_key: None,
    };
    let policy = diesel_outbox_core::RetryPolicy::default();
    let mut completions: Vec<Completion> = (0..5)
        .map(|i| transition::decide(fence(i), 1, None, transition::Outcome::Succeeded, &policy))
        .collect();
    // About 292,000 years from now: past what PostgreSQL (year 294276) and
    // MariaDB (year 9999) can store.
    completions[2] = Completion {
        retry_in: Some(Duration::MAX),
        ..transition::decide(
            fence(2),
            1,
            None,
            transition::Outcome::Retryable("x".into()),
            &policy,
        )
    };
    let report = worker.write_results(&completions).await?;
    assert_eq!(report.applied, 5, "{report:?}");
    assert_eq!(report.dropped, 0);
    for (i, id) in ids.iter().enumerate() {
        let record = get(db, *id).await?;
        if i == 2 {
            assert_eq!(record.status, Status::Failed);
            assert!(
                record
                    .last_error
                    .starts_with("the attempt's result could not be written"),
                "{}",
                record.last_error
            );
        } else {
            assert_eq!(record.status, Status::Succeeded, "task {i}");
        }
    }
    Ok(())
}

/// A row another program wrote with headers that are not a string map is
/// failed with the reason, and the good tasks around it are delivered.
pub async fn an_unreadable_row_fails_alone<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("reader"))?;
    let mut ids = enqueue_committed(db, vec![task(1)]).await?;
    let now = B::now_sql();
    db.execute_sql(&format!(
        "INSERT INTO outbox_tasks (kind, version, payload, headers, next_attempt_at, \
         last_error, created_at, updated_at) VALUES ('{KIND}', 1, '{{}}', '{{\"retries\": 3}}', \
         {now}, '', {now}, {now})"
    ))
    .await?;
    ids.extend(enqueue_committed(db, vec![task(2), task(3)]).await?);
    let bad = TaskId::new(ids[0].get() + 1);

    let round = worker.retry_pending(10).await?;
    assert_eq!(round.succeeded, 3, "{round:?}");
    let mut delivered = handle.succeeded_ids();
    delivered.sort();
    assert_eq!(delivered, ids);
    let record = db.store().get(bad).await;
    // Reading it back fails the same way, naming the column.
    match record {
        Err(Error::Corrupt { field, .. }) => assert_eq!(field, "headers"),
        other => panic!("reading the bad row gave {other:?}"),
    }
    assert!(
        failed_as_unreadable(db, bad).await?,
        "task {bad} is not failed with the reason"
    );

    // `send` of such a row reports it failed instead of erroring forever.
    let second = enqueue_one(db, task(4)).await?;
    db.execute_sql(&format!(
        "UPDATE outbox_tasks SET headers = '{{\"retries\": 3}}' WHERE id = {}",
        second.get()
    ))
    .await?;
    assert!(matches!(worker.send(second).await, Err(Error::Failed(id)) if id == second));
    assert!(
        failed_as_unreadable(db, second).await?,
        "task {second} is not failed with the reason"
    );
    Ok(())
}

/// Whether task `id`, whose row cannot be decoded into a record, is failed
/// with a `last_error` naming its headers as the reason.
async fn failed_as_unreadable<B: TestBackend>(db: &B, id: TaskId) -> anyhow::Result<bool> {
    let failed = db
        .count(&format!(
            "outbox_tasks WHERE id = {} AND status = 'failed' \
             AND last_error LIKE 'stored row is unreadable: %headers%'",
            id.get()
        ))
        .await?;
    Ok(failed == 1)
}

/// Concurrency 2, 12 tasks, three attempts each, a handler that always fails
/// after 300 ms, and a lease (2 s) that covers a handler (1 s timeout) but not
/// a long wait in a queue: every task's handler runs exactly three times
/// before the task fails. A relay that claimed more than it could start
/// would give the waiting claims back as their lease ran down, and each
/// would have counted as an attempt.
pub async fn claims_never_spend_attempts_unrun<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::failing(usize::MAX);
    let slow = handler_fn(move |delivery: Delivery| {
        let mock = mock.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            diesel_outbox_core::Handler::handle(&mock, delivery).await
        }
    });
    let config = config("two-slots")
        .concurrency(2)
        .handler_timeout(Duration::from_secs(1))
        .lease_duration(Duration::from_secs(2));
    let worker = worker(db, registry(slow)?, config)?;
    let ids = enqueue_committed(db, (0..12).map(|n| task(n).max_attempts(3)).collect()).await?;
    run_until(worker, RelayConfig::default(), async || {
        Ok(count_status(db, Status::Failed).await? == ids.len())
    })
    .await?;
    let mut runs: HashMap<TaskId, usize> = HashMap::new();
    for delivery in handle.deliveries() {
        *runs.entry(delivery.id).or_default() += 1;
    }
    for id in &ids {
        assert_eq!(runs.get(id), Some(&3), "task {id}");
        let record = get(db, *id).await?;
        assert_eq!(record.runs(), 3, "{record:?}");
        assert!(
            record.last_error.starts_with("gave up after 3 attempts"),
            "{}",
            record.last_error
        );
    }
    Ok(())
}

/// A claim given back unstarted is not a run: the next delivery is attempt 1.
pub async fn a_released_claim_is_not_a_run<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("releaser"))?;
    let id = enqueue_one(db, task(1).max_attempts(1)).await?;
    let diesel_outbox_core::ClaimOutcome::Claimed(record) = db
        .store()
        .claim(
            id,
            &diesel_outbox_core::LeaseRequest {
                owner: "releaser".into(),
                duration: Duration::from_secs(30),
            },
        )
        .await?
    else {
        anyhow::bail!("a fresh task is claimable");
    };
    let release = transition::release(Fence {
        id,
        owner: "releaser".into(),
        attempt: record.attempts,
        ordering_key: None,
    });
    assert_eq!(db.store().complete(&[release]).await?, 1);
    worker.send(id).await?;
    assert_eq!(handle.deliveries()[0].attempt, 1);
    let record = get(db, id).await?;
    assert_eq!((record.attempts, record.released, record.runs()), (2, 1, 1));
    Ok(())
}

/// 1,000 `send_async` calls at once on a pool of 4 connections: no handle
/// reports a database error, at most `concurrency` sends run at once, the
/// rest are left to the relay, and every task is delivered exactly once.
pub async fn a_burst_of_send_async_stays_within_concurrency<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let running = Arc::new(Mutex::new((0usize, 0usize))); // (now, most)
    let calls = Calls::default();
    let handler = handler_fn({
        let (running, calls) = (running.clone(), calls.clone());
        move |delivery: Delivery| {
            let (running, calls) = (running.clone(), calls.clone());
            async move {
                {
                    let mut r = running.lock().unwrap_or_else(PoisonError::into_inner);
                    r.0 += 1;
                    r.1 = r.1.max(r.0);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                running.lock().unwrap_or_else(PoisonError::into_inner).0 -= 1;
                calls.record(delivery.id);
                Ok::<(), HandlerError>(())
            }
        }
    });
    let store = db.store_with_pool(4)?;
    let eight = config("burst").concurrency(8);
    let worker = Worker::with_config(store, registry(handler)?, eight)?;
    let ids = enqueue_committed(db, (0..1000).map(task).collect()).await?;
    let handles: Vec<_> = ids.iter().map(|id| worker.send_async(*id)).collect();
    let mut deferred = 0;
    for handle in handles {
        match handle.await? {
            Ok(()) => {}
            Err(Error::Deferred(_)) => deferred += 1,
            Err(error) => panic!("send_async failed: {error:#}"),
        }
    }
    worker.wait_idle().await;
    assert!(
        deferred > 0,
        "a burst beyond concurrency is left to the relay"
    );
    run_until(worker, RelayConfig::default(), async || {
        Ok(calls.snapshot().len() == ids.len())
    })
    .await?;
    let calls = calls.snapshot();
    for id in &ids {
        assert_eq!(calls.get(id).map(Vec::len), Some(1), "task {id}");
    }
    let most = running.lock().unwrap_or_else(PoisonError::into_inner).1;
    assert!(most <= 8, "{most} handlers ran at once with concurrency 8");
    Ok(())
}

/// A row another program wrote that cannot be read (its headers are not a
/// string map), failed by the claim as it should be, hides none of the
/// other failed tasks: listings return every row they can decode and show
/// this one as unreadable (id, status, the column and why), `inspect`
/// shows it the same way, and an operator can still discard it.
pub async fn listings_show_unreadable_rows_beside_the_others<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let (failing, _) = handler::failing_permanently();
    let worker = worker(db, registry(failing)?, config("reader"))?;
    let ids = enqueue_committed(db, vec![task(1), task(2), task(3)]).await?;
    let bad = ids[1];
    db.execute_sql(&format!(
        "UPDATE outbox_tasks SET headers = '{{\"retries\": 3}}' WHERE id = {}",
        bad.get()
    ))
    .await?;
    // The claim fails the bad row with its reason; the handler fails the others.
    worker.retry_pending(10).await?;
    let failed = db
        .store()
        .list(
            &TaskFilter::new().status(Status::Failed),
            &PageRequest::first(10)?,
        )
        .await?;
    let mut good: Vec<TaskId> = failed.records.iter().map(|record| record.id).collect();
    good.sort();
    assert_eq!(good, [ids[0], ids[2]], "{failed:?}");
    assert_eq!(failed.unreadable.len(), 1, "{failed:?}");
    let row = &failed.unreadable[0];
    assert_eq!(
        (row.id, row.status.as_str(), row.field),
        (bad, "failed", "headers")
    );
    assert!(!row.reason.is_empty());
    let order: Vec<TaskId> = failed.rows().iter().map(Listed::id).collect();
    assert_eq!(order, [ids[2], ids[1], ids[0]], "newest first, all three");

    let all = db
        .store()
        .list(&TaskFilter::new(), &PageRequest::first(2)?)
        .await?;
    assert_eq!(all.rows().len(), 2);
    assert_eq!(all.next, Some(bad), "the cursor counts the unreadable row");
    let rest = db
        .store()
        .list(&TaskFilter::new(), &PageRequest::first(2)?.after(bad))
        .await?;
    assert_eq!(
        rest.rows().iter().map(Listed::id).collect::<Vec<_>>(),
        [ids[0]]
    );

    match db.store().inspect(bad).await? {
        Listed::Unreadable(shown) => assert_eq!(&shown, row),
        other => panic!("inspect showed {other:?}"),
    }
    assert!(matches!(db.store().inspect(ids[0]).await?, Listed::Task(_)));
    db.store().discard(bad).await?;
    match db.store().inspect(bad).await? {
        Listed::Unreadable(shown) => assert_eq!(shown.status, "discarded"),
        other => panic!("inspect showed {other:?}"),
    }
    Ok(())
}
