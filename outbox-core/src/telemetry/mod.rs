//! Telemetry: metrics through the `metrics` facade, spans through `tracing`,
//! and (with the `opentelemetry` feature) W3C trace context carried across
//! the outbox in each task's headers. [telemetry.md](https://github.com/outbox-rs/outbox/blob/main/docs/telemetry.md)
//! says how to export them.
//!
//! # Metrics
//!
//! Install any `metrics` recorder to collect them; [`describe`] gives it
//! each metric's unit and help text.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `outbox_enqueued_total` | counter | | tasks enqueued |
//! | `outbox_sent_total` | counter | `kind` | attempts that succeeded |
//! | `outbox_retried_total` | counter | `kind` | attempts that failed and will be retried |
//! | `outbox_failed_total` | counter | `kind` | tasks that failed for good |
//! | `outbox_expired_total` | counter | | tasks that expired unsent |
//! | `outbox_handler_duration_seconds` | histogram | `kind` | handler run time |
//! | `outbox_commit_to_send_seconds` | histogram | `kind` | from insert to the first attempt's start |
//! | `outbox_backlog` | gauge | | unfinished tasks (available, waiting, running, blocked), as the relay last counted |
//! | `outbox_tasks` | gauge | `status` | tasks per status, as the relay last counted (`succeeded` is an estimate) |
//! | `outbox_oldest_due_age_seconds` | gauge | | how long the task due longest has waited to be sent, as the relay last read it (0: none due) |
//! | `outbox_oldest_running_age_seconds` | gauge | | how long the running task whose lease ends first has been claimed, as the relay last read it (0: none running) |
//! | `outbox_relays_live` | gauge | | relays whose heartbeats still count, as the relay last read them |
//! | `outbox_keys_stopped` | gauge | | ordering keys whose head failed for good with later tasks waiting behind it, as the relay last counted |
//! | `outbox_promoted_total` | counter | | waiting tasks made available once due |
//! | `outbox_rescued_total` | counter | | running tasks whose lease lapsed, made available again (or failed when out of attempts) |
//! | `outbox_relay_unwritten` | gauge | | finished results waiting for their write |
//! | `outbox_send_async_deferred_total` | counter | | `send_async` calls left to the relay because `concurrency` sends were running |
//!
//! # Spans
//!
//! Field names follow OpenTelemetry's messaging conventions where they fit
//! (`messaging.system` is always `outbox`); `otel.kind` sets the span kind
//! for `tracing-opentelemetry`.
//!
//! | name | level | `messaging.operation.type` | what it covers |
//! |---|---|---|---|
//! | `outbox.enqueue` | info | `send` | one `enqueue` or `enqueue_many` (the insert, inside the caller's transaction) |
//! | `outbox.attempt` | info | `process` | one delivery: a handler runs inside it; a batch handler's attempts follow from its `outbox.batch` |
//! | `outbox.batch` | info | `process` | one call of a batch handler; the handler runs inside it |
//! | `outbox.claim` | debug | `receive` | one claim: of a task by id, or of a batch of due tasks |
//! | `outbox.write` | debug | `settle` | one statement writing attempt results |
//! | `outbox.relay.cycle` | debug | | one claim of a relay and the start of its handlers |
//! | `outbox.round` | debug | | one [`Worker::retry_pending`](crate::Worker::retry_pending) |
//!
//! # Trace context
//!
//! With the `opentelemetry` feature, enqueue asks the globally configured
//! text-map propagator (`opentelemetry::global::set_text_map_propagator`) to
//! write the context of the `outbox.enqueue` span (or, when that span is
//! disabled, of the current span) into the task's headers: for the W3C
//! propagator `traceparent`, and `tracestate` when the trace carries state
//! (a header the propagator leaves empty is not added). Each attempt extracts it again and
//! makes it the parent of the `outbox.attempt` span, so the handler's spans
//! belong to the trace that enqueued the task. The default propagator
//! writes nothing. Nothing is added when the task already has a header of a
//! name the propagator would write (any case), nor when the added headers
//! would break a bound of [`limits`](crate::limits): the task is enqueued
//! as built, without trace context, and a debug event says why.

mod context;
mod enqueue;
mod instruments;
mod kind_keys;
mod spans;

pub use enqueue::{traced_enqueue, traced_enqueue_many};
pub use instruments::{METRICS, describe, enqueued, expired};

pub(crate) use context::adopt_parent;
pub(crate) use instruments::{moved, send_async_deferred, stats, unwritten};
pub(crate) use kind_keys::KindKeys;
pub(crate) use spans::{
    attempt_span, batch_span, claim_due_span, claim_span, int, relay_cycle_span, round_span,
    write_span,
};
