//! W3C trace context across the outbox: written into a task's headers at
//! enqueue, made the parent of the attempt's span. Without the
//! `opentelemetry` feature both ends do nothing.

/// The trace context of one enqueue, taken once and written into each task.
#[derive(Debug)]
pub(super) struct Capture {
    #[cfg(feature = "opentelemetry")]
    context: opentelemetry::Context,
}

#[cfg(not(feature = "opentelemetry"))]
mod noop {
    use tracing::Span;

    use super::Capture;
    use crate::{Headers, Task};

    impl Capture {
        /// Nothing to capture without the `opentelemetry` feature.
        pub(in crate::telemetry) fn of(_span: &Span) -> Self {
            Self {}
        }

        /// Leaves `task` as it is.
        pub(in crate::telemetry) fn inject(&self, _task: &mut Task) {}
    }

    /// Makes the trace context carried in `headers` the parent of `span`;
    /// does nothing without the `opentelemetry` feature.
    pub(crate) fn adopt_parent(_span: &Span, _headers: &Headers) {}
}

#[cfg(not(feature = "opentelemetry"))]
pub(crate) use noop::adopt_parent;

#[cfg(feature = "opentelemetry")]
mod otel {
    use opentelemetry::{
        Context,
        propagation::{Extractor, Injector},
        trace::TraceContextExt,
    };
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::Capture;
    use crate::{
        Headers, Task,
        limits::{MAX_HEADER_NAME_BYTES, MAX_HEADERS, MAX_HEADERS_BYTES},
    };

    impl Capture {
        /// The context of `span` or, when `span` has none (disabled, or not
        /// seen by an OpenTelemetry layer), of the current span.
        pub(in crate::telemetry) fn of(span: &Span) -> Self {
            let context = span.context();
            let context = if context.span().span_context().is_valid() {
                context
            } else {
                Span::current().context()
            };
            Self { context }
        }

        /// Writes the captured context into `task`'s headers through the
        /// global propagator, unless the task already has a header of a name
        /// it would write, or the new headers would break a header bound.
        pub(in crate::telemetry) fn inject(&self, task: &mut Task) {
            let mut fresh = Vec::new();
            opentelemetry::global::get_text_map_propagator(|propagator| {
                propagator.inject_context(&self.context, &mut Collect(&mut fresh));
            });
            // An empty value carries nothing (the W3C propagator writes an
            // empty `tracestate` when there is none).
            fresh.retain(|(_, value)| !value.is_empty());
            if fresh.is_empty() {
                return;
            }
            if let Some((name, _)) = fresh
                .iter()
                .find(|(name, _)| find(&task.headers, name).is_some())
            {
                tracing::debug!(
                    header = %name,
                    "the task sets trace context itself; enqueue adds none"
                );
                return;
            }
            if let Err(reason) = fits(&task.headers, &fresh) {
                tracing::debug!(reason, "trace context left out of the task's headers");
                return;
            }
            task.headers.extend(fresh);
        }
    }

    /// Makes the trace context carried in `headers` the parent of `span`,
    /// which must not have been entered yet.
    pub(crate) fn adopt_parent(span: &Span, headers: &Headers) {
        if headers.is_empty() || span.is_disabled() {
            return;
        }
        let context: Context = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&Read(headers))
        });
        if context.span().span_context().is_valid() {
            // Fails only without an OpenTelemetry layer, when there is no
            // OpenTelemetry span to give a parent.
            let _ = span.set_parent(context);
        }
    }

    /// Whether `headers` plus `fresh` stay within the header bounds.
    fn fits(headers: &Headers, fresh: &[(String, String)]) -> Result<(), &'static str> {
        if headers.len() + fresh.len() > MAX_HEADERS {
            return Err("the task would have more headers than allowed");
        }
        let bytes = |(name, value): (&String, &String)| name.len() + value.len();
        let total: usize = headers.iter().map(bytes).sum::<usize>()
            + fresh.iter().map(|(n, v)| bytes((n, v))).sum::<usize>();
        if total > MAX_HEADERS_BYTES {
            return Err("the task's headers would exceed their size bound");
        }
        let bad = |(name, value): &(String, String)| {
            name.is_empty()
                || name.len() > MAX_HEADER_NAME_BYTES
                || name.contains('\0')
                || value.contains('\0')
        };
        if fresh.iter().any(bad) {
            return Err("the propagator wrote a header the outbox cannot store");
        }
        Ok(())
    }

    /// The header named `name`, in any case.
    fn find<'h>(headers: &'h Headers, name: &str) -> Option<&'h str> {
        headers.get(name).map(String::as_str).or_else(|| {
            headers
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.as_str())
        })
    }

    /// Collects what a propagator writes.
    struct Collect<'a>(&'a mut Vec<(String, String)>);

    impl Injector for Collect<'_> {
        fn set(&mut self, key: &str, value: String) {
            self.0.push((key.to_owned(), value));
        }
    }

    /// Reads a task's headers for a propagator, names in any case.
    struct Read<'a>(&'a Headers);

    impl Extractor for Read<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            find(self.0, key)
        }

        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(String::as_str).collect()
        }
    }
}

#[cfg(feature = "opentelemetry")]
pub(crate) use otel::adopt_parent;

#[cfg(all(test, feature = "opentelemetry"))]
mod tests {
    use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::layer::SubscriberExt;

    use crate::{Task, TaskId, telemetry::traced_enqueue};

    /// This binary never sets a global propagator: the default writes nothing,
    /// even though the enqueue runs in a span OpenTelemetry sees.
    #[tokio::test]
    async fn without_a_propagator_no_header_is_added() {
        let tracer = SdkTracerProvider::builder().build().tracer("test");
        let subscriber =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
        let _guard = tracing::subscriber::set_default(subscriber);
        let request = tracing::info_span!("request");
        assert!(request.context().span().span_context().is_valid());
        let mut inserted = None;
        let task = Task::new("order.created", 1, "{}").header("correlation-id", "7");
        traced_enqueue(task, |task| {
            inserted = Some(task);
            std::future::ready(Ok(TaskId::new(1)))
        })
        .instrument(request)
        .await
        .expect("the fake insert succeeds");
        let headers = inserted.expect("the insert ran").headers;
        assert_eq!(headers.keys().collect::<Vec<_>>(), ["correlation-id"]);
    }
}
