//! What the broker scenarios share: the backlog they drain, the publisher a
//! user writes by hand (claim, publish a batch with its acknowledgements in
//! flight, complete, overlapped on two connections), and the check that a
//! run published and completed every task. Each broker says how it
//! publishes a batch and counts what it holds ([`Sink`]).

use std::{future::Future, sync::Arc, time::Instant};

use diesel_outbox_core::{
    BatchHandler, Delivery, Registry, Relay, RelayConfig, Worker, WorkerConfig, batch_handler_fn,
};
use tokio_util::sync::CancellationToken;

use super::{
    counting::Counting,
    raw::{Claimed, Raw},
};

/// Acknowledgements a publisher waits for at once, on every side: the
/// relay runs this many handlers and claims up to this many tasks at a time
/// (what a publish-only handler should be given, since each one spends its
/// time waiting for the broker), and the raw loops keep as many
/// acknowledgements outstanding. With the worker's default of 32 handlers,
/// the relay waits on its claims' round trips with most handler slots idle.
pub(crate) const IN_FLIGHT: usize = 256;

/// The kind every broker scenario publishes.
pub(crate) const KIND: &str = "bench.broker";

/// A broker destination of one run.
pub(crate) trait Sink {
    /// Publishes `claimed` with every acknowledgement in flight together;
    /// returns their ids once the broker acknowledged each.
    fn publish_batch(
        &self,
        claimed: Vec<Claimed>,
    ) -> impl Future<Output = anyhow::Result<Vec<i64>>> + Send;
    /// How many messages the destination holds.
    fn count(&self) -> impl Future<Output = anyhow::Result<u64>> + Send;
}

/// Empties the table and fills it with `count` pending tasks, analyzed
/// ([`Raw::fresh_backlog`]), before a loop that drains them starts its
/// clock and its CPU count.
pub(crate) async fn pending<B: Raw>(db: &B, count: u64) -> anyhow::Result<()> {
    db.fresh_backlog(count, KIND).await
}

/// The rate of a publisher that started at `started`, once its work checks
/// out: `count` tasks published, at the destination, and marked succeeded.
pub(crate) async fn checked_rate<B: Raw>(
    db: &B,
    sink: &impl Sink,
    started: Instant,
    published: u64,
    count: u64,
    publisher: &str,
) -> anyhow::Result<f64> {
    let rate = count as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(
        published == count && sink.count().await? == count,
        "the {publisher} published {published} of {count}"
    );
    let succeeded = db.count("outbox_tasks WHERE status = 'succeeded'").await?;
    anyhow::ensure!(
        u64::try_from(succeeded)? == count,
        "the {publisher} marked {succeeded} of {count} tasks succeeded"
    );
    Ok(rate)
}

/// Tasks/s of the publisher a careful user writes by hand over `count`
/// pending tasks, on one connection: claim [`IN_FLIGHT`] with the raw drain
/// loop's statement (prepared once), publish them all with their
/// acknowledgements in flight together, mark them succeeded, and claim
/// again. (Two such loops of half as many each measured no faster.)
#[cfg_attr(
    not(feature = "nats"),
    allow(dead_code, reason = "measured beside JetStream only")
)]
pub(crate) async fn hand_written<B: Raw>(
    db: &B,
    sink: &impl Sink,
    count: u64,
) -> anyhow::Result<f64> {
    let mut conn = db.drain_connection().await?;
    let (mut published, mut after) = (0_u64, 0);
    let started = Instant::now();
    loop {
        let claimed = B::claim_batch(&mut conn, i64::try_from(IN_FLIGHT)?, after).await?;
        let Some(last) = claimed.last().map(|row| row.id) else {
            break;
        };
        let ids = sink.publish_batch(claimed).await?;
        B::complete_batch(&mut conn, &ids).await?;
        published += ids.len() as u64;
        after = last;
    }
    checked_rate(
        db,
        sink,
        started,
        published,
        count,
        "hand-written publisher",
    )
    .await
}

