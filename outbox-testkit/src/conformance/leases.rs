//! Concurrent sends and lease takeover with fencing (issue proofs 5 and 6).

use std::time::Duration;

use anyhow::Context as _;
use futures_util::{StreamExt, stream::FuturesUnordered};

use diesel_outbox_core::{
    ClaimOutcome, Error, LeaseRequest, Status, Store,
    transition::{self, Completion, Outcome},
};

use super::support::{config, enqueue_one, get, immediate_retry, registry, task, worker};
use crate::{TestBackend, handler};

/// 16 concurrent `send`s of one task with a slow handler: it runs exactly
/// once; the 15 others are told `Busy` while it runs.
pub async fn concurrent_sends_run_the_handler_once<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::blocking();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = enqueue_one(db, task(1)).await?;
    let mut sends: FuturesUnordered<_> = (0..16).map(|_| worker.send_async(id)).collect();
    // While the one claimed send is held inside the handler, nothing can
    // succeed, so the first 15 answers must all be `Busy`.
    handle.wait_for_blocked(1).await;
    for _ in 0..15 {
        let answer = sends.next().await.context("a send vanished")??;
        assert!(matches!(answer, Err(Error::Busy { .. })), "{answer:?}");
    }
    handle.release();
    let last = sends.next().await.context("the holding send vanished")??;
    assert!(last.is_ok(), "{last:?}");
    assert_eq!(handle.calls(), 1, "the handler ran more than once");
    let record = get(db, id).await?;
    assert_eq!((record.status, record.attempts), (Status::Succeeded, 1));
    Ok(())
}

fn lease(owner: &str, duration: Duration) -> LeaseRequest {
    LeaseRequest {
        owner: owner.to_owned(),
        duration,
    }
}

fn succeeded(record: &diesel_outbox_core::Record, owner: &str) -> Completion {
    transition::decide(
        transition::Fence {
            id: record.id,
            owner: owner.into(),
            attempt: record.attempts,
            ordering_key: record.task.ordering_key.clone(),
        },
        record.attempts,
        None,
        Outcome::Succeeded,
        &immediate_retry(),
    )
}

fn claimed(outcome: ClaimOutcome) -> anyhow::Result<diesel_outbox_core::Record> {
    match outcome {
        ClaimOutcome::Claimed(record) => Ok(*record),
        other => anyhow::bail!("expected a claim, got {other:?}"),
    }
}

/// A lapsed lease is taken over by another worker, and the first worker's
/// late completion changes nothing, before or after the second one finishes.
pub async fn lease_takeover_fences_the_late_writer<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let store = db.store();
    let id = enqueue_one(db, task(1)).await?;

    // Worker A claims with a lease that lapses at once (a stalled process).
    let by_a = claimed(store.claim(id, &lease("worker-a", Duration::ZERO)).await?)?;
    assert_eq!(by_a.attempts, 1);
    // Worker B takes it over.
    let by_b = claimed(
        store
            .claim(id, &lease("worker-b", Duration::from_secs(30)))
            .await?,
    )?;
    assert_eq!(by_b.attempts, 2);
    assert_eq!(
        by_b.lease.as_ref().map(|l| l.owner.as_str()),
        Some("worker-b")
    );
    // A live lease is not taken over.
    let third = store
        .claim(id, &lease("worker-c", Duration::from_secs(30)))
        .await?;
    assert!(matches!(third, ClaimOutcome::Leased { .. }), "{third:?}");

    // A's late completion while B holds the lease: nothing changes.
    assert_eq!(store.complete(&[succeeded(&by_a, "worker-a")]).await?, 0);
    let during = get(db, id).await?;
    assert_eq!(during.status, Status::Running);
    assert_eq!(during.attempts, 2);
    assert_eq!(during.lease, by_b.lease);

    // B finishes; A's completion after that changes nothing either.
    let mut failed_by_b = succeeded(&by_b, "worker-b");
    failed_by_b.status = Status::Failed;
    failed_by_b.last_error = Some("b's verdict".into());
    assert_eq!(store.complete(&[failed_by_b]).await?, 1);
    let after_b = get(db, id).await?;
    assert_eq!(store.complete(&[succeeded(&by_a, "worker-a")]).await?, 0);
    let after_a = get(db, id).await?;
    assert_eq!(after_a, after_b, "the late writer changed the row");
    assert_eq!(after_a.status, Status::Failed);
    assert_eq!(after_a.last_error, "b's verdict");
    Ok(())
}

/// A hung handler holds its task only until its timeout: meanwhile other
/// workers are refused, then the attempt is a recorded retryable failure and
/// another worker delivers the task.
pub async fn hung_handler_is_cut_and_another_worker_delivers<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let (slow, slow_handle) = handler::blocking();
    let (fast, fast_handle) = handler::recording();
    let id = enqueue_one(db, task(1)).await?;
    // Worker A: a 100 ms handler timeout and a 200 ms lease.
    let a = worker(
        db,
        registry(slow)?,
        config("worker-a")
            .handler_timeout(Duration::from_millis(100))
            .lease_duration(Duration::from_millis(200)),
    )?;
    let b = worker(db, registry(fast)?, config("worker-b"))?;
    // A claims first and hangs in its handler.
    let sending = a.send_async(id);
    slow_handle.wait_for_blocked(1).await;
    // B is refused while A's lease is live...
    assert!(matches!(b.send(id).await, Err(Error::Busy { .. })));
    // ...and A's handler is cut at its timeout, recording a retryable failure.
    let a_result = sending.await?;
    assert!(
        matches!(
            a_result,
            Err(Error::Handler {
                will_retry: true,
                ..
            })
        ),
        "{a_result:?}"
    );
    // With the retry due at once, B now delivers it.
    b.send(id).await?;
    assert_eq!(fast_handle.calls(), 1);
    let record = get(db, id).await?;
    assert_eq!((record.status, record.attempts), (Status::Succeeded, 2));
    Ok(())
}

/// The same worker re-claims after its own lease lapsed: the older attempt's
/// completion is fenced out by the attempt number alone.
pub async fn stale_attempt_of_the_same_owner_is_fenced<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let store = db.store();
    let id = enqueue_one(db, task(1)).await?;
    let first = claimed(store.claim(id, &lease("w", Duration::ZERO)).await?)?;
    let second = claimed(
        store
            .claim(id, &lease("w", Duration::from_secs(30)))
            .await?,
    )?;
    assert_eq!((first.attempts, second.attempts), (1, 2));
    assert_eq!(store.complete(&[succeeded(&first, "w")]).await?, 0);
    let row = get(db, id).await?;
    assert_eq!((row.status, row.attempts), (Status::Running, 2));
    assert_eq!(row.lease, second.lease);
    Ok(())
}

/// A completion with the right attempt but another owner changes nothing.
pub async fn completion_by_another_owner_is_fenced<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let store = db.store();
    let id = enqueue_one(db, task(1)).await?;
    let by_a = claimed(
        store
            .claim(id, &lease("a", Duration::from_secs(30)))
            .await?,
    )?;
    assert_eq!(store.complete(&[succeeded(&by_a, "b")]).await?, 0);
    let row = get(db, id).await?;
    assert_eq!(row.status, Status::Running);
    assert_eq!(row.lease, by_a.lease);
    Ok(())
}
