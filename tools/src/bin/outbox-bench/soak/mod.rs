//! `cargo xtask bench --soak`: an outbox under steady traffic for as long
//! as it is asked to run, its figures sampled at a fixed interval.
//!
//! First producers enqueue flat out beside two relays for a while (held
//! back only while 2,000 of their tasks wait), to measure the rate the
//! machine sustains producing, delivering and purging at once (on a
//! database of its own, every finished task purged within seconds); then, on a new outbox whose tables were never analyzed, producers
//! enqueue at a share of that rate (70% unless told), two relays deliver,
//! and retention purges what finished a few minutes ago.
//! Each sample records what was enqueued and handled, the backlog, commit
//! to handler start (p50, p99), the claims' time (p50, p99, as the library
//! times them) and the task table's storage, with the server's clean-up
//! (dead rows and autovacuum runs on PostgreSQL, InnoDB's history list),
//! and how busy the machine's processors were.
//! At the end the producers stop and the relays work on the backlog for a
//! while (what they leave is reported), and the run is judged against the
//! soak's targets (a quick run is not judged). A relay that reports errors
//! fails the soak.

mod claims;
mod cpu;
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
    cpu::{CpuTimes, busy_between},
    load::{Book, KIND, Noting},
    report::{Sample, SoakRun},
};

/// Relays delivering, as in the drain scenario.
const RELAYS: usize = 2;
/// Producers enqueueing, each on a connection of its own.
const PRODUCERS: usize = 2;
/// Tasks per claim and handler slots per relay.
const BATCH: usize = 100;
/// The relays' poll interval: what a service that wants its messages out
/// within tens of milliseconds sets, without `NOTIFY` (the other backends
/// have none).
const POLL: Duration = Duration::from_millis(25);
/// While the rate is measured, the most tasks enqueued and not yet
/// handled: ten claims' worth per relay, enough that relays never wait
/// for work, few enough that the table stays small.
const CALIBRATION_BACKLOG: usize = 10 * BATCH * RELAYS;
/// While the rate is measured, how often the relays purge what finished.
const CALIBRATION_PURGE: Duration = Duration::from_secs(2);

