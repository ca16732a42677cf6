//! The figures a benchmark reports.

/// The unit of the figures that report this process's CPU time per task.
/// The docs table shows them in the CPU column of the figure they belong
/// to ([`Figure::cpu`]) rather than as rows of their own.
pub(crate) const CPU_UNIT: &str = "us CPU/task";

/// One reported number: the library, the baseline, and their ratio.
#[derive(Debug, Clone)]
pub(crate) struct Figure {
    /// The backend measured.
    pub(crate) backend: &'static str,
    /// What was measured.
    pub(crate) scenario: String,
    /// The unit of `library` and `baseline`.
    pub(crate) unit: &'static str,
    /// The library's figure.
    pub(crate) library: f64,
    /// The baseline's figure.
    pub(crate) baseline: f64,
    /// `library / baseline` for costs, `library / baseline` for rates too:
    /// `higher_is_better` says how to read it.
    pub(crate) ratio: f64,
    /// Whether a larger figure is better (a rate) or worse (a cost).
    pub(crate) higher_is_better: bool,
    /// Runs each figure is the median of.
    pub(crate) runs: usize,
    /// The ratio the library should reach, if any.
    pub(crate) target: Option<f64>,
    /// What the baseline is.
    pub(crate) baseline_name: &'static str,
    /// This process's CPU per task on both sides, where the scenario
    /// measures it.
    pub(crate) cpu: Option<Cpu>,
    /// Where the docs' plots draw the figure.
    pub(crate) plot: Plot,
}

/// This process's CPU time per task (microseconds, medians of the runs):
/// the library's side, and the baseline's when it was measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cpu {
    pub(crate) library: f64,
    pub(crate) baseline: Option<f64>,
}

/// Where the plots of `--write-docs` draw a figure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plot {
    /// In no plot (it is in the table).
    None,
    /// A panel of the throughput plot, with this title: the library beside
    /// its baseline, one pair of bars per backend.
    Throughput(&'static str),
    /// A backlog shape of the claim plot, with this label: the claim beside
    /// the shape, and on the due rows only.
    Claim(String),
}

impl Figure {
    /// Whether the ratio meets its target, if it has one.
    pub(crate) fn meets(&self) -> Option<bool> {
        self.target.map(|target| {
            if self.higher_is_better {
                self.ratio >= target
            } else {
                self.ratio <= target
            }
        })
    }

    /// The figure as JSON, for `--json`.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "backend": self.backend,
            "scenario": self.scenario,
            "unit": self.unit,
            "library": self.library,
            "baseline": self.baseline,
            "baseline_name": self.baseline_name,
            "ratio": self.ratio,
            "higher_is_better": self.higher_is_better,
            "runs": self.runs,
            "target": self.target,
            "meets_target": self.meets(),
            "cpu_us_per_task": self.cpu.map(|cpu| serde_json::json!({
                "library": cpu.library,
                "baseline": cpu.baseline,
            })),
        })
    }
}
