//! Places a few orders and prints the outbox's metrics as Prometheus
//! scrapes them.

use std::io::Write as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let scrape = telemetry_examples::install_prometheus()?;
    let dir = std::env::temp_dir().join(format!("outbox-prometheus-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let placed = telemetry_examples::place_orders(&dir.join("shop.db"), 5).await;
    std::fs::remove_dir_all(&dir)?;
    placed?;
    std::io::stdout().write_all(scrape.render().as_bytes())?;
    Ok(())
}
