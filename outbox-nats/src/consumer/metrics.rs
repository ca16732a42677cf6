//! The consumer's metrics, through the `metrics` facade.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `outbox_consumer_applied_total` | counter | `consumer` | messages applied (committed, then acknowledged) |
//! | `outbox_consumer_duplicates_total` | counter | `consumer` | deliveries the inbox found applied already: acknowledged without the handler |
//! | `outbox_consumer_failed_total` | counter | `consumer` | deliveries that failed and were redelivered later (`-NAK` with a delay) |
//! | `outbox_consumer_dead_lettered_total` | counter | `consumer` | messages given up: dead-lettered and terminated |
//! | `outbox_consumer_lag` | gauge | `consumer` | messages pending for the consumer in the stream, as of the latest delivery |

use metrics::Unit;

/// Every consumer metric: name, unit and meaning, as in the table above.
pub const CONSUMER_METRICS: [(&str, Unit, &str); 5] = [
    (
        "outbox_consumer_applied_total",
        Unit::Count,
        "messages applied (committed, then acknowledged)",
    ),
    (
        "outbox_consumer_duplicates_total",
        Unit::Count,
        "deliveries the inbox found applied already, acknowledged without the handler",
    ),
    (
        "outbox_consumer_failed_total",
        Unit::Count,
        "deliveries that failed and were redelivered later",
    ),
    (
        "outbox_consumer_dead_lettered_total",
        Unit::Count,
        "messages given up: dead-lettered and terminated",
    ),
    (
        "outbox_consumer_lag",
        Unit::Count,
        "messages pending for the consumer in the stream, as of the latest delivery",
    ),
];

/// Describes the consumer metrics to the installed recorder.
pub fn describe_consumer_metrics() {
    for (name, unit, help) in CONSUMER_METRICS {
        if name.ends_with("_total") {
            metrics::describe_counter!(name, unit, help);
        } else {
            metrics::describe_gauge!(name, unit, help);
        }
    }
}

pub(crate) fn counted(name: &'static str, consumer: &str) {
    metrics::counter!(name, "consumer" => consumer.to_owned()).increment(1);
}

pub(crate) fn lag(consumer: &str, pending: u64) {
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!("outbox_consumer_lag", "consumer" => consumer.to_owned()).set(pending as f64);
}
