//! Scenario 2: draining a backlog, library vs a hand-written claim loop.

use std::{
    future::Future,
    time::{Duration, Instant},
};

use diesel_outbox_core::{Registry, Relay, RelayConfig, Worker, WorkerConfig};
use tokio_util::sync::CancellationToken;

use super::{
    Plan,
    counting::Counting,
    figure::{CPU_UNIT, Cpu, Figure, Plot},
    raw::{Prepare, Raw},
    stats::{median, process_cpu},
};

pub(crate) const KIND: &str = "bench.noop";

/// How a drain runs: how many relays, `retry_pending` workers or
/// hand-written loops (each loop on a connection of its own), and how many
/// tasks each claims at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) workers: usize,
    pub(crate) batch: usize,
}

/// The drain scenario's shape: two of each, claims of 100.
const SHAPE: Shape = Shape {
    workers: 2,
    batch: 100,
};

fn workers<B: Raw>(
    store: &B::Store,
    handler: &Counting,
    shape: Shape,
) -> anyhow::Result<Vec<Worker<B::Store>>> {
    let registry = Registry::builder()
        .handler(KIND, 1, handler.clone())
        .build()?;
    (0..shape.workers)
        .map(|n| {
            let config = WorkerConfig::default()
                .owner(format!("bench-{n}"))
                .concurrency(shape.batch);
            Ok(Worker::with_config(
                store.clone(),
                registry.clone(),
                config,
            )?)
        })
        .collect()
}

/// Tasks/s of `shape.workers` workers on `store`, each running one
/// `retry_pending(shape.batch)` round.
pub(crate) async fn rounds<B: Raw>(
    store: &B::Store,
    tasks: u64,
    shape: Shape,
) -> anyhow::Result<f64> {
    let handler = Counting::default();
    let workers = workers::<B>(store, &handler, shape)?;
    let started = Instant::now();
    let reports =
        futures_util::future::try_join_all(workers.iter().map(|w| w.retry_pending(shape.batch)))
            .await?;
    let took = started.elapsed();
    let handled: u64 = reports.iter().map(|r| r.succeeded).sum();
    anyhow::ensure!(
        handled == tasks,
        "rounds handled {handled} of {tasks} tasks"
    );
    Ok(tasks as f64 / took.as_secs_f64())
}

/// Tasks/s of `shape.workers` relays on `store`, claiming up to
/// `shape.batch` each, until every task was handled.
pub(crate) async fn relays<B: Raw>(
    store: &B::Store,
    tasks: u64,
    shape: Shape,
) -> anyhow::Result<f64> {
    let handler = Counting::default();
    let shutdown = CancellationToken::new();
    let config = RelayConfig::default()
        .batch_size(shape.batch)
        .poll_interval(Duration::from_millis(100))
        .retention(None);
    let started = Instant::now();
    let mut running = Vec::new();
    for worker in workers::<B>(store, &handler, shape)? {
        let relay = Relay::new(worker, config.clone())?;
        let shutdown = shutdown.clone();
        running.push(tokio::spawn(async move { relay.run(shutdown).await }));
    }
    handler.wait_for(usize::try_from(tasks)?).await;
    shutdown.cancel();
    for relay in running {
        relay.await?;
    }
    // Every result is written once run returns: that is the end of the drain.
    Ok(tasks as f64 / started.elapsed().as_secs_f64())
}

/// Tasks/s of the hand-written claim + complete loop on `shape.workers`
/// connections, claims of up to `shape.batch`, until `tasks` pending tasks
/// are handled. Each connection claims after the last id it took, and
/// stops once a claim from the lowest id finds nothing.
pub(crate) async fn raw_loop<B: Raw>(
    db: &B,
    tasks: u64,
    shape: Shape,
    prepare: Prepare,
) -> anyhow::Result<f64> {
    let batch = i64::try_from(shape.batch)?;
    let connect = (0..shape.workers).map(|_| db.drain_connection());
    let conns = futures_util::future::try_join_all(connect).await?;
    let started = Instant::now();
    let loops = conns.into_iter().map(|mut conn| async move {
        let (mut handled, mut after) = (0, 0);
        loop {
            let ids = B::drain_batch(&mut conn, batch, after, prepare).await?;
            match ids.last() {
                Some(&last) => (handled, after) = (handled + ids.len(), last),
                // `SKIP LOCKED` passes over rows another transaction holds
                // (and MariaDB was seen passing over a row no other claim
                // took), so nothing past the cursor does not mean nothing
                // is left: look from the lowest id once more before
                // stopping.
                None if after > 0 => after = 0,
                None => return anyhow::Ok(handled),
            }
        }
    });
    let handled: usize = futures_util::future::try_join_all(loops)
        .await?
        .iter()
        .sum();
    anyhow::ensure!(
        handled as u64 == tasks,
        "the raw loop handled {handled} of {tasks} tasks"
    );
    Ok(tasks as f64 / started.elapsed().as_secs_f64())
}