/// Tasks/s of the hand-written publisher with its round trips overlapped,
/// on two connections: while one batch of [`IN_FLIGHT`] is published, the
/// next is claimed on one connection and the batch before is marked
/// succeeded on the other, so the database's round trips hide behind the
/// broker's. What a user writes once the plain loop is too slow. Like the
/// relay, it looks from the lowest id again before it stops.
pub(crate) async fn hand_written_overlapping<B: Raw>(
    db: &B,
    sink: &impl Sink,
    count: u64,
) -> anyhow::Result<f64> {
    let mut claiming = db.drain_connection().await?;
    let mut completing = db.drain_connection().await?;
    let limit = i64::try_from(IN_FLIGHT)?;
    let started = Instant::now();
    let mut claimed = B::claim_batch(&mut claiming, limit, 0).await?;
    let (mut published, mut done) = (0_u64, Vec::new());
    loop {
        let Some(after) = claimed.last().map(|row| row.id) else {
            // Nothing past the cursor. `SKIP LOCKED` may have passed over
            // rows while the other connection's write was under way
            // (MariaDB was seen doing so, with no other claim running):
            // finish that write, then look from the lowest id once more
            // before stopping.
            B::complete_batch(&mut completing, &std::mem::take(&mut done)).await?;
            claimed = B::claim_batch(&mut claiming, limit, 0).await?;
            if claimed.is_empty() {
                break;
            }
            continue;
        };
        let (sent, next, completed) = tokio::join!(
            sink.publish_batch(std::mem::take(&mut claimed)),
            B::claim_batch(&mut claiming, limit, after),
            B::complete_batch(&mut completing, &done),
        );
        completed?;
        done = sent?;
        published += done.len() as u64;
        claimed = next?;
    }
    checked_rate(
        db,
        sink,
        started,
        published,
        count,
        "overlapping hand-written publisher",
    )
    .await
}

/// Tasks/s of one relay publishing `count` pending tasks to `sink` through
/// `publisher`, a broker crate's own batch handler (what its `register`
/// gives the registry), [`IN_FLIGHT`] handler slots and claims of as many;
/// each delivery the publisher answers `Ok` is counted.
pub(crate) async fn through_relay<B: Raw>(
    db: &B,
    sink: &impl Sink,
    publisher: impl BatchHandler,
    count: u64,
) -> anyhow::Result<f64> {
    let publisher = Arc::new(publisher);
    let counting = Counting::default();
    let handler = {
        let counting = counting.clone();
        batch_handler_fn(move |deliveries: Vec<Delivery>| {
            let (publisher, counting) = (Arc::clone(&publisher), counting.clone());
            async move {
                let ids: Vec<_> = deliveries.iter().map(|delivery| delivery.id).collect();
                let answers = publisher.handle_batch(deliveries).await;
                for (id, answer) in ids.into_iter().zip(&answers) {
                    if answer.is_ok() {
                        counting.count(id);
                    }
                }
                answers
            }
        })
    };
    let registry = Registry::builder()
        .batch_handler(KIND, 1, handler)
        .build()?;
    let relay = Relay::new(
        Worker::with_config(
            db.store().clone(),
            registry,
            WorkerConfig::default().concurrency(IN_FLIGHT),
        )?,
        RelayConfig::default().batch_size(IN_FLIGHT).retention(None),
    )?;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });
    counting.wait_for(usize::try_from(count)?).await;
    shutdown.cancel();
    running.await?;
    let rate = count as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(
        sink.count().await? == count,
        "the destination is missing messages"
    );
    let succeeded = db.count("outbox_tasks WHERE status = 'succeeded'").await?;
    anyhow::ensure!(
        u64::try_from(succeeded)? == count,
        "the relay marked {succeeded} of {count} tasks succeeded"
    );
    Ok(rate)
}

