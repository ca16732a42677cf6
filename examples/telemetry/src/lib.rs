//! The outbox's telemetry, exported: metrics to Prometheus
//! (`cargo run -p telemetry-examples --bin prometheus`) and traces to an
//! OpenTelemetry exporter (`cargo run -p telemetry-examples --bin traces`).
//! Both run a small shop on a SQLite file, so they need no server.
//!
//! [`place_orders`] is the shop: each order is enqueued inside an
//! `order.place` span and sent after commit to a handler that opens a
//! `shipping.notify` span. [`install_prometheus`] and [`install_tracing`] install the
//! exporters. With the `opentelemetry` feature of the backend and the W3C
//! propagator installed, the handler's span joins the order's trace.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let scrape = telemetry_examples::install_prometheus()?;
//! let dir = tempdir()?;
//! telemetry_examples::place_orders(&dir.join("shop.db"), 3).await?;
//! assert!(scrape.render().contains("outbox_sent_total"));
//! # Ok(())
//! # }
//! # fn tempdir() -> std::io::Result<std::path::PathBuf> { Ok(std::env::temp_dir()) }
//! ```

use std::path::Path;

use anyhow::Context as _;
use diesel_outbox_sqlite::{
    SqliteStore, establish,
    outbox::{Delivery, Registry, Task, Worker, handler_fn},
    run_migrations, transaction,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::{
    propagation::TraceContextPropagator,
    trace::{SdkTracerProvider, SpanExporter},
};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// The kind of task the shop enqueues.
pub const ORDER_CREATED: &str = "order.created";

/// Installs a Prometheus recorder as the global `metrics` recorder; render
/// the scrape text with the handle (or serve it, with the exporter's
/// `http-listener` feature).
pub fn install_prometheus() -> anyhow::Result<PrometheusHandle> {
    PrometheusBuilder::new()
        .install_recorder()
        .context("installing the Prometheus recorder")
}

/// Installs a global `tracing` subscriber that sends every span to
/// `exporter` through OpenTelemetry, and the W3C trace-context propagator
/// that carries a trace across the outbox. Shut the returned provider down
/// at exit, so every span is exported.
pub fn install_tracing(exporter: impl SpanExporter + 'static) -> anyhow::Result<SdkTracerProvider> {
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("telemetry-examples"));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .context("installing the tracing subscriber")?;
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    Ok(provider)
}

/// Places `orders` orders on the SQLite file at `path` (created and
/// migrated): each enqueued inside an `order.place` span, then delivered to
/// a handler that opens a `shipping.notify` span.
pub async fn place_orders(path: &Path, orders: u32) -> anyhow::Result<()> {
    let url = path.to_str().context("a UTF-8 database path")?;
    run_migrations(establish(url).await?).await?;
    let registry = Registry::builder()
        .handler(
            ORDER_CREATED,
            1,
            handler_fn(|delivery: Delivery| async move {
                let order: serde_json::Value = delivery.json()?;
                tracing::info_span!("shipping.notify", order = %order["order"])
                    .in_scope(|| tracing::info!("shipping notified"));
                Ok(())
            }),
        )
        .build()?;
    let worker = Worker::new(SqliteStore::connect(url, 4)?, registry)?;
    let mut conn = establish(url).await?;
    for order in 0..orders {
        let task = Task::json(ORDER_CREATED, 1, &serde_json::json!({ "order": order }))?;
        transaction(&worker, &mut conn, async |mut tx| {
            // ... insert the order row on tx.conn() ...
            tx.enqueue(task).await?;
            anyhow::Ok(())
        })
        .instrument(tracing::info_span!("order.place", order = i64::from(order)))
        .await?;
    }
    // Sent right after each commit; wait for those sends, then catch up
    // with one round, as a relay would.
    worker.wait_idle().await;
    worker.retry_pending(100).await?;
    Ok(())
}

/// `docs/telemetry.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/telemetry.md")]
pub struct Telemetry;
