//! Capturing the outbox's spans as OpenTelemetry spans in tests: [`capture`].
//!
//! [`capture`] installs, once for the whole test process, a global `tracing`
//! subscriber that exports every span (all levels) to memory through
//! `tracing-opentelemetry`, and the W3C trace-context propagator as the
//! global propagator. Both are process-wide, so a test binary that captures
//! traces holds only such tests: in another binary the propagator would add
//! `traceparent` headers to tasks other tests compare. Tests in one binary
//! run in parallel and share the capture: pick spans by trace id or task id.

use std::sync::OnceLock;

use opentelemetry::{
    KeyValue, Value,
    trace::{SpanId, TraceId, TracerProvider as _},
};
use opentelemetry_sdk::{
    propagation::TraceContextPropagator,
    trace::{InMemorySpanExporter, SdkTracerProvider, SpanData},
};
use tracing_subscriber::{Registry, layer::SubscriberExt};

/// The spans finished in this process since [`capture`] was first called.
#[derive(Debug, Clone)]
pub struct Traces {
    exporter: InMemorySpanExporter,
    /// Kept so the provider (and its exporter) lives as long as the process.
    _provider: SdkTracerProvider,
}

impl Traces {
    /// Every finished span, oldest first.
    pub fn finished(&self) -> Vec<SpanData> {
        self.exporter.get_finished_spans().unwrap_or_default()
    }

    /// The finished spans named `name` whose attribute `key` is `value`.
    pub fn find(&self, name: &str, key: &str, value: impl Into<Value>) -> Vec<SpanData> {
        let value = value.into();
        self.finished()
            .into_iter()
            .filter(|span| span.name == name && attribute(span, key) == Some(&value))
            .collect()
    }

    /// The finished spans of trace `trace`.
    pub fn of_trace(&self, trace: TraceId) -> Vec<SpanData> {
        self.finished()
            .into_iter()
            .filter(|span| span.span_context.trace_id() == trace)
            .collect()
    }
}

/// The value of attribute `key` of `span`, if set.
pub fn attribute<'s>(span: &'s SpanData, key: &str) -> Option<&'s Value> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| &kv.value)
}

/// The trace id and span id of `span`.
pub fn ids(span: &SpanData) -> (TraceId, SpanId) {
    (span.span_context.trace_id(), span.span_context.span_id())
}

/// Installs the capture (once per process) and returns it.
///
/// If another global subscriber was installed first, nothing is captured;
/// the scenarios that use this then fail saying no span was found.
pub fn capture() -> Traces {
    static TRACES: OnceLock<Traces> = OnceLock::new();
    TRACES
        .get_or_init(|| {
            let exporter = InMemorySpanExporter::default();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .build();
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("diesel-outbox-testkit"));
            let _ = tracing::subscriber::set_global_default(Registry::default().with(layer));
            opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
            Traces {
                exporter,
                _provider: provider,
            }
        })
        .clone()
}
