//! What a scenario found: its invariants (checks that pass or fail) and its
//! figures, printed as a table or as JSON.

use std::time::Duration;

use serde::Serialize;

/// One scenario on one backend.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) scenario: &'static str,
    pub(crate) backend: &'static str,
    pub(crate) seconds: f64,
    pub(crate) checks: Vec<Check>,
    pub(crate) figures: Vec<Figure>,
    /// Why the scenario could not finish, if it could not.
    pub(crate) error: Option<String>,
}

/// An invariant and whether it held.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub(crate) name: String,
    pub(crate) passed: bool,
    pub(crate) detail: String,
}

/// A measured figure.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figure {
    pub(crate) name: String,
    pub(crate) value: serde_json::Value,
    pub(crate) unit: &'static str,
}

impl Report {
    pub(crate) fn new(scenario: &'static str, backend: &'static str) -> Self {
        Self {
            scenario,
            backend,
            seconds: 0.0,
            checks: Vec::new(),
            figures: Vec::new(),
            error: None,
        }
    }

    /// Records invariant `name`: `passed`, with what was measured.
    pub(crate) fn check(&mut self, name: &str, passed: bool, detail: impl Into<String>) {
        self.checks.push(Check {
            name: name.to_owned(),
            passed,
            detail: detail.into(),
        });
    }

    /// Records a figure.
    pub(crate) fn figure(
        &mut self,
        name: &str,
        value: impl Into<serde_json::Value>,
        unit: &'static str,
    ) {
        self.figures.push(Figure {
            name: name.to_owned(),
            value: value.into(),
            unit,
        });
    }

    /// Records a duration in milliseconds, rounded to 0.1 ms.
    pub(crate) fn millis(&mut self, name: &str, duration: Duration) {
        let ms = (duration.as_secs_f64() * 10_000.0).round() / 10.0;
        self.figure(name, ms, "ms");
    }

    /// Whether every invariant held and the scenario finished.
    pub(crate) fn passed(&self) -> bool {
        self.error.is_none() && self.checks.iter().all(|check| check.passed)
    }
}

fn value_text(figure: &Figure) -> String {
    let value = match &figure.value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    match figure.unit {
        "" => value,
        unit => format!("{value} {unit}"),
    }
}

/// The reports as one Markdown table: per scenario and backend, its
/// invariants (✔ or ✘) and then its figures.
pub(crate) fn table(reports: &[Report]) -> String {
    let mut out =
        String::from("| scenario | backend | | what | measured |\n|---|---|---|---|---|\n");
    for report in reports {
        let mut row = |mark: &str, what: &str, measured: &str| {
            out.push_str(&format!(
                "| {} | {} | {mark} | {what} | {measured} |\n",
                report.scenario, report.backend
            ));
        };
        if let Some(error) = &report.error {
            row("✘", "finished", error);
        }
        for check in &report.checks {
            row(
                if check.passed { "✔" } else { "✘" },
                &check.name,
                &check.detail,
            );
        }
        for figure in &report.figures {
            row("", &figure.name, &value_text(figure));
        }
        row("", "scenario time", &format!("{:.1} s", report.seconds));
    }
    out
}

/// The reports as JSON, with the run's settings.
pub(crate) fn json(reports: &[Report], quick: bool, seconds: f64) -> serde_json::Value {
    serde_json::json!({
        "quick": quick,
        "seconds": seconds,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "passed": reports.iter().all(Report::passed),
        "scenarios": reports,
    })
}
