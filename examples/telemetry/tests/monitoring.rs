//! The alert rules and the Grafana dashboard of `monitoring/` name only
//! metrics the outbox exports: each one the library declares, and each one
//! an alert reads from a relay found in a real relay's scrape.

use std::{
    collections::BTreeSet,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use diesel_outbox_sqlite::{
    SqliteStore, establish,
    outbox::{
        Delivery, HandlerError, Registry, Relay, RelayConfig, RetryPolicy, Task, Worker,
        WorkerConfig, consume::metrics::CONSUMER_METRICS, handler_fn, telemetry::METRICS,
    },
    run_migrations, transaction,
};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusHandle, PrometheusRecorder};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The files, from the workspace's root.
const RULES: &str = include_str!("../../../monitoring/prometheus/outbox-rules.yml");
const DASHBOARD: &str = include_str!("../../../monitoring/grafana/outbox-dashboard.json");

/// The gauge a relay sets last when it publishes its stats.
const LAST_STATS_GAUGE: &str = "outbox_keys_stopped";

/// The Prometheus recorder, telling `published` when a relay has set
/// [`LAST_STATS_GAUGE`].
#[derive(Debug)]
pub(crate) struct Signalling {
    inner: PrometheusRecorder,
    published: Arc<Notify>,
}

impl Signalling {
    /// The recorder, its scrape handle and the signal.
    pub(crate) fn new() -> (Self, PrometheusHandle, Arc<Notify>) {
        let inner = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = inner.handle();
        let published = Arc::new(Notify::new());
        let recorder = Self {
            inner,
            published: Arc::clone(&published),
        };
        (recorder, handle, published)
    }
}

impl Recorder for Signalling {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, text: SharedString) {
        self.inner.describe_counter(key, unit, text);
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, text: SharedString) {
        self.inner.describe_gauge(key, unit, text);
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, text: SharedString) {
        self.inner.describe_histogram(key, unit, text);
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.inner.register_counter(key, metadata)
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        let gauge = self.inner.register_gauge(key, metadata);
        if key.name() == LAST_STATS_GAUGE {
            // Registered right before its value is set; the waiter reads
            // the scrape after a yield, once the set has happened.
            self.published.notify_one();
        }
        gauge
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.inner.register_histogram(key, metadata)
    }
}

/// Every `outbox_...` name in `text`, without a histogram's or summary's
/// suffixes.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("outbox_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let name = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        // Anchors and file names (`outbox-rules.yml`) are not metrics.
        if name.len() > "outbox_".len() {
            names.insert(name.to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// Runs a relay over a SQLite outbox where one task fails for good and
/// one is retried, until it has published its stats; then checks the
/// names the rules and the dashboard use.
pub(crate) async fn the_rules_and_dashboard_read_exported_metrics(
    scrape: &PrometheusHandle,
    published: &Notify,
) -> anyhow::Result<()> {
    let dir = super::scratch("monitoring")?;
    let path = dir.join("relay.db");
    let url = path.to_str().context("a UTF-8 path")?.to_owned();
    run_migrations(establish(&url).await?).await?;
    let refused_once = Arc::new(AtomicBool::new(false));
    let registry = Registry::builder()
        .handler(
            "payment.refused",
            1,
            handler_fn(|_: Delivery| async {
                Err(HandlerError::permanent(anyhow::anyhow!("card declined")))
            }),
        )
        .handler(
            "payment.retried",
            1,
            handler_fn(move |_: Delivery| {
                let first = !refused_once.swap(true, Ordering::SeqCst);
                async move {
                    match first {
                        true => Err(HandlerError::retryable(anyhow::anyhow!("timed out"))),
                        false => Ok(()),
                    }
                }
            }),
        )
        .build()?;
    let config = WorkerConfig::default().retry(RetryPolicy::new(
        Duration::from_millis(10),
        Duration::from_millis(10),
        0.0,
    )?);
    let worker = Worker::with_config(SqliteStore::connect(&url, 4)?, registry, config)?;
    let mut conn = establish(&url).await?;
    transaction(&worker, &mut conn, async |mut tx| {
        tx.enqueue(Task::new("payment.refused", 1, "{}")).await?;
        tx.enqueue(Task::new("payment.retried", 1, "{}")).await?;
        anyhow::Ok(())
    })
    .await?;
    worker.wait_idle().await;

    let relay = Relay::new(worker, RelayConfig::default())?;
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });
    tokio::time::timeout(Duration::from_secs(60), published.notified())
        .await
        .context("the relay published no stats within a minute")?;
    tokio::task::yield_now().await;
    shutdown.cancel();
    let report = running.await?;
    anyhow::ensure!(report.errors == 0, "{report:?}");
    std::fs::remove_dir_all(&dir)?;

    let text = scrape.render();
    let declared: BTreeSet<&str> = METRICS
        .iter()
        .chain(CONSUMER_METRICS.iter())
        .map(|(name, _, _)| *name)
        .collect();
    let consumers: BTreeSet<&str> = CONSUMER_METRICS.iter().map(|(name, _, _)| *name).collect();
    let (in_rules, on_dashboard) = (metric_names(RULES), metric_names(DASHBOARD));
    anyhow::ensure!(
        in_rules.len() >= 7,
        "too few metrics found in the rules: {in_rules:?}"
    );
    for name in in_rules.iter().chain(&on_dashboard) {
        anyhow::ensure!(
            declared.contains(name.as_str()),
            "`{name}` is not a metric the outbox exports"
        );
    }
    // What alerts read of a relay is in the relay's own scrape; the
    // consumers' names come from the one list their flow records by.
    for name in in_rules
        .iter()
        .filter(|name| !consumers.contains(name.as_str()))
    {
        anyhow::ensure!(
            text.lines()
                .any(|line| line.starts_with(&format!("{name} "))
                    || line.starts_with(&format!("{name}{{"))),
            "an alert reads `{name}`, which the relay did not export:\n{text}"
        );
    }
    Ok(())
}

/// `promtool` finds the rules valid, and their unit tests pass: each alert
/// fires on the series written for it, and none on a healthy outbox.
#[test]
fn promtool_checks_the_rules_and_runs_their_tests() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../monitoring/prometheus");
    for args in [
        ["check", "rules", "outbox-rules.yml"],
        ["test", "rules", "outbox-rules.test.yml"],
    ] {
        let run = std::process::Command::new("promtool")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|error| {
                panic!("running promtool: {error}; install it with apt-get install -y prometheus")
            });
        assert!(
            run.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
    }
}
