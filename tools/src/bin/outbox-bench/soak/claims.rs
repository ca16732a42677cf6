//! How long the relays' claims take, as the library times them: a
//! `tracing` layer that hears only the `outbox.claim` spans and records,
//! for each, the time from its start to the moment its claim statement
//! last returned (the span is entered only while the claim is polled; the
//! deliveries that follow it run in spans of their own).
//!
//! Every other span and event is of no interest to it. Beside it, the
//! library's events of level `INFO` and above are printed to stderr; the
//! relays' spans and events below that level still cost what a disabled
//! callsite costs.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use tracing::{Level, Metadata, Subscriber, span, subscriber::Interest};
use tracing_subscriber::{
    Layer,
    filter::Targets,
    layer::{Context, SubscriberExt as _},
    registry::LookupSpan,
};

/// The span the library opens around each claim.
const CLAIM: &str = "outbox.claim";

/// Claim times recorded since they were last taken.
#[derive(Clone, Default)]
pub(crate) struct ClaimTimes(Arc<Mutex<Vec<Duration>>>);

impl ClaimTimes {
    /// Makes this the process's subscriber, beside one that prints the
    /// library's events of level `INFO` and above (a relay's warnings, a
    /// purge that fell behind) to stderr; fails if one is set already.
    pub(crate) fn install(&self) -> anyhow::Result<()> {
        let events = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_filter(library_events());
        let subscriber = tracing_subscriber::registry()
            .with(ClaimLayer(self.clone()))
            .with(events);
        tracing::subscriber::set_global_default(subscriber)
            .map_err(|error| anyhow::anyhow!("timing the claims: {error}"))
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

/// The library's crates (`diesel_outbox_core`, `diesel_outbox_sql`, ...),
/// at level `INFO` and above.
fn library_events() -> Targets {
    Targets::new().with_target("diesel_outbox", Level::INFO)
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

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for ClaimLayer {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if is_claim(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        is_claim(metadata)
    }

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

    #[test]
    fn the_library_s_events_are_printed_from_info_up() {
        let events = library_events();
        let maintainer = "diesel_outbox_core::relay::maintainer";
        assert!(events.would_enable(maintainer, &Level::INFO));
        assert!(events.would_enable("diesel_outbox_sql::store", &Level::WARN));
        assert!(!events.would_enable(maintainer, &Level::DEBUG));
        assert!(!events.would_enable("diesel_async", &Level::WARN));
    }

    #[test]
    fn a_claim_span_is_timed_from_its_start_to_its_last_exit() {
        let times = ClaimTimes::default();
        let subscriber = tracing_subscriber::registry().with(ClaimLayer(times.clone()));
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
