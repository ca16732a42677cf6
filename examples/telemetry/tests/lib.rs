//! The examples, run: the Prometheus scrape names and describes the
//! outbox's metrics, and the exported traces join each handler to the
//! order that enqueued its task. The recorder, subscriber and propagator
//! are global, so one test runs both examples, one after the other.

mod monitoring;

use std::path::PathBuf;

use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};

/// A fresh directory for one test's database.
fn scratch(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("outbox-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_export_metrics_and_traces() -> anyhow::Result<()> {
    // The example's recorder, built as `install_prometheus` builds it,
    // with a signal for when a relay has published its stats.
    let (recorder, scrape, published) = monitoring::Signalling::new();
    metrics::set_global_recorder(recorder)?;
    prometheus_scrapes_described_metrics(&scrape).await?;
    monitoring::the_rules_and_dashboard_read_exported_metrics(&scrape, &published).await?;
    traces_join_each_handler_to_its_order().await
}

async fn prometheus_scrapes_described_metrics(
    scrape: &metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    let dir = scratch("prometheus-example")?;
    telemetry_examples::place_orders(&dir.join("shop.db"), 3).await?;
    std::fs::remove_dir_all(&dir)?;
    let text = scrape.render();
    for line in [
        "# HELP outbox_enqueued_total tasks enqueued",
        "# TYPE outbox_enqueued_total counter",
        "outbox_enqueued_total 3",
        "# HELP outbox_sent_total attempts that succeeded",
        "outbox_sent_total{kind=\"order.created\"} 3",
        "# HELP outbox_handler_duration_seconds handler run time",
        "# TYPE outbox_handler_duration_seconds summary",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line `{line}` in:\n{text}"
        );
    }
    Ok(())
}

fn attribute<'s>(span: &'s SpanData, key: &str) -> Option<&'s Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

async fn traces_join_each_handler_to_its_order() -> anyhow::Result<()> {
    let exporter = InMemorySpanExporter::default();
    let provider = telemetry_examples::install_tracing(exporter.clone())?;
    let dir = scratch("traces-example")?;
    telemetry_examples::place_orders(&dir.join("shop.db"), 2).await?;
    std::fs::remove_dir_all(&dir)?;
    provider.force_flush()?;
    let spans = exporter.get_finished_spans()?;
    let named =
        |name: &str| -> Vec<&SpanData> { spans.iter().filter(|s| s.name == name).collect() };
    let orders = named("order.place");
    let notified = named("shipping.notify");
    assert_eq!((orders.len(), notified.len()), (2, 2), "{spans:#?}");
    for order in orders {
        let number = attribute(order, "order").map(|v| v.to_string());
        let handler = notified
            .iter()
            .find(|s| attribute(s, "order").map(|v| v.to_string()) == number)
            .unwrap_or_else(|| panic!("no shipping.notify span for order {number:?}"));
        assert_eq!(
            handler.span_context.trace_id(),
            order.span_context.trace_id(),
            "order {number:?} and its handler are in different traces"
        );
    }
    Ok(())
}
