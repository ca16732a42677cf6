//! Ordering keys under lifecycle v2: only a key's head may run, a failed
//! head stops its key and no other, and the operator's way out (discard,
//! requeue) lets it move on in order.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use diesel_async::AsyncConnection;
use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, Error, LeaseRequest, Maintenance, Registry, Rescued, Status, Store,
    Task, TaskId, Worker,
    transition::{self, Fence, Outcome},
};

use super::support::{KIND, config, enqueue_committed, get, immediate_retry, task, worker};
use crate::{TestBackend, handler};

/// Runs rounds until one claims nothing.
async fn rounds<S: Store>(worker: &Worker<S>) -> anyhow::Result<()> {
    for _ in 0..20 {
        let report = worker.retry_pending(10).await?;
        if report.claimed == 0 && report.expired == 0 {
            return Ok(());
        }
    }
    anyhow::bail!("rounds kept finding work")
}

async fn statuses<B: TestBackend>(db: &B, ids: &[TaskId]) -> anyhow::Result<Vec<Status>> {
    let mut statuses = Vec::with_capacity(ids.len());
    for &id in ids {
        statuses.push(get(db, id).await?.status);
    }
    Ok(statuses)
}

fn lease(owner: &str, duration: Duration) -> LeaseRequest {
    LeaseRequest {
        owner: owner.to_owned(),
        duration,
    }
}

fn claimed(outcome: ClaimOutcome) -> anyhow::Result<diesel_outbox_core::Record> {
    match outcome {
        ClaimOutcome::Claimed(record) => Ok(*record),
        other => anyhow::bail!("expected a claim, got {other:?}"),
    }
}

/// A head that failed for good keeps its key's later tasks blocked, and only
/// that key's: other keys and keyless tasks flow. Discarding the head lets
/// the key move on, its tasks in order, and the key's count row goes once
/// the key has no open task. A key counts as stopped only while a task
/// waits behind its failed head.
pub async fn a_failed_head_blocks_its_key_and_no_other<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_committed(
        db,
        vec![
            Task::new("order.rejected", 1, "{}").ordering_key("a"),
            task(2).ordering_key("a"),
            task(3).ordering_key("a"),
            task(4).ordering_key("b"),
            task(5).ordering_key("b"),
            task(6),
        ],
    )
    .await?;
    use Status::{Available, Blocked, Discarded, Failed, Succeeded};
    assert_eq!(
        statuses(db, &ids).await?,
        [Available, Blocked, Blocked, Available, Blocked, Available]
    );
    let (good, handle) = handler::recording();
    let (rejecting, _) = handler::failing_permanently();
    let registry = Registry::builder()
        .handler(KIND, 1, good)
        .handler("order.rejected", 1, rejecting)
        .build()?;
    let worker = worker(db, registry, config("w"))?;
    rounds(&worker).await?;
    assert_eq!(
        statuses(db, &ids).await?,
        [Failed, Blocked, Blocked, Succeeded, Succeeded, Succeeded]
    );
    let delivered = handle.succeeded_ids();
    assert_eq!(delivered.len(), 3, "{delivered:?}");
    let position = |id| delivered.iter().position(|d| *d == id);
    assert!(position(ids[3]) < position(ids[4]), "key b out of order");
    for &id in &ids[1..3] {
        assert_eq!(
            get(db, id).await?.attempts,
            0,
            "task {id} ran behind a failed head"
        );
    }
    let stats = db.store().stats().await?;
    assert_eq!((stats.failed, stats.blocked), (1, 2), "{stats:?}");
    assert_eq!(stats.stopped_keys, 1, "key a is stopped: {stats:?}");

    db.store().discard(ids[0]).await?;
    assert_eq!(db.store().stats().await?.stopped_keys, 0);
    assert_eq!(
        statuses(db, &ids[..3]).await?,
        [Discarded, Available, Blocked]
    );
    rounds(&worker).await?;
    let delivered = handle.succeeded_ids();
    assert_eq!(&delivered[3..], [ids[1], ids[2]], "key a out of order");
    assert_eq!(db.count("outbox_ordering_keys").await?, 0);

    // A key whose failed head has nothing behind it stops nothing yet; it
    // counts once a task comes to wait behind it, once however many wait.
    let alone = enqueue_committed(
        db,
        vec![Task::new("order.rejected", 1, "{}").ordering_key("c")],
    )
    .await?;
    rounds(&worker).await?;
    assert_eq!(statuses(db, &alone).await?, [Failed]);
    assert_eq!(db.store().stats().await?.stopped_keys, 0);
    let behind = enqueue_committed(
        db,
        vec![task(7).ordering_key("c"), task(8).ordering_key("c")],
    )
    .await?;
    assert_eq!(statuses(db, &behind).await?, [Blocked, Blocked]);
    assert_eq!(db.store().stats().await?.stopped_keys, 1);
    Ok(())
}

