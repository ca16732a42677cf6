//! `retry_pending`: compensation rounds shared by several workers (issue proof 7).

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use chrono::{TimeDelta, Utc};
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use diesel_outbox_core::{Registry, Status, Store, Task, TaskId, handler_fn};

use super::support::{KIND, config, get, task, worker};
use crate::{TestBackend, handler};

/// 1,000 due tasks, two workers running a round concurrently with batch 100:
/// every task is handled exactly once, a failing kind does not stop the
/// round, tasks not yet due are left alone, and both workers take part.
///
/// Each worker's first delivery waits until the other worker has one
/// running too: no worker can finish its first batch, let alone the whole
/// round, before the other claimed some, however the two are scheduled.
/// (No row lock is held while a handler runs, so the waiting worker never
/// holds the other's claim back.)
pub async fn retry_rounds_share_work_exactly_once<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let later = Utc::now() + TimeDelta::hours(1);
    let mut tasks: Vec<Task> = (0..1000).map(task).collect();
    tasks.extend((0..10).map(|n| Task::new("order.broken", 1, format!("{n}"))));
    tasks.extend((0..20).map(|n| task(n).not_before(later)));
    let store = db.store();
    let mut conn = db.connect().await?;
    let ids = conn
        .transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue_many(tx, tasks).await?))
        .await?;

    let handled: Arc<std::sync::Mutex<Vec<TaskId>>> = Arc::default();
    let both_running = Arc::new(tokio::sync::Barrier::new(2));
    let (broken, broken_handle) = handler::failing(usize::MAX);
    let registry_of = |worker_calls: Arc<AtomicUsize>| {
        let (handled, both_running) = (Arc::clone(&handled), Arc::clone(&both_running));
        Registry::builder()
            .handler(
                KIND,
                1,
                handler_fn(move |delivery: diesel_outbox_core::Delivery| {
                    let (handled, both_running) = (Arc::clone(&handled), Arc::clone(&both_running));
                    let first = worker_calls.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        if first {
                            both_running.wait().await;
                        }
                        handled
                            .lock()
                            .map_err(|_| anyhow::anyhow!("the log was poisoned"))?
                            .push(delivery.id);
                        Ok(())
                    }
                }),
            )
            .handler("order.broken", 1, broken.clone())
            .build()
    };
    let (calls_1, calls_2) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let first = worker(db, registry_of(Arc::clone(&calls_1))?, config("worker-1"))?;
    let second = worker(db, registry_of(Arc::clone(&calls_2))?, config("worker-2"))?;
    let (a, b) = tokio::join!(first.retry_pending(100), second.retry_pending(100));
    let (a, b) = (a?, b?);
    assert!(
        calls_1.load(Ordering::SeqCst) > 0 && calls_2.load(Ordering::SeqCst) > 0,
        "one worker did all the work: {a:?} {b:?}"
    );

    let mut seen: HashMap<TaskId, usize> = HashMap::new();
    let handled = handled
        .lock()
        .map_err(|_| anyhow::anyhow!("the log was poisoned"))?
        .clone();
    for id in handled {
        *seen.entry(id).or_default() += 1;
    }
    assert_eq!(seen.len(), 1000, "not every due task was handled");
    assert!(seen.values().all(|&n| n == 1), "a task was handled twice");
    assert!(ids[..1000].iter().all(|id| seen.contains_key(id)));
    assert_eq!(
        broken_handle.calls(),
        10,
        "the failing kind was not tried once each"
    );
    assert_eq!(a.claimed + b.claimed, 1010);
    assert_eq!(a.succeeded + b.succeeded, 1000);
    assert_eq!(a.retried + b.retried, 10);
    assert!(a.claimed > 0 && b.claimed > 0, "{a:?} {b:?}");

    for &id in &ids[..1000] {
        assert_eq!(get(db, id).await?.status, Status::Succeeded);
    }
    for &id in &ids[1000..1010] {
        let record = get(db, id).await?;
        assert_eq!((record.status, record.attempts), (Status::Available, 1));
        assert!(record.last_error.contains(handler::INJECTED_FAILURE));
    }
    for &id in &ids[1010..] {
        let record = get(db, id).await?;
        assert_eq!((record.status, record.attempts), (Status::Waiting, 0));
        assert!(record.lease.is_none());
    }
    Ok(())
}

