//! The relay's maintenance task: promotion, rescue, retention and stats, off
//! the claim path.
//!
//! It runs beside the claim loop on its own pool connection, so a long purge
//! or a slow count never delays a claim: the claim loop only ever waits on
//! its own statements.

use std::{sync::Arc, time::Duration};

use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use super::{RelayConfig, later};
use crate::{Maintenance, Worker, telemetry};

/// What the maintenance task did, merged into the relay's report at the end.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Maintained {
    pub promoted: u64,
    pub rescued: u64,
    pub purged: u64,
    pub errors: u64,
}

/// Runs until `stop` is cancelled. After each step that made tasks
/// available, `available` is notified so the claim loop claims at once.
/// Between steps it sleeps until the next waiting task is due, at most the
/// poll interval, or until `rescheduled` says the next due time may have
/// moved.
pub(super) async fn run<S: Maintenance>(
    worker: Worker<S>,
    config: RelayConfig,
    available: Arc<Notify>,
    rescheduled: Arc<Notify>,
    stop: CancellationToken,
) -> Maintained {
    let store = worker.store();
    let mut done = Maintained::default();
    // Rows per statement; the setting is bounded by MAX_BATCH_SIZE.
    let step = u32::try_from(config.purge_batch).unwrap_or(u32::MAX);
    let mut next_purge = Instant::now();
    while !stop.is_cancelled() {
        let moved = advance(&worker, step, &mut done).await;
        if moved > 0 {
            available.notify_one();
        }
        if Instant::now() >= next_purge {
            purge_and_count(store, &config, &mut done).await;
            next_purge = later(Instant::now(), config.purge_interval);
        }
        let sleep = match store.next_due().await {
            Ok(Some(due_in)) => due_in.min(config.poll_interval),
            Ok(None) => config.poll_interval,
            Err(error) => {
                done.errors += 1;
                tracing::warn!(error = %error.chain(), "relay could not read the next due time");
                config.poll_interval
            }
        };
        // A task due in less than a millisecond is promoted on the next
        // pass; never spin on a zero sleep.
        let sleep = sleep.max(Duration::from_millis(1));
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(sleep) => {}
            () = rescheduled.notified() => {}
        }
    }
    done
}

/// One promotion and rescue step, a statement of at most `step` rows at a
/// time, until a statement comes back short; returns the tasks made
/// available (or failed, for rescues out of attempts, whose failure hook
/// the worker runs).
async fn advance<S: Maintenance>(worker: &Worker<S>, step: u32, done: &mut Maintained) -> u64 {
    let store = worker.store();
    let promoted = counted(
        drain(step, || store.promote(step)).await,
        "promote due tasks",
        done,
    );
    let rescued = counted(worker.rescue(step).await, "rescue lapsed leases", done);
    done.promoted += promoted;
    done.rescued += rescued;
    telemetry::moved(promoted, rescued);
    promoted + rescued
}

/// The count of a step, or zero after logging and counting its error.
fn counted(result: crate::Result<u64>, what: &str, done: &mut Maintained) -> u64 {
    result.unwrap_or_else(|error| {
        done.errors += 1;
        tracing::warn!(error = %error.chain(), "relay could not {what}");
        0
    })
}

/// Repeats `statement` while it moves a full `step` of rows.
pub(crate) async fn drain<F, Fut>(step: u32, mut statement: F) -> crate::Result<u64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::Result<u64>>,
{
    let mut total = 0;
    loop {
        let moved = statement().await?;
        total += moved;
        if moved < u64::from(step) {
            return Ok(total);
        }
    }
}

/// Applies retention and refreshes the gauges.
async fn purge_and_count<S: Maintenance>(store: &S, config: &RelayConfig, done: &mut Maintained) {
    if let Some(retention) = config.retention {
        match store.purge_finished(retention, config.purge_batch).await {
            Ok(purged) => done.purged += purged,
            Err(error) => {
                done.errors += 1;
                tracing::warn!(error = %error.chain(), "relay could not purge finished tasks");
            }
        }
    }
    match store.stats().await {
        Ok(stats) => telemetry::stats(&stats),
        Err(error) => {
            done.errors += 1;
            tracing::warn!(error = %error.chain(), "relay could not read stats");
        }
    }
}