/// An expired head fails and stops its key; `requeue` clears its deadline,
/// so it really runs again, still ahead of the key's later task.
pub async fn requeue_of_an_expired_head_delivers_it_first<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let expired = Utc::now() - TimeDelta::seconds(1);
    let ids = enqueue_committed(
        db,
        vec![
            task(1).ordering_key("k").expires_at(expired),
            task(2).ordering_key("k"),
        ],
    )
    .await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, super::support::registry(mock)?, config("w"))?;
    let report = worker.retry_pending(10).await?;
    assert_eq!((report.expired, report.claimed), (1, 0), "{report:?}");
    let head = get(db, ids[0]).await?;
    assert_eq!(head.status, Status::Failed);
    assert_eq!(head.last_error, transition::EXPIRED_ERROR);
    assert_eq!(get(db, ids[1]).await?.status, Status::Blocked);

    db.store().requeue(ids[0]).await?;
    let requeued = get(db, ids[0]).await?;
    assert_eq!(
        (requeued.status, requeued.task.expires_at),
        (Status::Available, None)
    );
    rounds(&worker).await?;
    assert_eq!(handle.succeeded_ids(), ids);
    Ok(())
}

/// While a key's head is running, nothing else of the key is claimable, by
/// batch or by id, and no maintenance step changes that; its success lets
/// the next task go.
pub async fn a_task_never_runs_while_its_keys_head_runs<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_committed(
        db,
        vec![task(1).ordering_key("k"), task(2).ordering_key("k")],
    )
    .await?;
    let store = db.store();
    let head = claimed(
        store
            .claim(ids[0], &lease("w", Duration::from_secs(30)))
            .await?,
    )?;
    let batch = BatchRequest {
        lease: lease("other", Duration::from_secs(30)),
        limit: 10,
        after: None,
        due_by: None,
    };
    assert!(store.claim_due(&batch).await?.is_empty());
    assert_eq!(
        store.claim(ids[1], &batch.lease).await?,
        ClaimOutcome::Blocked
    );
    assert_eq!(
        (store.promote(100).await?, store.rescue(100).await?.moved),
        (0, 0)
    );
    assert!(store.claim_due(&batch).await?.is_empty());

    let fence = Fence {
        id: head.id,
        owner: "w".into(),
        attempt: head.attempts,
        ordering_key: head.task.ordering_key.clone(),
    };
    let done = transition::decide(fence, 1, None, Outcome::Succeeded, &immediate_retry());
    assert_eq!(store.complete(&[done]).await?, 1);
    let next = store.claim_due(&batch).await?;
    assert_eq!(next.iter().map(|r| r.id).collect::<Vec<_>>(), [ids[1]]);
    Ok(())
}

