//! Places a few orders and prints their traces with OpenTelemetry's stdout
//! exporter: each `shipping.notify` span is in the trace of the
//! `order.place` span that enqueued its task.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let provider =
        telemetry_examples::install_tracing(opentelemetry_stdout::SpanExporter::default())?;
    let dir = std::env::temp_dir().join(format!("outbox-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let placed = telemetry_examples::place_orders(&dir.join("shop.db"), 2).await;
    std::fs::remove_dir_all(&dir)?;
    placed?;
    provider.shutdown()?;
    Ok(())
}
