//! Capturing the outbox's metrics in tests: [`capture`].
//!
//! The outbox reports through the `metrics` facade. [`capture`] installs a
//! recorder for the whole test process (once) that keeps every value, so a
//! test can read them back by name and labels. Tests run in parallel and
//! share it: give the code under test its own label values (a `kind` of its
//! own) and read those.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Every metric recorded in this process, by `name{label="value",...}`.
#[derive(Debug, Default)]
pub struct Captured {
    values: Mutex<HashMap<String, Arc<Value>>>,
    /// Each described metric's unit and help text, by name.
    descriptions: Mutex<HashMap<String, (Option<Unit>, String)>>,
}

#[derive(Debug, Default)]
struct Value {
    counter: AtomicU64,
    gauge: Mutex<f64>,
    samples: Mutex<Vec<f64>>,
}

impl CounterFn for Value {
    fn increment(&self, value: u64) {
        self.counter.fetch_add(value, Ordering::SeqCst);
    }

    fn absolute(&self, value: u64) {
        self.counter.fetch_max(value, Ordering::SeqCst);
    }
}

impl GaugeFn for Value {
    fn increment(&self, value: f64) {
        *self.gauge.lock().unwrap_or_else(PoisonError::into_inner) += value;
    }

    fn decrement(&self, value: f64) {
        *self.gauge.lock().unwrap_or_else(PoisonError::into_inner) -= value;
    }

    fn set(&self, value: f64) {
        *self.gauge.lock().unwrap_or_else(PoisonError::into_inner) = value;
    }
}

impl HistogramFn for Value {
    fn record(&self, value: f64) {
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(value);
    }
}

/// `name{a="1",b="2"}` with labels sorted, the way [`Captured`] files values.
fn render(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

impl Captured {
    fn value(&self, key: &Key) -> Arc<Value> {
        let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        let rendered = render(key.name(), &labels);
        Arc::clone(
            self.values
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(rendered)
                .or_default(),
        )
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<Arc<Value>> {
        self.values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&render(name, labels))
            .cloned()
    }

    /// The unit and help text `name` was described with, if it was.
    pub fn description(&self, name: &str) -> Option<(Option<Unit>, String)> {
        self.descriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    fn describe(&self, name: KeyName, unit: Option<Unit>, description: SharedString) {
        self.descriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.as_str().to_owned(), (unit, description.into_owned()));
    }

    /// A counter's value (0 if never incremented).
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.get(name, labels)
            .map_or(0, |value| value.counter.load(Ordering::SeqCst))
    }

    /// A gauge's last value, if ever set.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.get(name, labels)
            .map(|value| *value.gauge.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A histogram's samples, in recording order.
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.get(name, labels).map_or_else(Vec::new, |value| {
            value
                .samples
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }
}

/// The process-wide recorder.
#[derive(Debug)]
struct Shared(&'static Captured);

impl Recorder for Shared {
    fn describe_counter(&self, name: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe(name, unit, description);
    }
    fn describe_gauge(&self, name: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe(name, unit, description);
    }
    fn describe_histogram(&self, name: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe(name, unit, description);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.0.value(key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.0.value(key))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.0.value(key))
    }
}

static CAPTURED: OnceLock<&'static Captured> = OnceLock::new();

/// Installs the capturing recorder as this process's global one (the first
/// call does; later calls return the same) and returns what it captured.
///
/// Fails when another global recorder was installed first.
pub fn capture() -> anyhow::Result<&'static Captured> {
    let mut installed = Ok(());
    let captured = CAPTURED.get_or_init(|| {
        let captured: &'static Captured = Box::leak(Box::default());
        installed = metrics::set_global_recorder(Shared(captured))
            .map_err(|e| anyhow::anyhow!("another metrics recorder is installed: {e}"));
        captured
    });
    installed.map(|()| *captured)
}