/// A running task whose lease lapsed is rescued to available with the
/// reason in `last_error`, or failed when its runs reached `max_attempts`;
/// a live lease is never rescued, and a blocked successor stays blocked.
pub async fn lapsed_leases_are_rescued<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_committed(
        db,
        vec![
            task(1).ordering_key("k"),
            task(2).ordering_key("k"),
            task(3).max_attempts(1),
            task(4),
        ],
    )
    .await?;
    let store = db.store();
    for &id in &ids[..3] {
        if id != ids[1] {
            claimed(store.claim(id, &lease("gone", Duration::ZERO)).await?)?;
        }
    }
    claimed(
        store
            .claim(ids[3], &lease("alive", Duration::from_secs(30)))
            .await?,
    )?;
    let rescued = store.rescue(100).await?;
    assert_eq!((rescued.moved, rescued.failed), (2, vec![ids[2]]));
    let head = get(db, ids[0]).await?;
    assert_eq!(
        (head.status, head.attempts, head.lease.is_none()),
        (Status::Available, 1, true)
    );
    assert_eq!(head.last_error, transition::LAPSED_ERROR);
    assert_eq!(get(db, ids[1]).await?.status, Status::Blocked);
    let exhausted = get(db, ids[2]).await?;
    assert_eq!(exhausted.status, Status::Failed);
    assert!(exhausted.finished_at.is_some());
    assert!(
        exhausted.last_error.starts_with("gave up after 1 attempts"),
        "{}",
        exhausted.last_error
    );
    assert_eq!(get(db, ids[3]).await?.status, Status::Running);
    assert_eq!(store.rescue(100).await?, Rescued::default());
    Ok(())
}

/// A task scheduled for later waits: no claim sees it until the promotion
/// step makes it available once due.
pub async fn waiting_tasks_are_promoted_once_due<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let due = Utc::now() + TimeDelta::seconds(1);
    let id = enqueue_committed(db, vec![task(1).not_before(due)]).await?[0];
    assert_eq!(get(db, id).await?.status, Status::Waiting);
    let store = db.store();
    let batch = BatchRequest {
        lease: lease("w", Duration::from_secs(30)),
        limit: 10,
        after: None,
        due_by: None,
    };
    assert!(store.claim_due(&batch).await?.is_empty());
    assert_eq!(store.promote(100).await?, 0);
    let next = store.next_due().await?.unwrap_or_default();
    assert!(next <= Duration::from_secs(1), "next due in {next:?}");
    crate::wait::eventually(async || Ok(store.promote(100).await? == 1)).await?;
    assert!(
        Utc::now() >= due - TimeDelta::milliseconds(50),
        "promoted early"
    );
    assert_eq!(get(db, id).await?.status, Status::Available);
    assert_eq!(store.claim_due(&batch).await?.len(), 1);
    Ok(())
}

/// Two transactions enqueueing one key at the same time take turns: the
/// second waits for the first to commit, and its task is blocked behind the
/// first one's, so a key's order is its commit order.
pub async fn concurrent_enqueues_of_one_key_take_turns<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let store = db.store();
    let (mut first, mut second) = (db.connect().await?, db.connect().await?);
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let (commit_tx, commit_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = first.transaction::<TaskId, anyhow::Error, _>(async |tx| {
        let id = store.enqueue(tx, task(1).ordering_key("k")).await?;
        entered_tx.send(()).ok();
        commit_rx.await.ok();
        Ok(id)
    });
    let contender = async {
        entered_rx.await?;
        second
            .transaction::<TaskId, anyhow::Error, _>(async |tx| {
                let pending = store.enqueue(tx, task(2).ordering_key("k"));
                tokio::pin!(pending);
                if tokio::time::timeout(Duration::from_millis(200), &mut pending)
                    .await
                    .is_ok()
                {
                    anyhow::bail!("the second enqueue of the key did not wait for the first");
                }
                commit_tx.send(()).ok();
                Ok(pending.await?)
            })
            .await
    };
    let (held, contended) = tokio::join!(holder, contender);
    let (held, contended) = (held?, contended?);
    assert!(held < contended, "{held} then {contended}");
    assert_eq!(
        statuses(db, &[held, contended]).await?,
        [Status::Available, Status::Blocked]
    );
    Ok(())
}

