//! The scenarios, and what they share: a database and a record directory
//! each, relay processes, and the closing check that nothing was lost.

pub(crate) mod abandon;
#[cfg(any(feature = "rabbitmq", feature = "redis", feature = "kafka"))]
pub(crate) mod broker_outage;
pub(crate) mod clock;
pub(crate) mod hang;
#[cfg(feature = "kafka")]
pub(crate) mod kafka;
pub(crate) mod kill;
#[cfg(feature = "nats")]
pub(crate) mod nats;
pub(crate) mod pool;
#[cfg(feature = "rabbitmq")]
pub(crate) mod rabbitmq;
#[cfg(feature = "redis")]
pub(crate) mod redis;
pub(crate) mod restart;
pub(crate) mod trickle;

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use diesel_outbox_core::CancellationToken;
use diesel_outbox_sql::BackendKind;

use super::{
    db::{self, ChaosDb},
    progress::Progress,
    records::{self, Fence, ProcessLog},
    relays::Relays,
    report::Report,
    run_dir::RunDir,
};

/// Every scenario, in the order they run.
pub(crate) const ALL: [&str; 11] = [
    "restart", "kill", "nats", "rabbitmq", "redis", "kafka", "pool", "abandon", "trickle", "clock",
    "hang",
];

/// What a scenario runs with.
#[derive(Debug)]
pub(crate) struct Ctx<'a, B: ChaosDb> {
    pub(crate) run: &'a RunDir,
    pub(crate) server: &'a mut B::Server,
    #[cfg(feature = "nats")]
    pub(crate) nats: Option<&'a mut super::servers::nats::NatsServer>,
    #[cfg(feature = "rabbitmq")]
    pub(crate) rabbitmq: Option<&'a mut super::servers::rabbitmq::RabbitServer>,
    #[cfg(feature = "redis")]
    pub(crate) redis: Option<&'a mut super::servers::redis::RedisServer>,
    #[cfg(feature = "kafka")]
    pub(crate) kafka: Option<&'a mut super::servers::kafka::KafkaServer>,
    pub(crate) backend: BackendKind,
    pub(crate) quick: bool,
    pub(crate) progress: Progress,
}

impl<B: ChaosDb> Ctx<'_, B> {
    /// `quick` in a quick run, else `full`.
    pub(crate) fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick { quick } else { full }
    }
}

/// A scenario's database, record directory, and relay starter.
#[derive(Debug)]
pub(crate) struct Setup<B> {
    pub(crate) db: B,
    pub(crate) dir: PathBuf,
    pub(crate) relays: Relays,
}

/// Creates the scenario's database and record directory.
pub(crate) async fn setup<B: ChaosDb>(ctx: &Ctx<'_, B>, name: &str) -> anyhow::Result<Setup<B>> {
    use super::servers::DbServer as _;
    let db_name = format!("chaos_{name}");
    let db: B = db::create(&ctx.server.admin_url(), &db_name).await?;
    let dir = ctx.run.subdir(&format!("{}-{name}", ctx.backend.name()))?;
    let relays = Relays::new(ctx.backend, &ctx.server.url(&db_name), dir.clone());
    Ok(Setup { db, dir, relays })
}

/// Runs scenario `name` and reports it; an error ends the scenario and is
/// reported as a failure.
pub(crate) async fn run<B: ChaosDb>(name: &'static str, ctx: &mut Ctx<'_, B>) -> Report {
    let mut report = Report::new(name, ctx.backend.name());
    let started = Instant::now();
    let result = match name {
        "restart" => restart::run(ctx, &mut report).await,
        "kill" => kill::run(ctx, &mut report).await,
        #[cfg(feature = "nats")]
        "nats" => nats::run(ctx, &mut report).await,
        #[cfg(feature = "rabbitmq")]
        "rabbitmq" => rabbitmq::run(ctx, &mut report).await,
        #[cfg(feature = "redis")]
        "redis" => redis::run(ctx, &mut report).await,
        #[cfg(feature = "kafka")]
        "kafka" => kafka::run(ctx, &mut report).await,
        "pool" => pool::run(ctx, &mut report).await,
        "abandon" => abandon::run(ctx, &mut report).await,
        "trickle" => trickle::run(ctx, &mut report).await,
        "clock" => clock::run(ctx, &mut report).await,
        "hang" => hang::run(ctx, &mut report).await,
        _ => Err(anyhow::anyhow!(
            "outbox-chaos was built without what scenario {name} needs"
        )),
    };
    if let Err(error) = result {
        report.error = Some(format!("{error:#}"));
    }
    report.seconds = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    report
}