/// What a broker's figures are called.
#[cfg(any(feature = "rabbitmq", feature = "redis", feature = "kafka"))]
pub(crate) struct Names {
    /// The broker as the table names it (`RabbitMQ`).
    pub(crate) broker: &'static str,
    /// The title of the relay's plot.
    pub(crate) plot: &'static str,
    /// The raw client's loop, reading no database.
    pub(crate) raw: &'static str,
    /// The overlapping hand-written publisher.
    pub(crate) hand_written: &'static str,
}

/// The relay with a broker's publisher against the overlapping
/// hand-written publisher (at `target`) and the raw client's loop, with
/// [`IN_FLIGHT`] acknowledgements in flight everywhere, interleaved over
/// the plan's runs; and this process's CPU per task for the relay and the
/// hand-written publisher. `relay` and `raw` measure one run of `count`
/// tasks; `sink` makes the hand-written publisher's destination.
#[cfg(any(feature = "rabbitmq", feature = "redis", feature = "kafka"))]
pub(crate) async fn against_hand_written<B, S, SinkFut, RelayFut, RawFut>(
    db: &B,
    plan: &super::Plan,
    names: &Names,
    target: f64,
    relay: impl Fn(u64) -> RelayFut,
    raw: impl Fn(u64) -> RawFut,
    sink: impl Fn() -> SinkFut,
) -> anyhow::Result<Vec<super::figure::Figure>>
where
    B: Raw,
    S: Sink,
    SinkFut: Future<Output = anyhow::Result<S>>,
    RelayFut: Future<Output = anyhow::Result<f64>>,
    RawFut: Future<Output = anyhow::Result<f64>>,
{
    use super::{
        drain::timed,
        figure::{CPU_UNIT, Cpu, Figure, Plot},
        stats::median,
    };
    let count = plan.nats_tasks;
    let (mut library, mut baseline, mut overlapping) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpu_relay, mut cpu_overlapping) = (Vec::new(), Vec::new());
    for _ in 0..plan.runs {
        pending(db, count).await?;
        timed(count, relay(count), &mut library, &mut cpu_relay).await?;
        baseline.push(raw(count).await?);
        pending(db, count).await?;
        let overlap = async { hand_written_overlapping(db, &sink().await?, count).await };
        timed(count, overlap, &mut overlapping, &mut cpu_overlapping).await?;
    }
    let (library, baseline, overlapping) =
        (median(&library), median(&baseline), median(&overlapping));
    let (cpu_relay, cpu_overlapping) = (median(&cpu_relay), median(&cpu_overlapping));
    let broker = names.broker;
    let figure = |scenario: String, baseline: f64, target, baseline_name| Figure {
        backend: B::NAME,
        scenario,
        unit: "tasks/s",
        library,
        baseline,
        ratio: library / baseline,
        higher_is_better: true,
        runs: plan.runs,
        target,
        baseline_name,
        cpu: None,
        plot: Plot::None,
    };
    Ok(vec![
        Figure {
            cpu: Some(Cpu {
                library: cpu_relay,
                baseline: Some(cpu_overlapping),
            }),
            plot: Plot::Throughput(names.plot),
            ..figure(
                format!(
                    "publish {count} to {broker} through the relay, against a hand-written publisher overlapping its round trips"
                ),
                overlapping,
                Some(target),
                names.hand_written,
            )
        },
        figure(
            format!("publish {count} to {broker} through the relay"),
            baseline,
            None,
            names.raw,
        ),
        Figure {
            backend: B::NAME,
            scenario: format!("publish {count} to {broker}: this process's CPU per task, relay"),
            unit: CPU_UNIT,
            library: cpu_relay,
            baseline: cpu_overlapping,
            ratio: cpu_relay / cpu_overlapping,
            higher_is_better: false,
            runs: plan.runs,
            target: None,
            baseline_name: "hand-written publisher overlapping its round trips",
            cpu: None,
            plot: Plot::None,
        },
    ])
}
