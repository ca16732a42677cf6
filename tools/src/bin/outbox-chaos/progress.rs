//! Progress while a scenario runs: a status line on a terminal, and a line
//! per phase on stderr everywhere.

use std::{path::Path, time::Duration};

use indicatif::{ProgressBar, ProgressStyle};

use super::records;

/// The progress of one scenario.
#[derive(Debug)]
pub(crate) struct Progress {
    bar: ProgressBar,
    label: String,
}

impl Progress {
    pub(crate) fn new(scenario: &str, backend: &str) -> Self {
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix} {elapsed:>3} {msg}") {
            bar.set_style(style);
        }
        let label = format!("{scenario} [{backend}]");
        bar.set_prefix(label.clone());
        bar.enable_steady_tick(Duration::from_millis(200));
        Self { bar, label }
    }

    /// A phase of the scenario begins: a line on stderr.
    pub(crate) fn phase(&self, what: &str) {
        self.bar
            .suspend(|| eprintln!("chaos: {}: {what}", self.label));
        self.bar.set_message(what.to_owned());
    }

    /// The status line: `what`, with the orders committed and the
    /// deliveries (effects, replays included) so far.
    pub(crate) fn status(&self, what: &str, committed: usize, records: &Path) {
        let delivered = records::count_done(records);
        self.bar.set_message(format!(
            "{what}: {committed} committed, {delivered} delivered"
        ));
    }

    /// The scenario ended.
    pub(crate) fn finish(&self, passed: bool) {
        self.bar.finish_and_clear();
        eprintln!(
            "chaos: {}: {}",
            self.label,
            if passed { "passed" } else { "FAILED" }
        );
    }
}
