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

use metrics::{Key, Label, Level, Metadata};

use crate::{Status, transition::Completion};

/// What the `metrics` macros would pass for a call in this module.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

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
        Status, TaskId,
        transition::{Completion, Fence},
    };

    /// Every value recorded, as `name{labels} value`.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<String>>>);

    struct Value(Seen, String);

    impl Seen {
        fn value(&self, key: &Key) -> Arc<Value> {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            Arc::new(Value(
                self.clone(),
                format!("{}{{{}}}", key.name(), labels.join(",")),
            ))
        }

        fn taken(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    impl CounterFn for Value {
        fn increment(&self, value: u64) {
            self.0.0.lock().unwrap().push(format!("{} {value}", self.1));
        }
        fn absolute(&self, _: u64) {}
    }

    impl HistogramFn for Value {
        fn record(&self, value: f64) {
            self.0.0.lock().unwrap().push(format!("{} {value}", self.1));
        }
    }

    impl Recorder for Seen {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(self.value(key))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(self.value(key))
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
    /// when the value is recorded, labelled with their kind.
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
        });
        assert_eq!(
            later.taken(),
            [
                "outbox_handler_duration_seconds{kind=order.created} 0.5",
                "outbox_commit_to_send_seconds{kind=order.created} 2",
                "outbox_sent_total{kind=order.created} 1",
                "outbox_retried_total{kind=order.created} 1",
                "outbox_failed_total{kind=order.created} 1",
            ]
        );
    }
}
