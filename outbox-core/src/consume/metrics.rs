//! The consumers' metrics, through the `metrics` facade, the same for every
//! broker.
//!
//! | name | kind | labels | meaning |
//! |---|---|---|---|
//! | `outbox_consumer_applied_total` | counter | `consumer` | messages applied (committed, then acknowledged) |
//! | `outbox_consumer_duplicates_total` | counter | `consumer` | deliveries the inbox found applied already: acknowledged without the handler |
//! | `outbox_consumer_failed_total` | counter | `consumer` | deliveries that failed and were handed back for a later redelivery |
//! | `outbox_consumer_dead_lettered_total` | counter | `consumer` | messages given up: dead-lettered and terminated |
//! | `outbox_consumer_receive_errors_total` | counter | `consumer` | failures to receive messages from the broker (the consumer backs off and tries again) |
//! | `outbox_consumer_lag` | gauge | `consumer` | messages pending for the consumer, as of the latest delivery (where the broker tells) |

use metrics::Unit;

/// Every consumer metric: name, unit and meaning, as in the table above.
pub const CONSUMER_METRICS: [(&str, Unit, &str); 6] = [
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
        "outbox_consumer_receive_errors_total",
        Unit::Count,
        "failures to receive messages from the broker; the consumer backs off and tries again",
    ),
    (
        "outbox_consumer_lag",
        Unit::Count,
        "messages pending for the consumer, as of the latest delivery",
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

/// Counts one event of `name` for `consumer`.
pub fn counted(name: &'static str, consumer: &str) {
    metrics::counter!(name, "consumer" => consumer.to_owned()).increment(1);
}

/// Sets the lag of `consumer` to `pending` messages.
pub fn lag(consumer: &str, pending: u64) {
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!("outbox_consumer_lag", "consumer" => consumer.to_owned()).set(pending as f64);
}
