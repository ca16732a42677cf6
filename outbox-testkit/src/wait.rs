//! Waiting for a condition that no signal announces.

use std::time::Duration;

/// Re-checks `done` every 20 ms until it holds (or fails).
///
/// Prefer a signal (the handler doubles' `wait_for_*`, `Worker::wait_idle`);
/// this is for state another process leaves behind, such as the rows a
/// killed process's last statements commit after it died.
pub async fn eventually(done: impl AsyncFn() -> anyhow::Result<bool>) -> anyhow::Result<()> {
    while !done().await? {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