/// Empties the table and fills it with `tasks` due tasks, analyzed
/// ([`Raw::fresh_backlog`]).
pub(crate) async fn fresh<B: Raw>(db: &B, tasks: u64) -> anyhow::Result<()> {
    db.fresh_backlog(tasks, KIND).await
}

/// A drain's rate, and the CPU time this process spent on it per task
/// (whatever else `drain` does before it starts its clock included).
pub(crate) async fn timed(
    tasks: u64,
    drain: impl Future<Output = anyhow::Result<f64>>,
    rates: &mut Vec<f64>,
    cpu: &mut Vec<f64>,
) -> anyhow::Result<()> {
    let before = process_cpu();
    rates.push(drain.await?);
    cpu.push((process_cpu() - before).as_secs_f64() * 1e6 / tasks as f64);
    Ok(())
}

/// Rounds, relays and the raw loop over the same backlog, interleaved.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Figure>> {
    let tasks = plan.backlog;
    let (mut by_rounds, mut by_relays, mut by_raw) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpu_rounds, mut cpu_relays, mut cpu_raw) = (Vec::new(), Vec::new(), Vec::new());
    let (mut by_raw_each_call, mut cpu_raw_each_call) = (Vec::new(), Vec::new());
    for _ in 0..plan.runs {
        fresh(db, tasks).await?;
        timed(
            tasks,
            rounds::<B>(db.store(), tasks, SHAPE),
            &mut by_rounds,
            &mut cpu_rounds,
        )
        .await?;
        fresh(db, tasks).await?;
        let once = raw_loop(db, tasks, SHAPE, Prepare::Once);
        timed(tasks, once, &mut by_raw, &mut cpu_raw).await?;
        fresh(db, tasks).await?;
        let each_call = raw_loop(db, tasks, SHAPE, Prepare::EachCall);
        timed(
            tasks,
            each_call,
            &mut by_raw_each_call,
            &mut cpu_raw_each_call,
        )
        .await?;
        fresh(db, tasks).await?;
        timed(
            tasks,
            relays::<B>(db.store(), tasks, SHAPE),
            &mut by_relays,
            &mut cpu_relays,
        )
        .await?;
    }
    let cpu_raw = median(&cpu_raw);
    let (cpu_rounds, cpu_relays) = (median(&cpu_rounds), median(&cpu_relays));
    let cpu_raw_each_call = median(&cpu_raw_each_call);
    let cpu = |scenario: String, library: f64| Figure {
        backend: B::NAME,
        scenario,
        unit: CPU_UNIT,
        library,
        baseline: cpu_raw,
        ratio: library / cpu_raw,
        higher_is_better: false,
        runs: plan.runs,
        target: None,
        baseline_name: "raw loop, prepared once",
        cpu: None,
        plot: Plot::None,
    };
    let cpu_figures = [
        cpu(
            format!("drain {tasks}: this process's CPU per task, rounds"),
            cpu_rounds,
        ),
        cpu(
            format!("drain {tasks}: this process's CPU per task, relays"),
            cpu_relays,
        ),
        cpu(
            format!("drain {tasks}: this process's CPU per task, raw loop on every call"),
            cpu_raw_each_call,
        ),
    ];
    let raw = median(&by_raw);
    let against_raw = |library: f64| Cpu {
        library,
        baseline: Some(cpu_raw),
    };
    let figure = |scenario: String, library: f64, target: f64, cpu: f64, plot| Figure {
        backend: B::NAME,
        scenario,
        unit: "tasks/s",
        library,
        baseline: raw,
        ratio: library / raw,
        higher_is_better: true,
        runs: plan.runs,
        target: Some(target),
        baseline_name: "raw claim + complete loop, prepared once",
        cpu: Some(against_raw(cpu)),
        plot,
    };
    let each_call = median(&by_raw_each_call);
    Ok([
        figure(
            format!("drain {tasks}: retry_pending(100) on 2 workers"),
            median(&by_rounds),
            0.85,
            cpu_rounds,
            Plot::Throughput("drain: retry_pending(100) on 2 workers"),
        ),
        figure(
            format!("drain {tasks}: 2 relays, batch 100"),
            median(&by_relays),
            0.90,
            cpu_relays,
            Plot::Throughput("drain: 2 relays, batch 100"),
        ),
        Figure {
            backend: B::NAME,
            scenario: format!("drain {tasks}: the raw loop prepared on every call (sql_query)"),
            unit: "tasks/s",
            library: each_call,
            baseline: raw,
            ratio: each_call / raw,
            higher_is_better: true,
            runs: plan.runs,
            target: None,
            baseline_name: "raw claim + complete loop, prepared once",
            cpu: Some(against_raw(cpu_raw_each_call)),
            plot: Plot::None,
        },
    ]
    .into_iter()
    .chain(cpu_figures)
    .collect())
}