/// A round marks expired tasks failed without calling their handler, and
/// counts them.
pub async fn retry_round_expires_overdue_tasks<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let past = Utc::now() - TimeDelta::seconds(1);
    let ids = super::support::enqueue_committed(
        db,
        vec![task(1).expires_at(past), task(2), task(3).expires_at(past)],
    )
    .await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, super::support::registry(mock)?, config("w"))?;
    let report = worker.retry_pending(10).await?;
    assert_eq!((report.expired, report.succeeded), (2, 1));
    assert_eq!(handle.succeeded_ids(), [ids[1]]);
    for id in [ids[0], ids[2]] {
        let record = get(db, id).await?;
        assert_eq!((record.status, record.attempts), (Status::Failed, 0));
        assert!(record.finished_at.is_some());
    }
    Ok(())
}

/// 8 writers enqueue batches while two workers run rounds: no database error
/// (deadlock or lock timeout) reaches a caller, every task is handled exactly
/// once, and each delivery carries the payload enqueued under its id.
pub async fn writers_and_workers_run_side_by_side<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    const WRITERS: usize = 8;
    const BATCHES: usize = 10;
    const BATCH: usize = 50;
    let (mock, handle) = handler::recording();
    let registry = super::support::registry(mock)?;
    let workers = [
        worker(db, registry.clone(), config("worker-1"))?,
        worker(db, registry, config("worker-2"))?,
    ];
    let writing = AtomicUsize::new(WRITERS);
    let write = async |writer: usize| -> anyhow::Result<Vec<(TaskId, Vec<u8>)>> {
        let store = db.store();
        let mut conn = db.connect().await?;
        let mut written = Vec::new();
        for batch in 0..BATCHES {
            let tasks: Vec<Task> = (0..BATCH)
                .map(|n| task(writer * 100_000 + batch * 1_000 + n))
                .collect();
            let payloads: Vec<Vec<u8>> = tasks.iter().map(|t| t.payload.clone()).collect();
            let ids = conn
                .transaction::<_, anyhow::Error, _>(async |tx| {
                    Ok(store.enqueue_many(tx, tasks).await?)
                })
                .await?;
            written.extend(ids.into_iter().zip(payloads));
        }
        writing.fetch_sub(1, Ordering::SeqCst);
        Ok(written)
    };
    let drain = async |worker: &diesel_outbox_core::Worker<B::Store>| -> anyhow::Result<u64> {
        let mut handled = 0;
        loop {
            let done = writing.load(Ordering::SeqCst) == 0;
            let report = worker.retry_pending(100).await?;
            handled += report.succeeded;
            // Once every writer finished, one empty round means nothing is left.
            if done && report.claimed == 0 {
                return Ok(handled);
            }
            tokio::task::yield_now().await;
        }
    };
    let writers = futures_util::future::try_join_all((0..WRITERS).map(write));
    let drains = futures_util::future::try_join(drain(&workers[0]), drain(&workers[1]));
    let (written, (first, second)) = futures_util::future::try_join(writers, drains).await?;

    let expected: HashMap<TaskId, Vec<u8>> = written.into_iter().flatten().collect();
    assert_eq!(expected.len(), WRITERS * BATCHES * BATCH, "ids were reused");
    let deliveries = handle.deliveries();
    assert_eq!(
        deliveries.len(),
        expected.len(),
        "a task was lost or handled twice"
    );
    assert_eq!(first + second, expected.len() as u64);
    let mut seen = HashMap::new();
    for delivery in deliveries {
        assert_eq!(
            expected.get(&delivery.id).map(Vec::as_slice),
            Some(delivery.payload()),
            "task {} carried another task's payload",
            delivery.id
        );
        *seen.entry(delivery.id).or_insert(0) += 1;
    }
    assert!(seen.values().all(|&n| n == 1), "a task was handled twice");
    Ok(())
}

