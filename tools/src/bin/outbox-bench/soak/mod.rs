//! `cargo xtask bench --soak`: an outbox under steady traffic for as long
//! as it is asked to run, its figures sampled at a fixed interval.
//!
//! First the drain rate of two relays is measured on a fresh backlog;
//! then producers enqueue at a share of that rate (70% unless told), two
//! relays deliver, and retention purges what finished a few minutes ago.
//! Each sample records what was enqueued and handled, the backlog, commit
//! to handler start (p50, p99), the claims' time (p50, p99, as the library
//! times them) and the task table's storage, with the server's clean-up
//! (dead rows and autovacuum runs on PostgreSQL, InnoDB's history list).
//! At the end the producers stop, the relays finish the backlog, and the
//! run is judged against the soak's targets (a quick run is not judged).

mod claims;
mod load;
pub(crate) mod report;
mod storage;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use diesel_outbox_core::{Maintenance as _, Registry, Relay, RelayConfig, Worker, WorkerConfig};
use tokio_util::sync::CancellationToken;

pub(crate) use self::{claims::ClaimTimes, storage::Storage};
use self::{
    load::{Book, KIND, Noting},
    report::{Sample, SoakRun},
};
use super::drain;

/// Relays delivering, as in the drain scenario.
const RELAYS: usize = 2;
/// Producers enqueueing, each on a connection of its own.
const PRODUCERS: usize = 2;
/// Tasks per claim and handler slots per relay.
const BATCH: usize = 100;

/// How long and how hard a soak runs.
#[derive(Debug, Clone)]
pub(crate) struct SoakPlan {
    /// How long the producers run.
    pub(crate) duration: Duration,
    /// How often a sample is taken.
    pub(crate) sample: Duration,
    /// The producers' rate, as a share of the drain rate measured first.
    pub(crate) load: f64,
    /// Tasks in the backlog the drain rate is measured on.
    pub(crate) calibration: u64,
    /// How long finished tasks are kept.
    pub(crate) retention: Duration,
    /// How often the relays purge.
    pub(crate) purge_interval: Duration,
    /// Whether this is the quick form (its figures are not judged).
    pub(crate) quick: bool,
}

impl SoakPlan {
    /// The quick form (a smoke check: 30 s, a sample every 5 s), or the
    /// full form of `minutes`, a sample a minute.
    pub(crate) fn new(quick: bool, minutes: u64, load: f64) -> Self {
        if quick {
            Self {
                duration: Duration::from_secs(30),
                sample: Duration::from_secs(5),
                load,
                calibration: 5_000,
                retention: Duration::from_secs(20),
                purge_interval: Duration::from_secs(5),
                quick,
            }
        } else {
            Self {
                duration: Duration::from_secs(minutes * 60),
                sample: Duration::from_secs(60),
                load,
                calibration: 50_000,
                retention: Duration::from_secs(5 * 60),
                purge_interval: Duration::from_secs(30),
                quick,
            }
        }
    }
}

/// Installs the claim timer; once per process, before any soak runs.
pub(crate) fn claim_times() -> anyhow::Result<ClaimTimes> {
    let times = ClaimTimes::default();
    times.install()?;
    Ok(times)
}

/// Runs one soak on `db` (a database of its own, migrated).
pub(crate) async fn run<B: Storage>(
    db: &B,
    plan: &SoakPlan,
    claims: &ClaimTimes,
) -> anyhow::Result<SoakRun> {
    eprintln!(
        "soak: {}: measuring the drain rate of {RELAYS} relays on {} tasks",
        B::NAME,
        plan.calibration
    );
    drain::fresh(db, plan.calibration).await?;
    let drain_rate = drain::relays(db, plan.calibration).await?;
    db.reset().await?;
    let rate = drain_rate * plan.load;
    eprintln!(
        "soak: {}: drain {drain_rate:.0} tasks/s; enqueueing {rate:.0} tasks/s for {} s",
        B::NAME,
        plan.duration.as_secs()
    );

    let book = Arc::new(Book::default());
    let registry = Registry::builder()
        .handler(KIND, 1, Noting(Arc::clone(&book)))
        .build()?;
    let relay_config = RelayConfig::default()
        .batch_size(BATCH)
        .poll_interval(Duration::from_millis(100))
        .retention(plan.retention)
        .purge_interval(plan.purge_interval);
    let stop_relays = CancellationToken::new();
    let mut relays = Vec::new();
    for n in 0..RELAYS {
        let config = WorkerConfig::default()
            .owner(format!("soak-{n}"))
            .concurrency(BATCH);
        let worker = Worker::with_config(db.store().clone(), registry.clone(), config)?;
        let relay = Relay::new(worker, relay_config.clone())?;
        let stop = stop_relays.clone();
        relays.push(tokio::spawn(async move { relay.run(stop).await }));
    }
    let stop_producers = CancellationToken::new();
    let mut producers = Vec::new();
    for _ in 0..PRODUCERS {
        let (store, conn) = (db.store().clone(), db.connect().await?);
        let (book, stop) = (Arc::clone(&book), stop_producers.clone());
        let share = rate / PRODUCERS as f64;
        producers.push(tokio::spawn(load::produce::<B>(
            store, conn, book, share, stop,
        )));
    }

    claims.take();
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut ticks =
        tokio::time::interval_at(tokio::time::Instant::now() + plan.sample, plan.sample);
    let mut last = Instant::now();
    while started.elapsed() < plan.duration {
        ticks.tick().await;
        // A producer ends early only on an error, which its join gives.
        if producers.iter().any(tokio::task::JoinHandle::is_finished) {
            break;
        }
        let seconds = last.elapsed().as_secs_f64();
        last = Instant::now();
        let taken = book.take();
        let sample = Sample {
            minutes: started.elapsed().as_secs_f64() / 60.0,
            enqueued_per_s: taken.enqueued as f64 / seconds,
            handled_per_s: taken.handled as f64 / seconds,
            backlog: db.store().stats().await?.backlog(),
            latencies: taken.latencies,
            claims: claims.take(),
            storage: db.storage().await?,
        };
        eprintln!("soak: {}: {}", B::NAME, sample.line());
        samples.push(sample);
    }
    stop_producers.cancel();
    for producer in producers {
        producer.await??;
    }
    // The relays finish what is left, so nothing enqueued is left behind.
    let deadline = Instant::now() + Duration::from_secs(120);
    while db.store().stats().await?.backlog() > 0 {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the relays did not finish the backlog within 120 s of the producers' stop"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop_relays.cancel();
    for relay in relays {
        let report = relay.await?;
        anyhow::ensure!(report.errors == 0, "a relay reported errors: {report:?}");
    }
    Ok(SoakRun {
        backend: B::NAME,
        drain_rate,
        rate,
        plan: plan.clone(),
        samples,
    })
}
