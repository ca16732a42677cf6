//! Watching when a relay claims, in tests: [`ClaimWatch`].
//!
//! Each claim a relay makes is an `outbox.relay.cycle` span: it begins when
//! the claim starts and records `outbox.claimed` when the claim comes back.
//! A [`ClaimWatch`] is a `tracing` subscriber for one relay's run (see
//! [`ClaimWatch::watching`]) that notes both, so a test can wait for a claim
//! to have come back, for example to commit a task while the relay sleeps
//! until its poll, with a signal instead of a sleep.
//!
//! ```no_run
//! use std::time::Instant;
//!
//! use diesel_outbox_core::{Maintenance, Relay};
//! use diesel_outbox_testkit::relay_claims::ClaimWatch;
//! use tokio_util::sync::CancellationToken;
//!
//! async fn example<S: Maintenance>(relay: Relay<S>) {
//!     let claims = ClaimWatch::new();
//!     let started = Instant::now();
//!     let shutdown = CancellationToken::new();
//!     let running = claims.watching(relay.run(shutdown.clone()));
//!     let test = async {
//!         // The relay's first claim came back: until a wake-up or its
//!         // poll, it claims nothing more.
//!         claims.returned_since(started, 1).await;
//!         // ... commit a task and wait for its delivery ...
//!         shutdown.cancel();
//!     };
//!     let (_report, ()) = tokio::join!(running, test);
//! }
//! ```

use std::{collections::HashMap, future::Future, time::Instant};

use tokio::sync::watch;
use tracing::{
    Dispatch, Subscriber,
    field::{Field, Visit},
    instrument::WithSubscriber,
    span::{Attributes, Id, Record},
};
use tracing_subscriber::{
    Registry,
    layer::{Context, Layer, SubscriberExt},
};

/// The name of the span of one relay claim.
const CYCLE: &str = "outbox.relay.cycle";

/// The field a claim's span records when the claim comes back.
const CLAIMED: &str = "outbox.claimed";

/// The claims of one relay run: which are under way, and when each of those
/// that came back had started.
#[derive(Debug, Clone)]
pub struct ClaimWatch {
    claims: watch::Sender<Claims>,
}

#[derive(Debug, Default)]
struct Claims {
    /// The claims under way, by span, with when each started.
    running: HashMap<Id, Instant>,
    /// When each claim that came back had started, in the order they came
    /// back.
    returned: Vec<Instant>,
}

impl ClaimWatch {
    /// A watch that has seen no claim yet.
    pub fn new() -> Self {
        Self {
            claims: watch::Sender::new(Claims::default()),
        }
    }

    /// `run` (a relay's `run` future) with this watch as its `tracing`
    /// subscriber. What the relay's loop itself emits (its claim spans, and
    /// its warnings) comes here, and only the claim spans are kept; the
    /// tasks it spawns (claims, handlers, writes, maintenance) still report
    /// to the global subscriber.
    pub fn watching<F: Future>(&self, run: F) -> impl Future<Output = F::Output> + use<F> {
        let layer = Watcher {
            claims: self.claims.clone(),
        };
        run.with_subscriber(Dispatch::new(Registry::default().with(layer)))
    }

    /// Waits until at least `count` claims that started after `after` have
    /// come back and no claim is under way.
    pub async fn returned_since(&self, after: Instant, count: usize) {
        let mut claims = self.claims.subscribe();
        // The sender lives in `self`, so the channel cannot close here.
        let _ = claims
            .wait_for(|claims| {
                claims.running.is_empty()
                    && claims.returned.iter().filter(|at| **at > after).count() >= count
            })
            .await;
    }
}

impl Default for ClaimWatch {
    fn default() -> Self {
        Self::new()
    }
}

/// The [`Layer`] behind a [`ClaimWatch`].
struct Watcher {
    claims: watch::Sender<Claims>,
}

impl<S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S> for Watcher {
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        metadata.name() == CYCLE
    }

    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attributes.metadata().name() == CYCLE {
            self.claims.send_modify(|claims| {
                claims.running.insert(id.clone(), Instant::now());
            });
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut claimed = HasField(CLAIMED, false);
        values.record(&mut claimed);
        if claimed.1 {
            self.claims.send_modify(|claims| {
                if let Some(started) = claims.running.remove(id) {
                    claims.returned.push(started);
                }
            });
        }
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        // A claim that failed records nothing, and ends here.
        self.claims
            .send_if_modified(|claims| claims.running.remove(&id).is_some());
    }
}

/// A visitor that notes whether a record holds the field named `.0`.
struct HasField(&'static str, bool);

impl Visit for HasField {
    fn record_debug(&mut self, field: &Field, _: &dyn std::fmt::Debug) {
        self.1 |= field.name() == self.0;
    }
}
