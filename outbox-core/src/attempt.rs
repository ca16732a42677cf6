//! Running one handler call: timeout, panic capture and the attempt's span.

use std::{
    any::Any,
    future::Future,
    panic::AssertUnwindSafe,
    sync::Arc,
    time::{Duration, Instant},
};

use futures_util::FutureExt;
use tracing::{Instrument, Span};

use crate::{
    Delivery, Record, Registry,
    telemetry::{self, KindKeys},
    transition::Outcome,
};

/// Runs the handler registered for `record` and says how the attempt went.
///
/// A handler that exceeds `timeout` is dropped and the attempt is retryable;
/// a panic is caught and recorded the same way, so the worker lives on.
/// The attempt's span follows from `claim`, the span of the claim that took
/// the task (disabled when there is none), which is dropped once linked.
/// `metrics` are the keys of the task's kind
/// ([`Registry::kind_keys`]), which the caller counts the outcome with.
///
/// The delivery, its span and the handler are prepared here, before the
/// returned future runs, so the future holds the task once and nothing of
/// the record it came from: handlers run by the hundred, each future is
/// moved into its slot, and its size is what every start copies. Callers
/// build it right before they run it (a future dropped unpolled leaves an
/// attempt span without an outcome).
pub(crate) fn run_handler(
    registry: &Registry,
    record: Record,
    timeout: Duration,
    claim: Span,
    metrics: Arc<KindKeys>,
) -> impl Future<Output = Outcome> + Send + 'static {
    let created_at = record.created_at;
    let delivery = Delivery::new(record.id, record.runs(), record.task);
    let key = delivery.key();
    let span = telemetry::attempt_span(delivery.id, &key.kind, key.version, delivery.attempt);
    // Before the span is entered: its parent is the trace that enqueued the
    // task, and the claim that took it is linked.
    telemetry::adopt_parent(&span, delivery.headers());
    span.follows_from(&claim);
    drop(claim); // a relay's cycle ends once its handlers started
    let handler = registry.get(&key).cloned();
    // Combinators rather than an outer `async` block, which would hold the
    // inner future twice (as captured, and as awaited).
    let call = async move {
        let Some(handler) = handler else {
            return Outcome::NoHandler(format!("no handler registered for {key}"));
        };
        if delivery.attempt == 1 {
            let since_insert = (chrono::Utc::now() - created_at)
                .to_std()
                .unwrap_or_default();
            metrics.commit_to_send(since_insert);
        }
        let started = Instant::now();
        // A handler written without `async_trait` may panic before it
        // returns its future: caught too.
        let call = match std::panic::catch_unwind(AssertUnwindSafe(|| handler.handle(delivery))) {
            Ok(call) => AssertUnwindSafe(call).catch_unwind(),
            Err(panic) => {
                metrics.handler_duration(started.elapsed());
                return Outcome::Retryable(format!("handler panicked: {}", panic_text(&*panic)));
            }
        };
        let result = tokio::time::timeout(timeout, call).await;
        metrics.handler_duration(started.elapsed());
        match result {
            Ok(Ok(Ok(()))) => Outcome::Succeeded,
            Ok(Ok(Err(error))) if error.is_permanent() => Outcome::Permanent(error.to_string()),
            Ok(Ok(Err(error))) => Outcome::Retryable(error.to_string()),
            Ok(Err(panic)) => {
                Outcome::Retryable(format!("handler panicked: {}", panic_text(&*panic)))
            }
            Err(_) => Outcome::Retryable(format!("handler timed out after {timeout:?}")),
        }
    };
    call.instrument(span.clone()).map(move |outcome| {
        span.record("outbox.outcome", outcome_name(&outcome));
        if !matches!(outcome, Outcome::Succeeded) {
            span.record("otel.status_code", "error");
        }
        match &outcome {
            Outcome::Succeeded => tracing::debug!(parent: &span, "delivered"),
            Outcome::Retryable(error) | Outcome::Permanent(error) | Outcome::NoHandler(error) => {
                tracing::warn!(parent: &span, error = %error, "attempt failed");
            }
        }
        outcome
    })
}

fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Succeeded => "succeeded",
        Outcome::Retryable(_) => "retryable",
        Outcome::Permanent(_) => "permanent",
        Outcome::NoHandler(_) => "no_handler",
    }
}

pub(crate) fn panic_text(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-text panic payload")
}
