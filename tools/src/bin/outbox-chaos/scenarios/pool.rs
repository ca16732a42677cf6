//! Pool exhaustion: a store with a pool of 2 connections shared by a relay,
//! a producer committing through the `transaction` helper, and bursts of 200
//! `send_async` calls at once. Nothing deadlocks, and no caller sees an
//! error: every send resolves, to a delivery or to a documented hand-off to
//! the relay.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use diesel_outbox_core::{
    CancellationToken, Error, Relay, RelayConfig, RetryPolicy, Worker, WorkerConfig,
};

use super::{Ctx, settle, setup, then_stop};
use crate::{
    db::ChaosDb,
    effect::{self, Behaviour},
    records::Recorder,
    report::Report,
};

/// Sends per burst.
const BURST: usize = 200;

/// How a burst's sends resolved.
#[derive(Debug, Default)]
struct Sends {
    delivered: usize,
    busy: usize,
    deferred: usize,
    errors: Vec<String>,
}

pub(crate) async fn run<B: ChaosDb>(
    ctx: &mut Ctx<'_, B>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let setup = setup(ctx, "pool").await?;
    let bursts = ctx.pick(5, 20);
    let worker = Worker::with_config(
        setup.db.store_with_pool(2)?,
        effect::registry(
            Recorder::open(&setup.dir.join("service.log"))?,
            Behaviour::default(),
        )?,
        WorkerConfig::default()
            .owner("service")
            .concurrency(BURST)
            .handler_timeout(Duration::from_secs(1))
            .lease_duration(Duration::from_secs(3))
            .retry(RetryPolicy::new(
                Duration::from_millis(200),
                Duration::from_millis(200),
                0.0,
            )?),
    )?;
    let relay = Relay::new(
        worker.clone(),
        RelayConfig::default()
            .poll_interval(Duration::from_millis(100))
            .retention(None),
    )?;
    let stop = CancellationToken::new();
    let relaying = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run(stop).await }
    });
    ctx.progress.phase(&format!(
        "pool of 2: a relay, a producer, {bursts} bursts of {BURST} send_async"
    ));

    let next_order = AtomicUsize::new(0);
    let order = || i64::try_from(next_order.fetch_add(1, Ordering::SeqCst) + 1).unwrap_or(i64::MAX);
    let (mut producer_errors, mut producer_commits) = (Vec::new(), 0usize);
    let mut slowest_commit = Duration::ZERO;
    let producer_stop = CancellationToken::new();
    let producing = async {
        let mut ticks = tokio::time::interval(Duration::from_millis(20));
        while !producer_stop.is_cancelled() {
            tokio::select! {
                () = producer_stop.cancelled() => break,
                _ = ticks.tick() => {}
            }
            let started = Instant::now();
            match B::place_order_pooled(&worker, order()).await {
                Ok(_) => producer_commits += 1,
                Err(error) => producer_errors.push(format!("{error:#}")),
            }
            slowest_commit = slowest_commit.max(started.elapsed());
        }
    };
    let bursting = then_stop(&producer_stop, async {
        let mut sends = Sends::default();
        let mut slowest = Duration::ZERO;
        let mut deadlocked = false;
        for burst in 0..bursts {
            let orders: Vec<i64> = (0..BURST).map(|_| order()).collect();
            let ids = match B::enqueue_orders_pooled(worker.store(), &orders).await {
                Ok(ids) => ids,
                Err(error) => {
                    sends.errors.push(format!("burst commit: {error:#}"));
                    continue;
                }
            };
            let started = Instant::now();
            let handles: Vec<_> = ids.iter().map(|id| worker.send_async(*id)).collect();
            let resolved = tokio::time::timeout(
                Duration::from_secs(30),
                futures_util::future::join_all(handles),
            )
            .await;
            let Ok(results) = resolved else {
                deadlocked = true;
                break;
            };
            slowest = slowest.max(started.elapsed());
            for result in results {
                match result {
                    Ok(Ok(())) => sends.delivered += 1,
                    // Documented hand-offs: the relay holds it, or the
                    // worker was at its concurrency and left it to the relay.
                    Ok(Err(Error::Busy { .. })) => sends.busy += 1,
                    Ok(Err(Error::Deferred(_))) => sends.deferred += 1,
                    Ok(Err(error)) => sends
                        .errors
                        .push(format!("{:#}", anyhow::Error::from(error))),
                    Err(join) => sends.errors.push(join.to_string()),
                }
            }
            ctx.progress.status(
                &format!("burst {} of {bursts}", burst + 1),
                (burst + 1) * BURST,
                &setup.dir,
            );
        }
        (sends, slowest, deadlocked)
    });
    let ((), (sends, slowest, deadlocked)) = tokio::join!(producing, bursting);
    let delivered = settle(
        &setup.db,
        &setup.dir,
        Duration::from_secs(60),
        &ctx.progress,
        report,
    )
    .await;
    stop.cancel();
    relaying.await?;
    delivered?;

    report.check(
        "no deadlock",
        !deadlocked,
        if deadlocked {
            format!("a burst's {BURST} sends had not all resolved after 30 s")
        } else {
            format!("every burst's {BURST} sends resolved")
        },
    );
    let errors = sends.errors.len() + producer_errors.len();
    let first = sends
        .errors
        .first()
        .or(producer_errors.first())
        .cloned()
        .unwrap_or_default();
    report.check(
        "no caller error",
        errors == 0,
        if errors == 0 {
            format!(
                "{producer_commits} producer commits, {} sends",
                bursts * BURST
            )
        } else {
            format!("{errors} errors, first: {first}")
        },
    );
    report.figure("sends delivered by the send itself", sends.delivered, "");
    report.figure(
        "sends that found the relay holding the task (Busy)",
        sends.busy,
        "",
    );
    report.figure(
        "sends left to the relay at the concurrency limit (Deferred)",
        sends.deferred,
        "",
    );
    report.millis("slowest burst, all 200 sends resolved", slowest);
    report.figure("producer commits during the bursts", producer_commits, "");
    report.millis("slowest producer commit", slowest_commit);
    Ok(())
}
