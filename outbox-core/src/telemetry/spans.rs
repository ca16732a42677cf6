//! The spans the outbox opens, with OpenTelemetry messaging field names.
//!
//! Each is created through `tracing`'s macros, so a span no subscriber wants
//! costs one cached interest check.

use tracing::{Span, field::Empty};

use crate::{Task, TaskId};

/// A count as a span field: `tracing-opentelemetry` exports `i64` fields as
/// integers but unsigned ones as text.
pub(crate) fn int(count: impl TryInto<i64>) -> i64 {
    count.try_into().unwrap_or(i64::MAX)
}

/// `messaging.system` of every span.
pub(super) const SYSTEM: &str = "outbox";

/// One `enqueue`: the insert of `task` in the caller's transaction.
pub(super) fn enqueue_span(task: &Task) -> Span {
    tracing::info_span!(
        "outbox.enqueue",
        "otel.kind" = "producer",
        "messaging.system" = SYSTEM,
        "messaging.operation.type" = "send",
        "messaging.operation.name" = "enqueue",
        "messaging.destination.name" = %task.kind,
        "messaging.message.id" = Empty,
    )
}

/// One `enqueue_many`: the insert of `tasks` in the caller's transaction.
/// The destination is named when every task has one kind.
pub(super) fn enqueue_many_span(tasks: &[Task]) -> Span {
    let span = tracing::info_span!(
        "outbox.enqueue",
        "otel.kind" = "producer",
        "messaging.system" = SYSTEM,
        "messaging.operation.type" = "send",
        "messaging.operation.name" = "enqueue_many",
        "messaging.batch.message_count" = int(tasks.len()),
        "messaging.destination.name" = Empty,
    );
    if !span.is_disabled()
        && let Some((first, rest)) = tasks.split_first()
        && rest.iter().all(|task| task.kind == first.kind)
    {
        span.record("messaging.destination.name", first.kind.as_str());
    }
    span
}

/// One attempt of task `id`: the handler runs inside it.
pub(crate) fn attempt_span(id: TaskId, kind: &str, version: i32, attempt: i64) -> Span {
    tracing::info_span!(
        "outbox.attempt",
        "otel.kind" = "consumer",
        "otel.status_code" = Empty,
        "messaging.system" = SYSTEM,
        "messaging.operation.type" = "process",
        "messaging.operation.name" = "attempt",
        "messaging.destination.name" = kind,
        "messaging.message.id" = id.get(),
        "outbox.version" = version,
        "outbox.attempt" = attempt,
        "outbox.outcome" = Empty,
    )
}

/// One call of a batch handler for `size` deliveries of `kind` at
/// `version`: the handler runs inside it, and each delivery's attempt span
/// follows from it.
pub(crate) fn batch_span(kind: &str, version: i32, size: usize) -> Span {
    tracing::info_span!(
        "outbox.batch",
        "otel.kind" = "consumer",
        "messaging.system" = SYSTEM,
        "messaging.operation.type" = "process",
        "messaging.operation.name" = "batch",
        "messaging.destination.name" = kind,
        "messaging.batch.message_count" = int(size),
        "outbox.version" = version,
    )
}

/// One claim of task `id` (a send right after commit).
pub(crate) fn claim_span(id: TaskId) -> Span {
    tracing::debug_span!(
        "outbox.claim",
        "otel.kind" = "client",
        "messaging.system" = SYSTEM,
        "messaging.operation.type" = "receive",
        "messaging.operation.name" = "claim",
        "messaging.message.id" = id.get(),
    )
}

/// One claim of up to `requested` due tasks; record how many came back in
/// `messaging.batch.message_count`.
pub(crate) fn claim_due_span(requested: usize) -> Span {
    tracing::debug_span!(
        "outbox.claim",
        "otel.kind" = "client",
        "messaging.system" = SYSTEM,
        "messaging.operation.type" = "receive",
        "messaging.operation.name" = "claim_due",
        "outbox.batch.requested" = int(requested),
        "messaging.batch.message_count" = Empty,
    )
}

/// One statement writing `count` attempt results; record how many applied
/// (the others lost their fence) in `outbox.applied`.
pub(crate) fn write_span(count: usize) -> Span {
    tracing::debug_span!(
        "outbox.write",
        "otel.kind" = "client",
        "messaging.system" = SYSTEM,
        "messaging.operation.type" = "settle",
        "messaging.operation.name" = "complete",
        "messaging.batch.message_count" = int(count),
        "outbox.applied" = Empty,
    )
}

/// One claim of a relay, of up to `requested` tasks, and the start of their
/// handlers; record `outbox.claimed` and `outbox.expired`.
pub(crate) fn relay_cycle_span(requested: usize) -> Span {
    tracing::debug_span!(
        "outbox.relay.cycle",
        "messaging.system" = SYSTEM,
        "outbox.batch.requested" = int(requested),
        "outbox.claimed" = Empty,
        "outbox.expired" = Empty,
    )
}

/// One compensation round claiming `batch_size` tasks at a time; record
/// `outbox.claimed` at its end.
pub(crate) fn round_span(batch_size: usize) -> Span {
    tracing::debug_span!(
        "outbox.round",
        "messaging.system" = SYSTEM,
        "outbox.batch.requested" = int(batch_size),
        "outbox.claimed" = Empty,
    )
}
