//! How long the relays' claims take, as the library times them: a
//! `tracing` layer that hears only the `outbox.claim` spans and records,
//! for each, the time from its start to the moment its claim statement
//! last returned (the span is entered only while the claim is polled; the
//! deliveries that follow it run in spans of their own).
//!
//! Beside it, a second layer prints the library's events of level `INFO`
//! and above to stderr. Each layer filters by callsite, so every other
//! span and event (the library's spans among them) costs what a disabled
//! callsite costs.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use tracing::{Level, Metadata, Subscriber, span};
use tracing_subscriber::{
    Layer,
    filter::filter_fn,
    fmt::MakeWriter,
    layer::{Context, SubscriberExt as _},
    registry::LookupSpan,
};

/// The span the library opens around each claim.
const CLAIM: &str = "outbox.claim";

/// Claim times recorded since they were last taken.
#[derive(Clone, Default)]
pub(crate) struct ClaimTimes(Arc<Mutex<Vec<Duration>>>);

impl ClaimTimes {
    /// Makes [`subscriber`](Self::subscriber), printing to stderr, the
    /// process's subscriber; fails if one is set already.
    pub(crate) fn install(&self) -> anyhow::Result<()> {
        tracing::subscriber::set_global_default(self.subscriber(std::io::stderr))
            .map_err(|error| anyhow::anyhow!("timing the claims: {error}"))
    }

    /// A subscriber that times the claims into this, and writes the
    /// library's events of level `INFO` and above (a relay's warnings, a
    /// purge cycle that fell behind) to `events`.
    fn subscriber<W>(&self, events: W) -> impl Subscriber + Send + Sync + 'static
    where
        W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
    {
        let printed = tracing_subscriber::fmt::layer()
            .with_writer(events)
            .with_ansi(false)
            .with_filter(filter_fn(is_library_event));
        tracing_subscriber::registry()
            .with(ClaimLayer(self.clone()).with_filter(filter_fn(is_claim)))
            .with(printed)
    }

    /// The times recorded since the last call, and forgets them.
    pub(crate) fn take(&self) -> Vec<Duration> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn record(&self, took: Duration) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(took);
    }
}

/// An event of the library's crates (`diesel_outbox_core`,
/// `diesel_outbox_sql`, ...) of level `INFO` and above; no span.
/// (Levels order by verbosity: `ERROR` and `WARN` are below `INFO`.)
fn is_library_event(metadata: &Metadata<'_>) -> bool {
    metadata.is_event()
        && metadata.target().starts_with("diesel_outbox")
        && *metadata.level() <= Level::INFO
}

/// When a claim span began, and when it was last left.
struct Started {
    at: Instant,
    left: Option<Instant>,
}

struct ClaimLayer(ClaimTimes);

fn is_claim(metadata: &Metadata<'_>) -> bool {
    metadata.is_span() && metadata.name() == CLAIM
}

/// Sees only the spans [`is_claim`] lets through: it is added with that
/// filter, which the subscriber asks once per callsite.
impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for ClaimLayer {
    fn on_new_span(&self, _: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Started {
                at: Instant::now(),
                left: None,
            });
        }
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(started) = span.extensions_mut().get_mut::<Started>()
        {
            started.left = Some(Instant::now());
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(started) = span.extensions().get::<Started>()
            && let Some(left) = started.left
        {
            self.0.record(left.saturating_duration_since(started.at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a subscriber printed.
    #[derive(Clone, Default)]
    struct Printed(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Printed {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_library_s_events_are_printed_from_info_up_beside_the_claim_timer() {
        let (times, printed) = (ClaimTimes::default(), Printed::default());
        let writer = printed.clone();
        let subscriber = times.subscriber(move || writer.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "diesel_outbox_core::relay::maintainer", "fell behind");
            tracing::warn!(target: "diesel_outbox_sql::store", "could not write");
            tracing::debug!(target: "diesel_outbox_core::relay::maintainer", "a debug event");
            tracing::warn!(target: "diesel_async", "not the library");
            let attempt = tracing::info_span!(target: "diesel_outbox_core", "outbox.attempt");
            attempt.in_scope(|| tracing::info!(target: "diesel_outbox_core", "in a span"));
            tracing::debug_span!("outbox.claim").in_scope(|| ());
        });
        let printed = String::from_utf8_lossy(&printed.0.lock().unwrap()).into_owned();
        assert!(printed.contains("fell behind"), "{printed}");
        assert!(printed.contains("could not write"), "{printed}");
        assert!(printed.contains("in a span"), "{printed}");
        assert!(!printed.contains("a debug event"), "{printed}");
        assert!(!printed.contains("not the library"), "{printed}");
        assert_eq!(printed.lines().count(), 3, "{printed}");
        assert_eq!(times.take().len(), 1, "the claim is still timed");
    }

    #[test]
    fn a_claim_span_is_timed_from_its_start_to_its_last_exit() {
        let times = ClaimTimes::default();
        let subscriber = times.subscriber(std::io::sink);
        tracing::subscriber::with_default(subscriber, || {
            let claim = tracing::debug_span!("outbox.claim");
            let other = tracing::info_span!("outbox.attempt");
            std::thread::sleep(Duration::from_millis(5));
            claim.in_scope(|| std::thread::sleep(Duration::from_millis(20)));
            other.in_scope(|| ());
            // Held on after the claim returned, as a batch's deliveries do.
            std::thread::sleep(Duration::from_millis(300));
            drop((claim, other));
        });
        let taken = times.take();
        assert_eq!(taken.len(), 1, "{taken:?}");
        assert!(
            taken[0] >= Duration::from_millis(25) && taken[0] < Duration::from_millis(300),
            "{taken:?}"
        );
        assert!(times.take().is_empty());
    }
}
