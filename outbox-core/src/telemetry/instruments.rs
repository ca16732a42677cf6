//! The metrics: names, units, descriptions and the calls that record them.
use metrics::{Level, Metadata, Unit};

/// Every metric this crate reports: name, unit and what it means, as in the
/// table in [`telemetry`](crate::telemetry).
pub const METRICS: [(&str, Unit, &str); 17] = [
    ("outbox_enqueued_total", Unit::Count, "tasks enqueued"),
    ("outbox_sent_total", Unit::Count, "attempts that succeeded"),
    (
        "outbox_retried_total",
        Unit::Count,
        "attempts that failed and will be retried",
    ),
    (
        "outbox_failed_total",
        Unit::Count,
        "tasks that failed for good",
    ),
    (
        "outbox_expired_total",
        Unit::Count,
        "tasks that expired unsent",
    ),
    (
        "outbox_handler_duration_seconds",
        Unit::Seconds,
        "handler run time",
    ),
    (
        "outbox_commit_to_send_seconds",
        Unit::Seconds,
        "from a task's insert to its first attempt's start",
    ),
    (
        "outbox_backlog",
        Unit::Count,
        "unfinished tasks (available, waiting, running, blocked), as the relay last counted",
    ),
    (
        "outbox_tasks",
        Unit::Count,
        "tasks per status, as the relay last counted (succeeded is an estimate on large tables)",
    ),
    (
        "outbox_oldest_due_age_seconds",
        Unit::Seconds,
        "how long the task due longest has waited to be sent, as the relay last read it (0: none due)",
    ),
    (
        "outbox_oldest_running_age_seconds",
        Unit::Seconds,
        "how long the running task whose lease ends first has been claimed, as the relay last read it (0: none running)",
    ),
    (
        "outbox_relays_live",
        Unit::Count,
        "relays whose heartbeats still count, as the relay last read them",
    ),
    (
        "outbox_keys_stopped",
        Unit::Count,
        "ordering keys whose head failed for good with later tasks waiting behind it, as the relay last counted",
    ),
    (
        "outbox_promoted_total",
        Unit::Count,
        "waiting tasks made available once due",
    ),
    (
        "outbox_rescued_total",
        Unit::Count,
        "running tasks whose lease lapsed, made available again or failed when out of attempts",
    ),
    (
        "outbox_relay_unwritten",
        Unit::Count,
        "finished results waiting for their write",
    ),
    (
        "outbox_send_async_deferred_total",
        Unit::Count,
        "send_async calls left to the relay because concurrency sends were running",
    ),
];

/// Describes every metric, with its unit, to the installed recorder, so
/// exporters show a help text and unit for each. [`Worker::new`] and
/// [`Relay::new`] call it; call it yourself if you install a recorder later.
///
/// [`Worker::new`]: crate::Worker::new
/// [`Relay::new`]: crate::Relay::new
pub fn describe() {
    for (name, unit, description) in METRICS {
        match name {
            "outbox_handler_duration_seconds" | "outbox_commit_to_send_seconds" => {
                metrics::describe_histogram!(name, unit, description);
            }
            "outbox_backlog"
            | "outbox_tasks"
            | "outbox_oldest_due_age_seconds"
            | "outbox_oldest_running_age_seconds"
            | "outbox_relays_live"
            | "outbox_keys_stopped"
            | "outbox_relay_unwritten" => {
                metrics::describe_gauge!(name, unit, description);
            }
            _ => metrics::describe_counter!(name, unit, description),
        }
    }
}

/// The metadata the `metrics` macros of this module pass with every call;
/// [`KindKeys`](super::KindKeys) passes the same, so every metric reports
/// one target.
pub(super) static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Counts tasks enqueued.
pub fn enqueued(count: usize) {
    metrics::counter!("outbox_enqueued_total").increment(count as u64);
}

/// Counts tasks expired unsent.
pub fn expired(count: u64) {
    metrics::counter!("outbox_expired_total").increment(count);
}

/// Publishes the counts of the last [`Stats`](crate::Stats).
pub(crate) fn stats(stats: &crate::Stats) {
    metrics::gauge!("outbox_backlog").set(stats.backlog() as f64);
    for (status, count) in stats.by_status() {
        metrics::gauge!("outbox_tasks", "status" => status.as_str()).set(count as f64);
    }
    let seconds = |age: Option<std::time::Duration>| age.map_or(0.0, |age| age.as_secs_f64());
    metrics::gauge!("outbox_oldest_due_age_seconds").set(seconds(stats.oldest_due_age));
    metrics::gauge!("outbox_oldest_running_age_seconds").set(seconds(stats.oldest_running_age));
    metrics::gauge!("outbox_relays_live").set(stats.live_relays as f64);
    metrics::gauge!("outbox_keys_stopped").set(stats.stopped_keys as f64);
}

/// Counts the moves of one maintenance step.
pub(crate) fn moved(promoted: u64, rescued: u64) {
    if promoted > 0 {
        metrics::counter!("outbox_promoted_total").increment(promoted);
    }
    if rescued > 0 {
        metrics::counter!("outbox_rescued_total").increment(rescued);
    }
}

/// Publishes how many results wait for their write.
pub(crate) fn unwritten(count: usize) {
    metrics::gauge!("outbox_relay_unwritten").set(count as f64);
}

/// Counts a `send_async` left to the relay because the worker was at its concurrency.
pub(crate) fn send_async_deferred() {
    metrics::counter!("outbox_send_async_deferred_total").increment(1);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use metrics_exporter_prometheus::PrometheusBuilder;

    /// The age gauges, in seconds as Prometheus reads them, and 0 (not
    /// absent) when nothing is due or running, so an alert's comparison
    /// always has a value.
    #[test]
    fn stats_publish_the_ages_in_seconds_and_zero_when_none() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let stats = crate::Stats {
            oldest_due_age: Some(Duration::from_millis(90_500)),
            ..Default::default()
        };
        metrics::with_local_recorder(&recorder, || super::stats(&stats));
        let text = handle.render();
        assert!(
            text.contains("outbox_oldest_due_age_seconds 90.5\n"),
            "{text}"
        );
        assert!(
            text.contains("outbox_oldest_running_age_seconds 0\n"),
            "{text}"
        );
    }
}
