//! Settings at their bounds: the longest durations and the largest batch
//! that validation allows work against the database, without an error.

use std::time::Duration;

use diesel_outbox_core::{
    Error, Maintenance, RelayConfig, RetryPolicy, Status, WorkerConfig,
    limits::{MAX_BATCH_SIZE, MAX_CONCURRENCY, MAX_DURATION},
};
use tokio_util::sync::CancellationToken;

use super::{
    relay::spawn_relay,
    support::{config, enqueue_batch, enqueue_one, get, registry, task, worker},
};
use crate::{TestBackend, handler};

/// A worker whose every duration is at its bound, with retries waiting the
/// longest delay.
fn longest(owner: &str) -> anyhow::Result<WorkerConfig> {
    Ok(config(owner)
        .handler_timeout(MAX_DURATION / 2)
        .lease_duration(MAX_DURATION)
        .concurrency(MAX_CONCURRENCY)
        .retry(RetryPolicy::new(MAX_DURATION, MAX_DURATION, 0.0)?))
}

/// `send` with the longest lease and retry delay: the claim lasts and the
/// retry waits exactly that long on the database clock, with no error.
pub async fn longest_durations_work_end_to_end<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::blocking();
    handle.fail_next(1);
    let worker = worker(db, registry(mock)?, longest("w")?)?;
    let id = enqueue_one(db, task(1)).await?;
    let mut sending = worker.send_async(id);
    tokio::select! {
        () = handle.wait_for_blocked(1) => {}
        sent = &mut sending => anyhow::bail!("send ended before its handler ran: {sent:?}"),
    }
    let claimed = get(db, id).await?;
    let lease = claimed.lease.as_ref().map(|lease| lease.expires_at);
    // The lease is taken in one statement on the database clock, so it ends
    // exactly the lease duration after the claim.
    assert_eq!(
        lease.map(|until| until - claimed.updated_at),
        Some(chrono::TimeDelta::from_std(MAX_DURATION)?),
        "lease {lease:?} claimed at {}",
        claimed.updated_at
    );
    handle.release();
    let sent = sending.await?;
    assert!(
        matches!(
            sent,
            Err(Error::Handler {
                will_retry: true,
                attempt: 1,
                ..
            })
        ),
        "{sent:?}"
    );
    let record = get(db, id).await?;
    assert_eq!((record.status, record.attempts), (Status::Waiting, 1));
    assert!(record.last_error.contains(handler::INJECTED_FAILURE));
    assert!(record.lease.is_none());
    assert_eq!(
        (record.next_attempt_at - record.updated_at).to_std()?,
        MAX_DURATION,
        "next attempt at {}",
        record.next_attempt_at
    );
    match worker.send(id).await {
        Err(Error::NotDue { at, .. }) => assert_eq!(at, record.next_attempt_at),
        other => anyhow::bail!("a retry due in 100 years was sent or refused otherwise: {other:?}"),
    }
    let due_in = db.store().next_due().await?;
    assert!(
        due_in.is_some_and(|due_in| due_in > MAX_DURATION - Duration::from_secs(3600)),
        "next due in {due_in:?}"
    );
    Ok(())
}

/// A relay whose every duration and batch is at its bound purges, claims,
/// records a retry 100 years ahead and shuts down without a database error.
pub async fn a_relay_at_its_bounds_runs_without_errors<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let (mock, handle) = handler::failing(1);
    let worker = worker(db, registry(mock)?, longest("relay")?)?;
    let id = enqueue_one(db, task(1)).await?;
    let relay_config = RelayConfig::default()
        .batch_size(MAX_BATCH_SIZE)
        .poll_interval(MAX_DURATION)
        .shutdown_timeout(MAX_DURATION)
        .retention(MAX_DURATION)
        .purge_interval(MAX_DURATION)
        .purge_batch(MAX_BATCH_SIZE)
        .write_delay(MAX_DURATION - Duration::from_micros(1));
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(worker, relay_config, &shutdown)?;
    // A relay meeting database errors keeps going, so bound the wait to
    // report them rather than hang.
    let called = tokio::time::timeout(Duration::from_secs(30), handle.wait_for_calls(1)).await;
    // Shutdown waits for the running handler and writes its result.
    shutdown.cancel();
    let report = relay.await?;
    anyhow::ensure!(called.is_ok(), "the handler was never called: {report:?}");
    assert_eq!(
        (report.claimed, report.retried, report.errors),
        (1, 1, 0),
        "{report:?}"
    );
    let record = get(db, id).await?;
    assert_eq!((record.status, record.attempts), (Status::Waiting, 1));
    assert_eq!(
        (record.next_attempt_at - record.updated_at).to_std()?,
        MAX_DURATION
    );
    Ok(())
}

/// A round of the largest batch in which every attempt fails writes all its
/// results in one statement, the costliest completion write there is.
pub async fn a_round_of_the_largest_batch_writes_every_result<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    enqueue_batch(db, (0..MAX_BATCH_SIZE).map(task).collect()).await?;
    let (mock, _handle) = handler::failing(MAX_BATCH_SIZE);
    let retry = RetryPolicy::new(Duration::from_secs(60), Duration::from_secs(60), 0.0)?;
    let config = config("w").concurrency(MAX_CONCURRENCY).retry(retry);
    let worker = worker(db, registry(mock)?, config)?;
    let report = worker.retry_pending(MAX_BATCH_SIZE).await?;
    let all = u64::try_from(MAX_BATCH_SIZE)?;
    assert_eq!((report.claimed, report.retried), (all, all), "{report:?}");
    let recorded = db
        .count("outbox_tasks WHERE status = 'waiting' AND attempts = 1 AND last_error <> ''")
        .await?;
    assert_eq!(recorded, i64::try_from(MAX_BATCH_SIZE)?);
    Ok(())
}