/// Sleeps `duration`, refreshing the status line every second.
pub(crate) async fn pause(
    progress: &Progress,
    duration: Duration,
    what: &str,
    committed: impl Fn() -> usize,
    dir: &Path,
) {
    let until = tokio::time::Instant::now() + duration;
    while tokio::time::Instant::now() < until {
        progress.status(what, committed(), dir);
        tokio::time::sleep_until(until.min(tokio::time::Instant::now() + Duration::from_secs(1)))
            .await;
    }
}

/// Runs `work`, then cancels `stop` (the producers), however `work` ended.
pub(crate) async fn then_stop<T>(stop: &CancellationToken, work: impl Future<Output = T>) -> T {
    let out = work.await;
    stop.cancel();
    out
}

/// What was delivered, once everything committed was.
#[derive(Debug)]
pub(crate) struct Delivered {
    /// Every process's records.
    pub(crate) logs: Vec<ProcessLog>,
    /// The committed orders.
    pub(crate) orders: Vec<i64>,
    /// Every effect per order: `(µs, owner, fence)`, oldest first.
    pub(crate) deliveries: HashMap<i64, Vec<(u64, String, Fence)>>,
}

impl Delivered {
    /// Effects beyond the first, over all orders.
    pub(crate) fn duplicates(&self) -> usize {
        self.deliveries
            .values()
            .map(|d| d.len().saturating_sub(1))
            .sum()
    }
}

/// Waits until every committed order (read from the database: its commit
/// may have returned an error and still have happened) has a delivery in
/// the records and every task reads as finished, at most `limit`; checks
/// `lost` and `every task finished`, and reports the duplicates.
pub(crate) async fn settle<B: ChaosDb>(
    db: &B,
    dir: &Path,
    limit: Duration,
    progress: &Progress,
    report: &mut Report,
) -> anyhow::Result<Delivered> {
    progress.phase("waiting until every committed order is delivered");
    let orders = db.order_ids().await?;
    let deadline = tokio::time::Instant::now() + limit;
    let missing = loop {
        let logs = records::read_dir(dir)?;
        let deliveries = records::deliveries(&logs);
        let missing = orders
            .iter()
            .filter(|order| !deliveries.contains_key(order))
            .count();
        progress.status("draining", orders.len(), dir);
        if missing == 0 || tokio::time::Instant::now() >= deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    report.check(
        "lost",
        missing == 0,
        format!(
            "{missing} of {} committed orders never delivered",
            orders.len()
        ),
    );
    let ids = db::task_ids(db).await?;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let finished = db::wait_finished(db.store(), &ids, left.max(Duration::from_secs(10))).await;
    report.check(
        "every task finished",
        finished.is_ok(),
        match &finished {
            Ok(()) => format!("{} of {} tasks", ids.len(), ids.len()),
            Err(error) => format!("{error:#}"),
        },
    );
    // Read again: deliveries may have happened while the tasks finished.
    let logs = records::read_dir(dir)?;
    let deliveries = records::deliveries(&logs);
    let delivered = Delivered {
        logs,
        orders,
        deliveries,
    };
    report.figure("orders committed", delivered.orders.len(), "");
    report.figure("duplicate deliveries", delivered.duplicates(), "");
    Ok(delivered)
}

/// The value at quantile `q` of `values` (sorted here).
#[allow(clippy::cast_possible_truncation)] // an index within the slice
pub(crate) fn quantile(values: &mut [Duration], q: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort_unstable();
    let index = ((values.len() - 1) as f64 * q).round() as usize;
    values[index.min(values.len() - 1)]
}