/// A task of a batch whose `dedup_key` is already held inserts nothing and
/// gives its place back: the key's next task of the batch heads the key.
pub async fn a_held_dedup_key_leaves_the_head_to_the_next_task<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let held = enqueue_committed(db, vec![task(1).dedup_key("d")]).await?[0];
    let ids = enqueue_committed(
        db,
        vec![
            task(2).ordering_key("k").dedup_key("d"),
            task(3).ordering_key("k"),
        ],
    )
    .await?;
    assert_eq!(ids[0], held);
    assert_eq!(get(db, ids[1]).await?.status, Status::Available);
    assert_eq!(
        db.count("outbox_ordering_keys WHERE open_tasks = 1")
            .await?,
        1
    );
    Ok(())
}

/// `discard` gives up an available, waiting, blocked or failed task; it
/// refuses a running or finished one, naming its status, and an unknown id.
pub async fn discard_refuses_running_and_finished_tasks<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let later = Utc::now() + TimeDelta::hours(1);
    let ids = enqueue_committed(db, vec![task(1), task(2), task(3).not_before(later)]).await?;
    let store = db.store();
    claimed(
        store
            .claim(ids[0], &lease("w", Duration::from_secs(30)))
            .await?,
    )?;
    let running = store.discard(ids[0]).await;
    assert!(
        matches!(
            running,
            Err(Error::NotDiscardable {
                status: Status::Running,
                ..
            })
        ),
        "{running:?}"
    );
    let (mock, handle) = handler::recording();
    let worker = worker(db, super::support::registry(mock)?, config("w"))?;
    worker.send(ids[1]).await?;
    let finished = store.discard(ids[1]).await;
    assert!(
        matches!(
            finished,
            Err(Error::NotDiscardable {
                status: Status::Succeeded,
                ..
            })
        ),
        "{finished:?}"
    );
    store.discard(ids[2]).await?;
    let discarded = get(db, ids[2]).await?;
    assert_eq!(discarded.status, Status::Discarded);
    assert!(discarded.finished_at.is_some());
    let sent = worker.send(ids[2]).await;
    assert!(matches!(sent, Err(Error::Discarded(_))), "{sent:?}");
    assert_eq!(handle.calls(), 1, "a discarded task reached its handler");
    let missing = store.discard(TaskId::new(987_654_321)).await;
    assert!(matches!(missing, Err(Error::NotFound(_))), "{missing:?}");
    Ok(())
}

/// Retention never purges a failed task that holds its ordering key (its
/// successors would overtake it unnoticed); other finished tasks go.
pub async fn purge_keeps_a_failed_head<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_committed(
        db,
        vec![
            task(1).ordering_key("k"),
            task(2).ordering_key("k"),
            task(3),
        ],
    )
    .await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, super::support::registry(mock)?, config("w"))?;
    handle.fail_permanently();
    assert!(worker.send(ids[0]).await.is_err());
    assert!(worker.send(ids[2]).await.is_err());
    let purged = db.store().purge_finished(Duration::ZERO, 100).await?;
    assert_eq!(purged, 1);
    assert_eq!(get(db, ids[0]).await?.status, Status::Failed);
    assert!(matches!(
        db.store().get(ids[2]).await,
        Err(Error::NotFound(_))
    ));
    Ok(())
}

/// `stats` counts every status exactly on a small table.
pub async fn stats_count_every_status<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let later = Utc::now() + TimeDelta::hours(1);
    let ids = enqueue_committed(
        db,
        vec![
            task(1).ordering_key("k"),
            task(2).ordering_key("k"),
            task(3),
            task(4).not_before(later),
            task(5),
            task(6),
            task(7),
        ],
    )
    .await?;
    let store = db.store();
    claimed(
        store
            .claim(ids[0], &lease("w", Duration::from_secs(30)))
            .await?,
    )?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, super::support::registry(mock)?, config("w"))?;
    worker.send(ids[4]).await?;
    handle.fail_permanently();
    assert!(worker.send(ids[5]).await.is_err());
    store.discard(ids[6]).await?;
    let stats = store.stats().await?;
    for (status, count) in stats.by_status() {
        assert_eq!(count, 1, "{status}: {stats:?}");
    }
    assert_eq!(stats.backlog(), 4);
    assert!(stats.oldest_due_age.is_some());
    // Key k waits behind its running head: not stopped.
    assert_eq!(stats.stopped_keys, 0, "{stats:?}");
    Ok(())
}