/// With batch size 1 and retries due at once, each task is still tried once
/// per round: the round moves on instead of retrying the same task forever.
pub async fn a_round_tries_each_task_once<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    super::support::enqueue_committed(db, vec![task(1), task(2), task(3)]).await?;
    let (mock, handle) = handler::failing(usize::MAX);
    let worker = worker(db, super::support::registry(mock)?, config("w"))?;
    let report = tokio::time::timeout(Duration::from_secs(10), worker.retry_pending(1))
        .await
        .map_err(|_| anyhow::anyhow!("the round did not end"))??;
    assert_eq!((report.claimed, report.retried), (3, 3));
    assert_eq!(handle.calls(), 3);
    Ok(())
}

/// A batch whose write lets an ordering key move on is written before the
/// next claim, so the key's next task, made available by that write and
/// above the batch's ids, is delivered in the same round (batch size 2: the
/// head and a keyless task, then the key's second task). Claimed beside the
/// write, it would usually still be blocked, and the round would end
/// without it (on PostgreSQL and MySQL/MariaDB; SQLite's writes take turns
/// anyway).
pub async fn a_round_delivers_the_key_successor_its_write_released<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let (mock, handle) = handler::recording();
    let worker = worker(db, super::support::registry(mock)?, config("w"))?;
    // Several rounds, since a claim beside the write would only usually
    // miss the successor.
    for round in 0..5 {
        let ids = super::support::enqueue_committed(
            db,
            vec![
                task(1).ordering_key("k"),
                task(2),
                task(3).ordering_key("k"),
            ],
        )
        .await?;
        assert_eq!(get(db, ids[2]).await?.status, Status::Blocked);
        let report = worker.retry_pending(2).await?;
        assert_eq!(report.succeeded, 3, "round {round}: {report:?}");
        let mut delivered = handle.succeeded_ids()[3 * round..].to_vec();
        delivered.sort();
        assert_eq!(delivered, ids, "round {round}");
    }
    Ok(())
}

/// A row another session holds locked is skipped, not waited for.
pub async fn a_round_skips_rows_locked_elsewhere<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = super::support::enqueue_committed(db, vec![task(1), task(2), task(3)]).await?;
    let mut locker = db.connect().await?;
    locker.batch_execute("BEGIN").await?;
    locker
        .batch_execute(&B::names().render(&format!(
            "SELECT id FROM outbox_tasks WHERE id = {} FOR UPDATE",
            ids[0].get()
        )))
        .await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, super::support::registry(mock)?, config("w"))?;
    let report = tokio::time::timeout(Duration::from_secs(5), worker.retry_pending(10))
        .await
        .map_err(|_| anyhow::anyhow!("the round waited for a locked row"))??;
    assert_eq!(report.claimed, 2);
    assert_eq!(handle.succeeded_ids(), &ids[1..]);
    locker.batch_execute("ROLLBACK").await?;
    Ok(())
}

/// A claim with less lease left than the handler timeout is given back
/// unstarted: due again at once, attempt counted, error untouched.
pub async fn claims_near_their_lease_end_are_released<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = super::support::enqueue_committed(db, vec![task(1), task(2), task(3)]).await?;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    // Each call takes most of the handler timeout, so with one at a time the
    // third claim has too little lease left to start.
    let slow = handler_fn(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        async {
            tokio::time::sleep(Duration::from_millis(90)).await;
            Ok(())
        }
    });
    let config = config("w")
        .handler_timeout(Duration::from_millis(100))
        .lease_duration(Duration::from_millis(200))
        .concurrency(1);
    let worker = worker(db, super::support::registry(slow)?, config)?;
    let report = worker.retry_pending(10).await?;
    assert!(report.released >= 1, "{report:?}");
    assert_eq!(calls.load(Ordering::SeqCst) as u64 + report.released, 3);
    let last = get(db, ids[2]).await?;
    assert_eq!((last.status, last.attempts), (Status::Available, 1));
    assert_eq!(last.last_error, "");
    assert!(last.lease.is_none());
    Ok(())
}