/// How long and how hard a soak runs.
#[derive(Debug, Clone)]
pub(crate) struct SoakPlan {
    /// How long the producers run.
    pub(crate) duration: Duration,
    /// How often a sample is taken.
    pub(crate) sample: Duration,
    /// The producers' rate, as a share of the rate measured first.
    pub(crate) load: f64,
    /// A rate to offer instead of that share, in tasks/s: two builds
    /// compared at one rate, whatever each measured first.
    pub(crate) rate: Option<f64>,
    /// How long producers run flat out beside the relays first, to measure
    /// the rate the machine sustains (the second half is measured).
    pub(crate) calibration: Duration,
    /// How long finished tasks are kept.
    pub(crate) retention: Duration,
    /// How often the relays purge.
    pub(crate) purge_interval: Duration,
    /// Rows per maintenance statement (`purge_batch`), when not the
    /// relay's default.
    pub(crate) purge_batch: Option<usize>,
    /// How long the relays may work on the backlog once the producers
    /// stopped.
    pub(crate) finish_within: Duration,
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
                rate: None,
                calibration: Duration::from_secs(10),
                retention: Duration::from_secs(20),
                purge_interval: Duration::from_secs(5),
                purge_batch: None,
                finish_within: Duration::from_secs(20),
                quick,
            }
        } else {
            Self {
                duration: Duration::from_secs(minutes * 60),
                sample: Duration::from_secs(60),
                load,
                rate: None,
                calibration: Duration::from_secs(60),
                retention: Duration::from_secs(5 * 60),
                purge_interval: Duration::from_secs(30),
                purge_batch: None,
                finish_within: Duration::from_secs(120),
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

/// Two relays delivering to `book`'s handler, and the token that stops
/// them.
type Relays = (
    CancellationToken,
    Vec<tokio::task::JoinHandle<diesel_outbox_core::RelayReport>>,
);

fn start_relays<B: Storage>(db: &B, book: &Arc<Book>, plan: &SoakPlan) -> anyhow::Result<Relays> {
    let registry = Registry::builder()
        .handler(KIND, 1, Noting(Arc::clone(book)))
        .build()?;
    let mut config = RelayConfig::default()
        .batch_size(BATCH)
        .poll_interval(POLL)
        .retention(plan.retention)
        .purge_interval(plan.purge_interval);
    if let Some(rows) = plan.purge_batch {
        config = config.purge_batch(rows);
    }
    let stop = CancellationToken::new();
    let mut relays = Vec::new();
    for n in 0..RELAYS {
        let worker_config = WorkerConfig::default()
            .owner(format!("soak-{n}"))
            .concurrency(BATCH);
        let worker = Worker::with_config(db.store().clone(), registry.clone(), worker_config)?;
        let relay = Relay::new(worker, config.clone())?;
        let stop = stop.clone();
        relays.push(tokio::spawn(async move { relay.run(stop).await }));
    }
    Ok((stop, relays))
}

/// Producers enqueueing `rate` tasks/s between them (flat out without
/// one), and the token that stops them.
type Producers = (
    CancellationToken,
    Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
);

async fn start_producers<B: Storage>(
    db: &B,
    book: &Arc<Book>,
    rate: Option<f64>,
) -> anyhow::Result<Producers> {
    let stop = CancellationToken::new();
    let mut producers = Vec::new();
    for _ in 0..PRODUCERS {
        let (store, conn) = (db.store().clone(), db.connect().await?);
        let share = rate.map(|rate| rate / PRODUCERS as f64);
        producers.push(tokio::spawn(load::produce::<B>(
            store,
            conn,
            Arc::clone(book),
            share,
            stop.clone(),
        )));
    }
    Ok((stop, producers))
}

/// Stops the producers (failing with the first one's error), lets the
/// relays work on the backlog for `within` at most, then stops them
/// (failing if one reported errors) and prints what each did in `phase`;
/// returns the backlog left then.
async fn finish<B: Storage>(
    db: &B,
    producers: Producers,
    relays: Relays,
    within: Duration,
    phase: &str,
) -> anyhow::Result<u64> {
    producers.0.cancel();
    for producer in producers.1 {
        producer.await??;
    }
    let deadline = Instant::now() + within;
    let left = loop {
        let backlog = db.store().stats().await?.backlog();
        if backlog == 0 || Instant::now() >= deadline {
            break backlog;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    relays.0.cancel();
    for relay in relays.1 {
        let report = relay.await?;
        anyhow::ensure!(report.errors == 0, "a relay reported errors: {report:?}");
        eprintln!(
            "soak: {}: {phase}: a relay handled {} tasks and purged {} in {:.1} s of purge passes",
            B::NAME,
            report.succeeded,
            report.purged,
            report.purge_time.as_secs_f64()
        );
    }
    Ok(left)
}

/// Runs one soak on `db`, a new database of its own (migrated, its tables
/// never analyzed, as a new outbox's are), after measuring the rate on
/// another that is dropped then.
pub(crate) async fn run<B: Storage>(
    db: &B,
    plan: &SoakPlan,
    claims: &ClaimTimes,
) -> anyhow::Result<SoakRun> {
    let cleanup = db.cleanup().await?;
    if cleanup.off {
        let warning = format!(
            "the {} server has autovacuum off ({}): no dead row is ever removed, so the soak \
             would measure that server rather than what an outbox does in production; point \
             OUTBOX_PG_URL at a server with production settings",
            B::NAME,
            cleanup.summary,
        );
        anyhow::ensure!(plan.quick, "{warning}");
        eprintln!("soak: warning: {warning}");
    }
    let measured_on = B::create("soak_measure").await?;
    eprintln!(
        "soak: {}: measuring for {} s what the machine sustains, producers flat out beside \
         {RELAYS} relays",
        B::NAME,
        plan.calibration.as_secs()
    );
    let book = Arc::new(Book::bounded(CALIBRATION_BACKLOG));
    // Every task finished is purged within seconds, so the rate measured
    // pays for the delete each task costs once the soak's retention
    // passes, as well as for its insert, claim and completion.
    let purging = SoakPlan {
        retention: Duration::ZERO,
        purge_interval: CALIBRATION_PURGE,
        ..plan.clone()
    };
    let relays = start_relays(&measured_on, &book, &purging)?;
    let producers = start_producers(&measured_on, &book, None).await?;
    // The first half warms up; the second is measured.
    tokio::time::sleep(plan.calibration / 2).await;
    book.take();
    let measured = Instant::now();
    let cpu_measured = CpuTimes::now();
    tokio::time::sleep(plan.calibration / 2).await;
    let taken = book.take();
    let seconds = measured.elapsed().as_secs_f64();
    let capacity_cpu = busy_between(cpu_measured, CpuTimes::now());
    // The producers wait for the relays past a small backlog, so what was
    // handled is what the two kept up with together.
    let capacity = (taken.handled as f64 / seconds).max(1.0);
    finish(
        &measured_on,
        producers,
        relays,
        plan.finish_within,
        "measuring",
    )
    .await?;
    drop(measured_on);
    let rate = plan.rate.unwrap_or(capacity * plan.load);
    eprintln!(
        "soak: {}: sustained {capacity:.0} tasks/s (processors {} busy); enqueueing {rate:.0} tasks/s for {} s",
        B::NAME,
        report::percent(capacity_cpu),
        plan.duration.as_secs()
    );

    let book = Arc::new(Book::default());
    let relays = start_relays(db, &book, plan)?;
    let producers = start_producers(db, &book, Some(rate)).await?;
    claims.take();
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut ticks =
        tokio::time::interval_at(tokio::time::Instant::now() + plan.sample, plan.sample);
    let mut last = Instant::now();
    let mut cpu_last = CpuTimes::now();
    while started.elapsed() < plan.duration {
        ticks.tick().await;
        // A producer ends early only on an error, which `finish` gives.
        if producers.1.iter().any(tokio::task::JoinHandle::is_finished) {
            break;
        }
        let seconds = last.elapsed().as_secs_f64();
        last = Instant::now();
        let taken = book.take();
        let cpu_now = CpuTimes::now();
        let cpu_busy = busy_between(cpu_last, cpu_now);
        cpu_last = cpu_now;
        let sample = Sample {
            minutes: started.elapsed().as_secs_f64() / 60.0,
            enqueued_per_s: taken.enqueued as f64 / seconds,
            handled_per_s: taken.handled as f64 / seconds,
            backlog: db.store().stats().await?.backlog(),
            latencies: taken.latencies,
            claims: claims.take(),
            storage: db.storage().await?,
            cpu_busy,
        };
        eprintln!("soak: {}: {}", B::NAME, sample.line());
        samples.push(sample);
    }
    let left = finish(db, producers, relays, plan.finish_within, "soak").await?;
    Ok(SoakRun {
        left,
        cleanup: cleanup.summary,
        backend: B::NAME,
        capacity,
        capacity_cpu,
        rate,
        plan: plan.clone(),
        samples,
    })
}
