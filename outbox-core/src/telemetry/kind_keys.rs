//! The metric keys labelled with one task kind, built once per kind.
//!
//! The `metrics` macros build a labelled key on every call: the kind copied
//! into a label, the label list allocated, the key hashed, and all of it
//! even with no recorder installed. A relay records three such metrics per
//! delivery, so the registry builds each registered kind's keys once, and
//! every call hands the prebuilt key to whichever recorder is installed at
//! that moment: a recorder installed after the relay started still sees
//! every metric.

use std::time::Duration;

use metrics::{Key, Label};

use super::instruments::METADATA;
use crate::{Status, transition::Completion};

/// The keys of the metrics labelled with one kind.
#[derive(Debug)]
pub(crate) struct KindKeys {
    handler_duration: Key,
    commit_to_send: Key,
    sent: Key,
    retried: Key,
    failed: Key,
}

impl KindKeys {
    /// The keys labelled `kind = kind`.
    pub(crate) fn new(kind: &str) -> Self {
        let key =
            |name: &'static str| Key::from_parts(name, vec![Label::new("kind", kind.to_owned())]);
        Self {
            handler_duration: key("outbox_handler_duration_seconds"),
            commit_to_send: key("outbox_commit_to_send_seconds"),
            sent: key("outbox_sent_total"),
            retried: key("outbox_retried_total"),
            failed: key("outbox_failed_total"),
        }
    }

    /// Records how long a handler for this kind ran.
    pub(crate) fn handler_duration(&self, duration: Duration) {
        metrics::with_recorder(|r| r.register_histogram(&self.handler_duration, &METADATA))
            .record(duration.as_secs_f64());
    }

    /// Records the delay between a task's insert and its first attempt.
    pub(crate) fn commit_to_send(&self, delay: Duration) {
        metrics::with_recorder(|r| r.register_histogram(&self.commit_to_send, &METADATA))
            .record(delay.as_secs_f64());
    }

    /// Counts an attempt's outcome; a claim given back is none.
    pub(crate) fn outcome(&self, completion: &Completion) {
        let key = match (completion.status, &completion.last_error) {
            (Status::Succeeded, _) => &self.sent,
            (Status::Failed | Status::Discarded, _) => &self.failed,
            (_, None) => return,
            (_, Some(_)) => &self.retried,
        };
        metrics::with_recorder(|r| r.register_counter(key, &METADATA)).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
        SharedString, Unit,
    };

    use super::KindKeys;
    use crate::{
        Delivery, Registry, Status, TaskId, handler_fn,
        telemetry::enqueued,
        transition::{Completion, Fence},
    };

    /// Every value recorded, as `name{labels} value`, and the target each
    /// metric was registered with.
    #[derive(Clone, Default)]
    struct Seen {
        values: Arc<Mutex<Vec<String>>>,
        targets: Arc<Mutex<Vec<String>>>,
    }

    struct Value(Seen, String);

    impl Seen {
        fn value(&self, key: &Key, metadata: &Metadata<'_>) -> Arc<Value> {
            self.targets
                .lock()
                .unwrap()
                .push(metadata.target().to_owned());
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            Arc::new(Value(
                self.clone(),
                format!("{}{{{}}}", key.name(), labels.join(",")),
            ))
        }

        fn values(&self) -> Vec<String> {
            std::mem::take(&mut *self.values.lock().unwrap())
        }

        fn targets(&self) -> Vec<String> {
            std::mem::take(&mut *self.targets.lock().unwrap())
        }
    }

    impl Value {
        fn push(&self, value: impl std::fmt::Display) {
            self.0
                .values
                .lock()
                .unwrap()
                .push(format!("{} {value}", self.1));
        }
    }

    impl CounterFn for Value {
        fn increment(&self, value: u64) {
            self.push(value);
        }
        fn absolute(&self, _: u64) {}
    }

    impl HistogramFn for Value {
        fn record(&self, value: f64) {
            self.push(value);
        }
    }

    impl Recorder for Seen {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
            Counter::from_arc(self.value(key, metadata))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(self.value(key, metadata))
        }
    }

    fn completion(status: Status, last_error: Option<&str>) -> Completion {
        Completion {
            fence: Fence {
                id: TaskId::new(1),
                owner: "w".into(),
                attempt: 1,
                ordering_key: None,
            },
            status,
            retry_in: None,
            last_error: last_error.map(str::to_owned),
            released: false,
        }
    }

    /// Keys built before any recorder exists reach the recorder installed
    /// when the value is recorded, labelled with their kind and registered
    /// with the target every other metric has.
    #[test]
    fn prebuilt_keys_reach_a_recorder_installed_later() {
        let keys = KindKeys::new("order.created");
        keys.handler_duration(std::time::Duration::from_millis(250));
        let later = Seen::default();
        metrics::with_local_recorder(&later, || {
            keys.handler_duration(std::time::Duration::from_millis(500));
            keys.commit_to_send(std::time::Duration::from_secs(2));
            keys.outcome(&completion(Status::Succeeded, Some("")));
            keys.outcome(&completion(Status::Waiting, Some("boom")));
            keys.outcome(&completion(Status::Failed, Some("boom")));
            // A claim given back is no outcome.
            keys.outcome(&completion(Status::Available, None));
            // A metric recorded through the `metrics` macros.
            enqueued(1);
        });
        assert_eq!(
            later.values(),
            [
                "outbox_handler_duration_seconds{kind=order.created} 0.5",
                "outbox_commit_to_send_seconds{kind=order.created} 2",
                "outbox_sent_total{kind=order.created} 1",
                "outbox_retried_total{kind=order.created} 1",
                "outbox_failed_total{kind=order.created} 1",
                "outbox_enqueued_total{} 1",
            ]
        );
        let targets = later.targets();
        assert_eq!(targets.len(), 6);
        assert!(targets.iter().all(|t| *t == targets[5]), "{targets:?}");
    }

    /// A registered kind's keys are built once, whatever the version; an
    /// unregistered kind's are built for it on each call.
    #[test]
    fn the_registry_builds_each_registered_kinds_keys_once() {
        let registry = Registry::builder()
            .handler(
                "order.created",
                1,
                handler_fn(|_: Delivery| async { Ok(()) }),
            )
            .handler(
                "order.created",
                2,
                handler_fn(|_: Delivery| async { Ok(()) }),
            )
            .build()
            .unwrap();
        let keys = registry.kind_keys("order.created");
        assert!(Arc::ptr_eq(&keys, &registry.kind_keys("order.created")));
        let other = registry.kind_keys("order.cancelled");
        assert!(!Arc::ptr_eq(&other, &registry.kind_keys("order.cancelled")));
        let seen = Seen::default();
        metrics::with_local_recorder(&seen, || {
            other.outcome(&completion(Status::Failed, Some("no handler")));
        });
        assert_eq!(
            seen.values(),
            ["outbox_failed_total{kind=order.cancelled} 1"]
        );
    }
}
