//! When a relay, or a worker's rounds, last claimed tasks and last wrote
//! results back: kept by the claim loop (or the round) and read for each
//! heartbeat.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use tokio::time::Instant;

use crate::Heartbeat;

/// The start, and its last claim and write as microseconds after
/// it (0: never), so the claim loop records them without a lock.
#[derive(Debug)]
pub(crate) struct Activity {
    started: Instant,
    claimed: AtomicU64,
    wrote: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            claimed: AtomicU64::new(0),
            wrote: AtomicU64::new(0),
        }
    }

    /// Now, as stored: microseconds since the start, at least 1.
    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_micros())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// A claim took tasks.
    pub(crate) fn claimed(&self) {
        self.claimed.store(self.now(), Ordering::Relaxed);
    }

    /// A write put results back.
    pub(crate) fn wrote(&self) {
        self.wrote.store(self.now(), Ordering::Relaxed);
    }

    /// The heartbeat of the relay or worker named `owner`, as of now.
    pub(crate) fn heartbeat(&self, owner: &str) -> Heartbeat {
        let now = self.now();
        let since = |at: &AtomicU64| match at.load(Ordering::Relaxed) {
            0 => None,
            at => Some(Duration::from_micros(now.saturating_sub(at))),
        };
        let mut beat = Heartbeat::new(owner, Duration::from_micros(now));
        beat.since_claim = since(&self.claimed);
        beat.since_write = since(&self.wrote);
        beat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_heartbeat_says_how_long_ago_each_happened() {
        let activity = Activity::new();
        let beat = activity.heartbeat("relay-1");
        assert_eq!((beat.since_claim, beat.since_write), (None, None));
        tokio::time::advance(Duration::from_secs(3)).await;
        activity.claimed();
        tokio::time::advance(Duration::from_secs(2)).await;
        activity.wrote();
        tokio::time::advance(Duration::from_secs(1)).await;
        let beat = activity.heartbeat("relay-1");
        assert_eq!(beat.owner, "relay-1");
        assert_eq!(beat.up, Duration::from_secs(6));
        assert_eq!(beat.since_claim, Some(Duration::from_secs(3)));
        assert_eq!(beat.since_write, Some(Duration::from_secs(1)));
    }
}
