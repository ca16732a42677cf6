//! The trace context enqueue writes into a task's headers, with the W3C
//! propagator installed: a binary of its own, since the propagator is
//! global. Each test installs its own subscriber on its thread.

use diesel_outbox_core::{
    Headers, Task, TaskId,
    limits::{MAX_HEADERS, MAX_HEADERS_BYTES},
    telemetry::{traced_enqueue, traced_enqueue_many},
};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::{propagation::TraceContextPropagator, trace::SdkTracerProvider};
use tracing::{Instrument, Span, level_filters::LevelFilter};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{Layer, filter::Targets, layer::SubscriberExt};

/// Installs the propagator and, on this thread, a subscriber whose
/// OpenTelemetry layer sees every span, or none of the core's with
/// `hide_core`.
fn traced(hide_core: bool) -> tracing::subscriber::DefaultGuard {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let tracer = SdkTracerProvider::builder().build().tracer("test");
    let mut filter = Targets::new().with_default(LevelFilter::TRACE);
    if hide_core {
        filter = filter.with_target("diesel_outbox_core", LevelFilter::OFF);
    }
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter);
    tracing::subscriber::set_default(tracing_subscriber::registry().with(layer))
}

fn ids(span: &Span) -> (TraceId, SpanId) {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    (span_context.trace_id(), span_context.span_id())
}

/// What a fake insert of `task` received, enqueued inside `request`, and
/// the ids of the span the insert ran in.
async fn enqueue_in(request: Span, task: Task) -> (Headers, (TraceId, SpanId)) {
    let mut inserted = None;
    traced_enqueue(task, |task| {
        let slot = &mut inserted;
        // Inside the future: the insert runs in the enqueue's span.
        async move {
            *slot = Some((task.headers, ids(&Span::current())));
            Ok(TaskId::new(1))
        }
    })
    .instrument(request)
    .await
    .expect("the fake insert succeeds");
    inserted.expect("the insert ran")
}

fn traceparent(trace: TraceId, span: SpanId) -> String {
    format!("00-{trace}-{span}-01")
}

#[tokio::test]
async fn the_enqueue_span_context_is_written() {
    let _guard = traced(false);
    let request = tracing::info_span!("request");
    let (trace, request_id) = ids(&request);
    let (headers, (insert_trace, enqueue_id)) =
        enqueue_in(request, Task::new("order.created", 1, "{}")).await;
    assert_eq!(insert_trace, trace);
    assert_ne!(
        enqueue_id, request_id,
        "the insert runs in the outbox.enqueue span"
    );
    assert_eq!(
        headers.get("traceparent"),
        Some(&traceparent(trace, enqueue_id))
    );
}

#[tokio::test]
async fn a_hidden_enqueue_span_passes_on_the_current_span() {
    let _guard = traced(true);
    let request = tracing::info_span!("request");
    let (trace, request_id) = ids(&request);
    let (headers, _) = enqueue_in(request, Task::new("order.created", 1, "{}")).await;
    assert_eq!(
        headers.get("traceparent"),
        Some(&traceparent(trace, request_id))
    );
}

#[tokio::test]
async fn a_header_the_caller_set_is_kept_in_any_case() {
    let _guard = traced(false);
    let theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let task = Task::new("order.created", 1, "{}").header("TraceParent", theirs);
    let (headers, _) = enqueue_in(tracing::info_span!("request"), task).await;
    assert_eq!(
        headers.into_iter().collect::<Vec<_>>(),
        [("TraceParent".to_owned(), theirs.to_owned())]
    );
}

#[tokio::test]
async fn nothing_is_added_past_a_header_bound() {
    let _guard = traced(false);
    let with = |n: usize, value: &str| {
        let headers: Headers = (0..n)
            .map(|i| (format!("h{i:02}"), value.to_owned()))
            .collect();
        Task::new("order.created", 1, "{}").headers(headers)
    };
    // One header short of the count bound: the context fits.
    let (headers, _) = enqueue_in(tracing::info_span!("request"), with(MAX_HEADERS - 1, "")).await;
    assert!(headers.contains_key("traceparent"));
    assert!(
        !headers.contains_key("tracestate"),
        "an empty tracestate is left out"
    );
    // At the count bound: the task goes in as built.
    let (headers, _) = enqueue_in(tracing::info_span!("request"), with(MAX_HEADERS, "")).await;
    assert_eq!(headers.len(), MAX_HEADERS);
    assert!(!headers.contains_key("traceparent"));
    // Within a few bytes of the size bound: the same.
    let big = "v".repeat(MAX_HEADERS_BYTES - 3 - 20);
    let (headers, _) = enqueue_in(tracing::info_span!("request"), with(1, &big)).await;
    assert_eq!(headers.len(), 1);
}

#[tokio::test]
async fn a_batch_carries_its_enqueue_span_context() {
    let _guard = traced(false);
    let request = tracing::info_span!("request");
    let (trace, request_id) = ids(&request);
    let mut inserted = None;
    let tasks = vec![
        Task::new("order.created", 1, "{}"),
        Task::new("order.paid", 1, "{}"),
    ];
    traced_enqueue_many(tasks, |tasks| {
        let slot = &mut inserted;
        async move {
            *slot = Some((tasks, ids(&Span::current())));
            Ok(vec![TaskId::new(1), TaskId::new(2)])
        }
    })
    .instrument(request)
    .await
    .expect("the fake insert succeeds");
    let (tasks, (_, enqueue_id)) = inserted.expect("the insert ran");
    assert_ne!(
        enqueue_id, request_id,
        "the insert runs in the outbox.enqueue span"
    );
    for task in tasks {
        assert_eq!(
            task.headers.get("traceparent"),
            Some(&traceparent(trace, enqueue_id))
        );
    }
}
