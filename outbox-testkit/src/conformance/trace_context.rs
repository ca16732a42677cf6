//! Trace context across the outbox: the handler's spans join the trace that
//! enqueued the task. These scenarios install a global subscriber and the
//! W3C propagator ([`traces::capture`]), so they run in a test binary of
//! their own, expanded by [`trace_context_tests!`](crate::trace_context_tests).

use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context as _;
use diesel_outbox_core::{Delivery, Handler, Status, TaskId, handler_fn};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId};
use opentelemetry_sdk::trace::SpanData;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{
    relay::{relay_config, spawn_relay},
    support::{config, enqueue_batch, enqueue_one, get, registry, task, worker},
};
use crate::{
    TestBackend, handler,
    traces::{self, Traces, attribute, ids},
};

/// What a handler saw: the task and its `traceparent` header.
type Seen = Arc<Mutex<Vec<(TaskId, Option<String>)>>>;

/// A handler that opens a `test.handler` span (field `task`), notes the
/// `traceparent` header it received, then hands the delivery to `inner`.
fn tracing_handler(seen: &Seen, inner: impl Handler) -> impl Handler {
    let seen = Arc::clone(seen);
    let inner = Arc::new(inner);
    handler_fn(move |delivery: Delivery| {
        let seen = Arc::clone(&seen);
        let inner = Arc::clone(&inner);
        async move {
            tracing::info_span!("test.handler", task = delivery.id.get()).in_scope(|| {
                let header = delivery.headers().get("traceparent").cloned();
                seen.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((delivery.id, header));
            });
            inner.handle(delivery).await
        }
    })
}

/// The one span of `trace` named `name` whose `key` attribute is `id`.
fn span_of(
    traces: &Traces,
    trace: TraceId,
    name: &str,
    key: &str,
    id: TaskId,
) -> anyhow::Result<SpanData> {
    let value = opentelemetry::Value::I64(id.get());
    let mut found: Vec<SpanData> = traces
        .of_trace(trace)
        .into_iter()
        .filter(|span| span.name == name && attribute(span, key) == Some(&value))
        .collect();
    anyhow::ensure!(
        found.len() == 1,
        "expected one `{name}` span of task {id} in trace {trace}, found {}",
        found.len()
    );
    found.pop().context("checked above")
}

/// A task enqueued inside a span (alone, or in a batch) is handled in that
/// span's trace, whether it is sent right after commit or by a round: the
/// handler's span has the enqueuing span's trace id, the attempt's parent is
/// the `outbox.enqueue` span, and the handler sees the `traceparent` header.
pub async fn a_handler_joins_the_trace_that_enqueued<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let traces = traces::capture();
    let seen = Seen::default();
    let worker = worker(
        db,
        registry(tracing_handler(&seen, handler::recording().0))?,
        config("w"),
    )?;

    let request = tracing::info_span!("test.request");
    let trace = request.context().span().span_context().trace_id();
    anyhow::ensure!(
        trace != TraceId::INVALID,
        "no OpenTelemetry layer sees spans: another global subscriber was installed first"
    );
    let (one, batch) = async {
        let one = enqueue_one(db, task(1)).await?;
        let batch = enqueue_batch(db, vec![task(2), task(3)]).await?;
        anyhow::Ok((one, batch))
    }
    .instrument(request.clone())
    .await?;
    drop(request);

    // Delivered outside the request's span: one right after commit, the
    // batch by a round.
    worker.send(one).await?;
    let round = worker.retry_pending(10).await?;
    assert_eq!(round.succeeded, 2, "{round:?}");

    let record = get(db, one).await?;
    assert_eq!(record.status, Status::Succeeded);
    let stored = record.task.headers.get("traceparent").cloned();
    let prefix = format!("00-{trace}-");
    assert!(
        stored.as_deref().is_some_and(|tp| tp.starts_with(&prefix)),
        "stored traceparent {stored:?} is not of trace {trace}"
    );
    let mut saw = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    saw.sort();
    let all: Vec<TaskId> = [one].into_iter().chain(batch.iter().copied()).collect();
    assert_eq!(saw.iter().map(|(id, _)| *id).collect::<Vec<_>>(), all);
    for (id, header) in &saw {
        assert!(
            header.as_deref().is_some_and(|tp| tp.starts_with(&prefix)),
            "task {id}'s handler saw traceparent {header:?}, not of trace {trace}"
        );
    }

    // The proof: each handler's span is in the enqueuing span's trace.
    for &id in &all {
        let handler = span_of(&traces, trace, "test.handler", "task", id)?;
        assert_eq!(ids(&handler).0, trace);
    }
    // The attempt hangs under the enqueue that wrote its context, and links
    // the claim that took it.
    let enqueue = span_of(
        &traces,
        trace,
        "outbox.enqueue",
        "messaging.message.id",
        one,
    )?;
    let attempt = span_of(
        &traces,
        trace,
        "outbox.attempt",
        "messaging.message.id",
        one,
    )?;
    assert_eq!(attempt.parent_span_id, ids(&enqueue).1);
    assert!(attempt.parent_span_is_remote);
    let claims: Vec<SpanData> = traces
        .finished()
        .into_iter()
        .filter(|span| span.name == "outbox.claim")
        .collect();
    assert!(
        attempt.links.iter().any(|link| {
            claims.iter().any(|claim| {
                ids(claim) == (link.span_context.trace_id(), link.span_context.span_id())
            })
        }),
        "the attempt links no claim span: {:?}",
        attempt.links
    );
    let batch_enqueue: Vec<SpanData> = traces
        .of_trace(trace)
        .into_iter()
        .filter(|span| {
            span.name == "outbox.enqueue"
                && attribute(span, "messaging.operation.name")
                    == Some(&opentelemetry::Value::from("enqueue_many"))
        })
        .collect();
    let [batch_enqueue] = batch_enqueue.as_slice() else {
        anyhow::bail!(
            "expected one enqueue_many span, found {}",
            batch_enqueue.len()
        );
    };
    for &id in &batch {
        let attempt = span_of(&traces, trace, "outbox.attempt", "messaging.message.id", id)?;
        assert_eq!(attempt.parent_span_id, ids(batch_enqueue).1);
    }
    Ok(())
}

