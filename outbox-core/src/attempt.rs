//! Running one handler call, for one delivery or a batch: timeout, panic
//! capture and the attempts' spans.

use std::{
    any::Any,
    future::Future,
    panic::AssertUnwindSafe,
    sync::Arc,
    time::{Duration, Instant},
};

use futures_util::{FutureExt, future::Either};
use tracing::{Instrument, Span};

use crate::{
    BatchHandler, ClaimedTask, Delivery, HandlerError, Handling, OutboxId,
    telemetry::{self, KindKeys},
    transition::Outcome,
};

/// A delivery ready for its handler: the delivery, its attempt span, and
/// when its task was inserted.
struct Prepared {
    delivery: Delivery,
    span: Span,
    created_at: chrono::DateTime<chrono::Utc>,
}

/// Turns `record` into the delivery its handler receives, named after
/// `outbox`, with its attempt span: its parent is the trace that enqueued
/// the task, and `claim` is linked.
fn prepare(record: ClaimedTask, outbox: Option<&OutboxId>, claim: &Span) -> Prepared {
    let created_at = record.created_at;
    let runs = record.runs();
    let delivery = match outbox {
        Some(outbox) => Delivery::of_outbox(record.id, runs, record.task, outbox.clone()),
        None => Delivery::new(record.id, runs, record.task),
    };
    let task = &delivery.task;
    let span = telemetry::attempt_span(delivery.id, &task.kind, task.version, delivery.attempt);
    // Before the span is entered: its parent is the trace that enqueued the
    // task, and the claim that took it is linked.
    telemetry::adopt_parent(&span, delivery.headers());
    span.follows_from(claim);
    Prepared {
        delivery,
        span,
        created_at,
    }
}

/// Counts the time from commit to a first attempt's start.
fn count_first_attempt(
    metrics: &KindKeys,
    attempt: i64,
    created_at: chrono::DateTime<chrono::Utc>,
) {
    if attempt == 1 {
        let since_insert = (chrono::Utc::now() - created_at)
            .to_std()
            .unwrap_or_default();
        metrics.commit_to_send(since_insert);
    }
}

/// The outcome of one handler's answer.
fn answered(result: Result<(), HandlerError>) -> Outcome {
    match result {
        Ok(()) => Outcome::Succeeded,
        Err(error) if error.is_permanent() => Outcome::Permanent(error.to_string()),
        Err(error) => Outcome::Retryable(error.to_string()),
    }
}

/// Records `outcome` on the attempt's span and logs it.
fn close_span(span: &Span, outcome: &Outcome) {
    span.record("outbox.outcome", outcome_name(outcome));
    if !matches!(outcome, Outcome::Succeeded) {
        span.record("otel.status_code", "error");
    }
    match outcome {
        Outcome::Succeeded => tracing::debug!(parent: span, "delivered"),
        Outcome::Retryable(error) | Outcome::Permanent(error) | Outcome::NoHandler(error) => {
            tracing::warn!(parent: span, error = %error, "attempt failed");
        }
    }
}

/// Why a delivery could not go out under its outbox's name. Always known:
/// every claim reads the outbox id first. Were it not, the delivery must
/// not go out under another outbox's name: retried.
const UNNAMED: &str = "the outbox's id was not read before the claim";

/// Runs the handler registered for `record` and says how the attempt went.
///
/// A handler that exceeds `timeout` is dropped and the attempt is retryable;
/// a panic is caught and recorded the same way, so the worker lives on.
/// A kind registered with a [`BatchHandler`](crate::BatchHandler) gets a
/// batch of one. The attempt's span follows from `claim`, the span of the
/// claim that took the task (disabled when there is none), which is dropped
/// once linked. `metrics` are the keys of the task's kind
/// ([`Registry::kind_keys`]), which the caller counts the outcome with.
///
/// The delivery, its span and the handler are prepared here, before the
/// returned future runs, so the future holds the task once and nothing of
/// the record it came from: handlers run by the hundred, each future is
/// moved into its slot, and its size is what every start copies. Callers
/// build it right before they run it (a future dropped unpolled leaves an
/// attempt span without an outcome).
pub(crate) fn run_handler(
    handler: Option<Handling>,
    record: ClaimedTask,
    outbox: Option<OutboxId>,
    timeout: Duration,
    claim: Span,
    metrics: Arc<KindKeys>,
) -> impl Future<Output = Outcome> + Send + 'static {
    let Prepared {
        delivery,
        span,
        created_at,
    } = prepare(record, outbox.as_ref(), &claim);
    drop(claim); // a relay's cycle ends once its handlers started
    let named = outbox.is_some();
    // Combinators rather than an outer `async` block, which would hold the
    // inner future twice (as captured, and as awaited).
    let call = async move {
        if !named {
            return Outcome::Retryable(UNNAMED.into());
        }
        let Some(handler) = handler else {
            let key = delivery.key();
            return Outcome::NoHandler(format!("no handler registered for {key}"));
        };
        count_first_attempt(&metrics, delivery.attempt, created_at);
        let started = Instant::now();
        // A handler written without `async_trait` may panic before it
        // returns its future: caught too.
        let call = std::panic::catch_unwind(AssertUnwindSafe(|| match handler {
            Handling::One(handler) => Either::Left(async move { handler.handle(delivery).await }),
            Handling::Batch(handler) => Either::Right(async move {
                let mut answers = handler.handle_batch(vec![delivery]).await;
                if answers.len() > 1 {
                    tracing::warn!(
                        answers = answers.len(),
                        deliveries = 1,
                        "batch handler answered more often than it had deliveries; the extra answers are ignored"
                    );
                }
                answers.truncate(1);
                answers.pop().unwrap_or_else(|| Err(no_answer()))
            }),
        }));
        let call = match call {
            Ok(call) => AssertUnwindSafe(call).catch_unwind(),
            Err(panic) => {
                metrics.handler_duration(started.elapsed());
                return Outcome::Retryable(format!("handler panicked: {}", panic_text(&*panic)));
            }
        };
        let result = tokio::time::timeout(timeout, call).await;
        metrics.handler_duration(started.elapsed());
        match result {
            Ok(Ok(answer)) => answered(answer),
            Ok(Err(panic)) => {
                Outcome::Retryable(format!("handler panicked: {}", panic_text(&*panic)))
            }
            Err(_) => Outcome::Retryable(format!("handler timed out after {timeout:?}")),
        }
    };
    call.instrument(span.clone()).map(move |outcome| {
        close_span(&span, &outcome);
        outcome
    })
}

