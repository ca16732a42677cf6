//! `retry_pending`: compensation rounds shared by several workers (issue proof 7).

use std::collections::HashMap;

use chrono::{TimeDelta, Utc};
use diesel_async::AsyncConnection;
use outbox_core::{Registry, Status, Store, Task, TaskId};

use super::support::{KIND, config, get, task, worker};
use crate::{TestBackend, handler};

/// 1,000 due tasks, two workers running a round concurrently with batch 100:
/// every task is handled exactly once, a failing kind does not stop the
/// round, and tasks not yet due are left alone.
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

    let (good, good_handle) = handler::recording();
    let (broken, broken_handle) = handler::failing(usize::MAX);
    let registry = Registry::builder()
        .handler(KIND, 1, good)
        .handler("order.broken", 1, broken)
        .build()?;
    let first = worker(db, registry.clone(), config("worker-1"))?;
    let second = worker(db, registry, config("worker-2"))?;
    let (a, b) = tokio::join!(first.retry_pending(100), second.retry_pending(100));
    let (a, b) = (a?, b?);

    let mut seen: HashMap<TaskId, usize> = HashMap::new();
    for delivery in good_handle.deliveries() {
        *seen.entry(delivery.id).or_default() += 1;
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
    assert!(
        a.claimed > 0 && b.claimed > 0,
        "one worker did all the work: {a:?} {b:?}"
    );

    for &id in &ids[..1000] {
        assert_eq!(get(db, id).await?.status, Status::Succeeded);
    }
    for &id in &ids[1000..1010] {
        let record = get(db, id).await?;
        assert_eq!((record.status, record.attempts), (Status::Pending, 1));
        assert!(record.last_error.contains(handler::INJECTED_FAILURE));
    }
    for &id in &ids[1010..] {
        let record = get(db, id).await?;
        assert_eq!((record.status, record.attempts), (Status::Pending, 0));
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