/// A `traceparent` the caller set is stored as set (nothing added beside
/// it), and the attempt joins the trace it names.
pub async fn an_explicit_trace_header_is_kept<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    const THEIRS: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let traces = traces::capture();
    let seen = Seen::default();
    let worker = worker(
        db,
        registry(tracing_handler(&seen, handler::recording().0))?,
        config("w"),
    )?;
    let request = tracing::info_span!("test.request");
    anyhow::ensure!(
        request.context().span().span_context().is_valid(),
        "no OpenTelemetry layer sees spans: another global subscriber was installed first"
    );
    let id = enqueue_one(db, task(1).header("traceparent", THEIRS))
        .instrument(request)
        .await?;
    let record = get(db, id).await?;
    assert_eq!(
        record.task.headers.into_iter().collect::<Vec<_>>(),
        [("traceparent".to_owned(), THEIRS.to_owned())]
    );
    worker.send(id).await?;
    let trace = TraceId::from_hex("0af7651916cd43dd8448eb211c80319c")?;
    let attempt = span_of(&traces, trace, "outbox.attempt", "messaging.message.id", id)?;
    assert_eq!(
        attempt.parent_span_id,
        SpanId::from_hex("b7ad6b7169203331")?
    );
    span_of(&traces, trace, "test.handler", "task", id)?;
    Ok(())
}

/// A task a relay delivers is handled in the trace that enqueued it too; its
/// attempt links the claim, which runs in an `outbox.relay.cycle` span
/// counting what the cycle claimed.
pub async fn a_relay_attempt_joins_the_trace_that_enqueued<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let traces = traces::capture();
    let seen = Seen::default();
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(tracing_handler(&seen, mock))?, config("w"))?;
    let request = tracing::info_span!("test.request");
    let trace = request.context().span().span_context().trace_id();
    anyhow::ensure!(
        trace != TraceId::INVALID,
        "no OpenTelemetry layer sees spans: another global subscriber was installed first"
    );
    let id = enqueue_one(db, task(1)).instrument(request).await?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(worker, relay_config(), &shutdown)?;
    handle.wait_for_successes(1).await;
    shutdown.cancel();
    let report = relay.await?;
    assert_eq!(report.succeeded, 1, "{report:?}");

    span_of(&traces, trace, "test.handler", "task", id)?;
    let attempt = span_of(&traces, trace, "outbox.attempt", "messaging.message.id", id)?;
    let finished = traces.finished();
    let claim = finished
        .iter()
        .find(|span| {
            span.name == "outbox.claim"
                && attempt.links.iter().any(|link| {
                    ids(span) == (link.span_context.trace_id(), link.span_context.span_id())
                })
        })
        .context("the attempt links no claim span")?;
    assert_eq!(
        attribute(claim, "messaging.batch.message_count"),
        Some(&opentelemetry::Value::I64(1))
    );
    let cycle = finished
        .iter()
        .find(|span| ids(span) == (claim.span_context.trace_id(), claim.parent_span_id))
        .context("the claim has no parent span")?;
    assert_eq!(cycle.name, "outbox.relay.cycle");
    assert_eq!(
        attribute(cycle, "outbox.claimed"),
        Some(&opentelemetry::Value::I64(1))
    );
    Ok(())
}

/// Expands into one `#[tokio::test]` per trace-context scenario for the
/// given [`TestBackend`](crate::TestBackend) type. Put it in a test binary
/// of its own: the scenarios install a global subscriber and propagator.
#[macro_export]
macro_rules! trace_context_tests {
    ($backend:ty) => {
        $crate::conformance_tests!(@each $backend;
            a_handler_joins_the_trace_that_enqueued,
            an_explicit_trace_header_is_kept,
            a_relay_attempt_joins_the_trace_that_enqueued,
        );
    };
}