/// What a delivery the batch handler gave no answer for comes to.
fn no_answer() -> HandlerError {
    HandlerError::retryable(anyhow::anyhow!(
        "the batch handler gave no answer for this delivery"
    ))
}

/// Runs `handler` once for `records` (all of one kind and version) and says
/// how each attempt went, in the order given.
///
/// The call shares `timeout`: cut there, or on a panic, every attempt of
/// the batch is retryable. A delivery the handler gave no answer for is
/// retryable. Each attempt has its span, as with [`run_handler`]; the call
/// runs in a span of its own that they follow from.
pub(crate) fn run_batch(
    handler: Arc<dyn BatchHandler>,
    records: Vec<ClaimedTask>,
    outbox: Option<OutboxId>,
    timeout: Duration,
    claim: Span,
    metrics: Arc<KindKeys>,
) -> impl Future<Output = Vec<Outcome>> + Send + 'static {
    let size = records.len();
    let mut spans = Vec::with_capacity(size);
    let mut deliveries = Vec::with_capacity(size);
    let mut first_runs = Vec::new();
    let batch = match records.first() {
        Some(first) => telemetry::batch_span(&first.task.kind, first.task.version, size),
        None => Span::none(),
    };
    batch.follows_from(&claim);
    for record in records {
        let prepared = prepare(record, outbox.as_ref(), &claim);
        prepared.span.follows_from(&batch);
        if prepared.delivery.attempt == 1 {
            first_runs.push(prepared.created_at);
        }
        spans.push(prepared.span);
        deliveries.push(prepared.delivery);
    }
    drop(claim);
    let named = outbox.is_some();
    let call = async move {
        if !named {
            return vec![Outcome::Retryable(UNNAMED.into()); size];
        }
        for created_at in first_runs {
            count_first_attempt(&metrics, 1, created_at);
        }
        let started = Instant::now();
        let call =
            match std::panic::catch_unwind(AssertUnwindSafe(|| handler.handle_batch(deliveries))) {
                Ok(call) => AssertUnwindSafe(call).catch_unwind(),
                Err(panic) => {
                    metrics.handler_duration(started.elapsed());
                    let error = format!("batch handler panicked: {}", panic_text(&*panic));
                    return vec![Outcome::Retryable(error); size];
                }
            };
        let result = tokio::time::timeout(timeout, call).await;
        metrics.handler_duration(started.elapsed());
        match result {
            Ok(Ok(answers)) => {
                if answers.len() > size {
                    tracing::warn!(
                        answers = answers.len(),
                        deliveries = size,
                        "batch handler answered more often than it had deliveries; the extra answers are ignored"
                    );
                }
                let mut answers = answers.into_iter();
                (0..size)
                    .map(|_| answered(answers.next().unwrap_or_else(|| Err(no_answer()))))
                    .collect()
            }
            Ok(Err(panic)) => {
                let error = format!("batch handler panicked: {}", panic_text(&*panic));
                vec![Outcome::Retryable(error); size]
            }
            Err(_) => {
                let error = format!("batch handler timed out after {timeout:?}");
                vec![Outcome::Retryable(error); size]
            }
        }
    };
    call.instrument(batch).map(move |outcomes| {
        for (span, outcome) in spans.iter().zip(&outcomes) {
            close_span(span, outcome);
        }
        outcomes
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
