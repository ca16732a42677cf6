//! Scenario 3: from commit to handler start.

use std::time::{Duration, Instant};

use diesel_async::AsyncConnection;
use diesel_outbox_core::{Registry, Relay, RelayConfig, Store, Task, TaskId, Worker};
use diesel_outbox_sql::{SqlBacked as _, WriteTurnGuard};
use tokio_util::sync::CancellationToken;

use super::{
    Plan,
    counting::Counting,
    raw::Raw,
    stats::{ms, percentile},
};

const KIND: &str = "bench.latency";

/// Latencies of one way of sending.
pub(crate) struct Latencies {
    pub(crate) backend: &'static str,
    pub(crate) scenario: &'static str,
    pub(crate) samples: Vec<Duration>,
    pub(crate) target_p99_ms: Option<f64>,
}

impl Latencies {
    pub(crate) fn p(&self, q: f64) -> f64 {
        ms(percentile(&self.samples, q))
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": self.backend,
            "scenario": self.scenario,
            "samples": self.samples.len(),
            "p50_ms": self.p(0.5),
            "p90_ms": self.p(0.9),
            "p99_ms": self.p(0.99),
            "max_ms": self.p(1.0),
            "target_p99_ms": self.target_p99_ms,
        })
    }
}

/// How tasks are sent after commit.
#[derive(Clone, Copy)]
enum Mode {
    SendAsync,
    Relay,
}

/// Enqueues `count` tasks one transaction at a time and measures commit to
/// handler start.
async fn measure_one<B: Raw>(
    db: &B,
    store: B::Store,
    mode: Mode,
    poll: Duration,
    count: usize,
) -> anyhow::Result<Vec<Duration>> {
    let handler = Counting::timing();
    let registry = Registry::builder()
        .handler(KIND, 1, handler.clone())
        .build()?;
    let worker = Worker::new(store.clone(), registry)?;
    let shutdown = CancellationToken::new();
    let relay = match mode {
        Mode::Relay => {
            let config = RelayConfig::default().poll_interval(poll).retention(None);
            let relay = Relay::new(worker.clone(), config)?;
            let shutdown = shutdown.clone();
            Some(tokio::spawn(async move { relay.run(shutdown).await }))
        }
        Mode::SendAsync => None,
    };
    let mut conn = db.connect().await?;
    let mut committed: Vec<(TaskId, Instant)> = Vec::with_capacity(count);
    for n in 0..count {
        // In the store's turn to write, as the `transaction` helpers are.
        let turn = WriteTurnGuard::take(store.turn()).await?;
        let id = conn
            .transaction::<_, anyhow::Error, _>(async |tx| {
                Ok(store
                    .enqueue(tx, Task::new(KIND, 1, format!("{{\"n\":{n}}}")))
                    .await?)
            })
            .await?;
        drop(turn);
        committed.push((id, Instant::now()));
        if let Mode::SendAsync = mode {
            worker.send_async(id);
        }
        // Space the commits a little, like requests arriving, so each
        // latency is that of one task rather than of a queue.
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    if let Mode::SendAsync = mode {
        // send_async leaves a task to the relay when the worker is at its
        // concurrency; this scenario runs no relay, so a round takes those
        // (their latency, round included, stays in the samples).
        worker.wait_idle().await;
        worker.retry_pending(count).await?;
    }
    tokio::time::timeout(Duration::from_secs(60), handler.wait_for(count))
        .await
        .map_err(|_| anyhow::anyhow!("not every task reached its handler within 60 s"))?;
    worker.wait_idle().await;
    shutdown.cancel();
    if let Some(relay) = relay {
        relay.await?;
    }
    let starts = handler.starts();
    committed
        .iter()
        .map(|(id, at)| {
            starts
                .get(id)
                .map(|start| start.saturating_duration_since(*at))
                .ok_or_else(|| anyhow::anyhow!("task {id} never reached its handler"))
        })
        .collect()
}

/// send_async, the relay polling every 100 ms, and (PostgreSQL) NOTIFY.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Latencies>> {
    db.reset().await?;
    let count = plan.latency_tasks;
    let store = db.store().clone();
    let mut out = vec![
        Latencies {
            backend: B::NAME,
            scenario: "send_async right after commit",
            samples: measure_one(db, store.clone(), Mode::SendAsync, Duration::ZERO, count).await?,
            target_p99_ms: Some(10.0),
        },
        Latencies {
            backend: B::NAME,
            scenario: "relay alone, polling every 100 ms",
            samples: measure_one(db, store, Mode::Relay, Duration::from_millis(100), count).await?,
            // Bounded by the poll interval by design: no target.
            target_p99_ms: None,
        },
    ];
    if let Some(notifying) = db.notifying_store() {
        out.push(Latencies {
            backend: B::NAME,
            scenario: "relay alone, woken by NOTIFY (poll 10 s)",
            samples: measure_one(db, notifying, Mode::Relay, Duration::from_secs(10), count)
                .await?,
            target_p99_ms: Some(50.0),
        });
    }
    Ok(out)
}
