//! A soak's samples as a table, its verdict against the soak's targets,
//! its plots over time, and the section of `docs/benchmarks.md` they go
//! to (between its own marker lines, apart from the bench's).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use super::{SoakPlan, storage::Reading};
use crate::{
    docs::{self, Markers, Meta},
    plot::group_digits,
    stats::{median, ms, percentile},
    timeline::{Line, TimeChart, TimePanel},
};

/// The soak's section of the docs.
pub(crate) const SOAK: Markers = Markers {
    begin: "<!-- soak-results:begin -->",
    end: "<!-- soak-results:end -->",
};

/// Commit to handler start must stay under this at p99 in every sample.
const LATENCY_P99_MS: f64 = 50.0;
/// Throughput and claim p99 at the end within this share of the start.
const DRIFT: f64 = 0.10;
/// The task table's growth over the last ten minutes stays under this.
const GROWTH: f64 = 0.05;
/// The windows compared at the start and the end of a run, in minutes.
const WINDOW: f64 = 5.0;
/// How far back the size's growth is measured from the end, in minutes.
const GROWTH_SPAN: f64 = 10.0;

/// One sample of a soak: what happened since the one before.
pub(crate) struct Sample {
    /// When it was taken, in minutes since the producers started.
    pub(crate) minutes: f64,
    pub(crate) enqueued_per_s: f64,
    pub(crate) handled_per_s: f64,
    /// Tasks due or running when it was taken.
    pub(crate) backlog: u64,
    /// Commit to handler start of each task handled since the last sample.
    pub(crate) latencies: Vec<Duration>,
    /// Each claim's time since the last sample.
    pub(crate) claims: Vec<Duration>,
    pub(crate) storage: Reading,
    /// How busy the machine's processors were since the last sample, in
    /// percent of all of them; `None` where the system does not tell.
    pub(crate) cpu_busy: Option<f64>,
}

/// Quantile `q` of `values` in milliseconds; `None` without values.
fn quantile(values: &[Duration], q: f64) -> Option<f64> {
    (!values.is_empty()).then(|| ms(percentile(values, q)))
}

fn mb(bytes: Option<i64>) -> String {
    bytes.map_or_else(|| "-".to_owned(), |b| format!("{:.1}", b as f64 / 1e6))
}

fn count(value: Option<i64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| group_digits(&v.to_string()))
}

fn millis(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"))
}

/// A share in whole percent, or `-`.
pub(crate) fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}%"))
}

impl Sample {
    /// The sample on one line, for the run's progress.
    pub(crate) fn line(&self) -> String {
        format!(
            "{:.2} min: enqueued {:.0}/s, handled {:.0}/s, backlog {}, commit to handler p99 {} ms, \
             claim p99 {} ms, table {} MB, indexes {} MB, processors {} busy",
            self.minutes,
            self.enqueued_per_s,
            self.handled_per_s,
            self.backlog,
            millis(quantile(&self.latencies, 0.99)),
            millis(quantile(&self.claims, 0.99)),
            mb(self.storage.data_bytes),
            mb(self.storage.index_bytes),
            percent(self.cpu_busy),
        )
    }

    /// What the table is on disk: its files where the backend tells, its
    /// rows and indexes otherwise.
    fn size(&self) -> Option<i64> {
        self.storage
            .file_bytes
            .or_else(|| Some(self.storage.data_bytes? + self.storage.index_bytes.unwrap_or(0)))
    }
}

/// One backend's soak.
pub(crate) struct SoakRun {
    pub(crate) backend: &'static str,
    /// Tasks/s delivered while producers enqueued flat out beside the
    /// relays, just before.
    pub(crate) capacity: f64,
    /// How busy the machine's processors were while that was measured, in
    /// percent.
    pub(crate) capacity_cpu: Option<f64>,
    /// Tasks/s the producers were asked for.
    pub(crate) rate: f64,
    pub(crate) plan: SoakPlan,
    pub(crate) samples: Vec<Sample>,
    /// The backlog left when the relays stopped, [`SoakPlan::finish_within`]
    /// after the producers.
    pub(crate) left: u64,
    /// The server's clean-up (and, on PostgreSQL, WAL) settings, in words.
    pub(crate) cleanup: String,
}

/// One target and how the run did against it.
pub(crate) struct Check {
    pub(crate) target: String,
    pub(crate) measured: String,
    /// `None` when the run was too short to tell.
    pub(crate) met: Option<bool>,
}

impl SoakRun {
    /// The rate offered, in percent of the rate measured first.
    pub(crate) fn share_percent(&self) -> f64 {
        self.rate / self.capacity * 100.0
    }

    /// The median and the highest of the samples' processor shares, in
    /// percent.
    fn cpu_spread(&self) -> Option<(f64, f64)> {
        let busy: Vec<f64> = self.samples.iter().filter_map(|s| s.cpu_busy).collect();
        let highest = busy.iter().copied().reduce(f64::max)?;
        Some((median(&busy), highest))
    }

    fn end(&self) -> f64 {
        self.samples.last().map_or(0.0, |s| s.minutes)
    }

    /// The samples of the first and of the last [`WINDOW`] minutes.
    fn windows(&self) -> (Vec<&Sample>, Vec<&Sample>) {
        let end = self.end();
        let first = self
            .samples
            .iter()
            .filter(|s| s.minutes <= WINDOW + 1e-9)
            .collect();
        let last = self
            .samples
            .iter()
            .filter(|s| s.minutes > end - WINDOW + 1e-9)
            .collect();
        (first, last)
    }

    /// The run against the soak's targets. Throughput and claims compare
    /// the first and last five minutes, so they are judged only on runs of
    /// at least ten; the size's growth on runs of at least twenty.
    pub(crate) fn checks(&self) -> Vec<Check> {
        let end = self.end();
        let (first, last) = self.windows();
        let throughput = |window: &[&Sample]| {
            window.iter().map(|s| s.handled_per_s).sum::<f64>() / window.len().max(1) as f64
        };
        let claim_p99 = |window: &[&Sample]| {
            let all: Vec<Duration> = window
                .iter()
                .flat_map(|s| s.claims.iter().copied())
                .collect();
            quantile(&all, 0.99)
        };
        let long_enough = end >= 2.0 * WINDOW;
        let drift = |start: f64, finish: f64| (finish - start).abs() / start.max(f64::MIN_POSITIVE);
        let (t0, t1) = (throughput(&first), throughput(&last));
        let mut checks = vec![Check {
            target: format!(
                "throughput, last {WINDOW} min within {:.0}% of the first",
                DRIFT * 100.0
            ),
            measured: format!(
                "{} then {} tasks/s ({:+.1}%)",
                group_digits(&format!("{t0:.0}")),
                group_digits(&format!("{t1:.0}")),
                (t1 / t0 - 1.0) * 100.0
            ),
            met: long_enough.then(|| drift(t0, t1) <= DRIFT),
        }];
        if let (Some(c0), Some(c1)) = (claim_p99(&first), claim_p99(&last)) {
            checks.push(Check {
                target: format!(
                    "claim p99, last {WINDOW} min within {:.0}% of the first",
                    DRIFT * 100.0
                ),
                measured: format!("{c0:.2} then {c1:.2} ms ({:+.1}%)", (c1 / c0 - 1.0) * 100.0),
                // A claim faster at the end than at the start is no drift
                // to worry about.
                met: long_enough.then_some(c1 <= c0 * (1.0 + DRIFT)),
            });
        }
        let worst = self
            .samples
            .iter()
            .filter_map(|s| quantile(&s.latencies, 0.99))
            .fold(0.0_f64, f64::max);
        checks.push(Check {
            target: format!("commit to handler p99 < {LATENCY_P99_MS:.0} ms in every sample"),
            measured: format!("worst sample {worst:.1} ms"),
            met: Some(worst < LATENCY_P99_MS),
        });
        let before = self
            .samples
            .iter()
            .rev()
            .find(|s| s.minutes <= end - GROWTH_SPAN + 1e-9)
            .and_then(Sample::size);
        let at_end = self.samples.last().and_then(Sample::size);
        if let (Some(before), Some(at_end)) = (before, at_end) {
            let growth = at_end as f64 / before.max(1) as f64 - 1.0;
            checks.push(Check {
                target: format!(
                    "task table on disk grows < {:.0}% over the last {GROWTH_SPAN:.0} min",
                    GROWTH * 100.0
                ),
                measured: format!(
                    "{} to {} MB ({:+.1}%)",
                    mb(Some(before)),
                    mb(Some(at_end)),
                    growth * 100.0
                ),
                met: Some(growth < GROWTH),
            });
        }
        checks.push(Check {
            target: format!(
                "the relays finish the backlog within {} s of the producers' stop",
                self.plan.finish_within.as_secs()
            ),
            measured: format!("{} tasks left", group_digits(&self.left.to_string())),
            met: Some(self.left == 0),
        });
        checks
    }

    /// The samples as a Markdown table.
    pub(crate) fn table(&self) -> String {
        let mut out = String::from(
            "| min | enqueued/s | handled/s | backlog | commit to handler p50 / p99 ms | claim p50 / p99 ms | claims | processors busy | table MB | indexes MB | on disk MB | dead rows | autovacuums | undo history |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for s in &self.samples {
            out.push_str(&format!(
                "| {:.2} | {} | {} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                s.minutes,
                group_digits(&format!("{:.0}", s.enqueued_per_s)),
                group_digits(&format!("{:.0}", s.handled_per_s)),
                group_digits(&s.backlog.to_string()),
                millis(quantile(&s.latencies, 0.5)),
                millis(quantile(&s.latencies, 0.99)),
                millis(quantile(&s.claims, 0.5)),
                millis(quantile(&s.claims, 0.99)),
                group_digits(&s.claims.len().to_string()),
                percent(s.cpu_busy),
                mb(s.storage.data_bytes),
                mb(s.storage.index_bytes),
                mb(s.storage.file_bytes),
                count(s.storage.dead_rows),
                count(s.storage.autovacuums),
                count(s.storage.history),
            ));
        }
        out
    }

    /// The verdict as Markdown lines.
    pub(crate) fn verdict(&self) -> String {
        let mut out = String::new();
        for check in self.checks() {
            let met = match (check.met, self.plan.quick) {
                (_, true) => "not judged (quick run)",
                (None, false) => "run too short to judge",
                (Some(true), false) => "met",
                (Some(false), false) => "missed",
            };
            out.push_str(&format!("- {}: {} ({met})\n", check.target, check.measured));
        }
        out
    }

    /// The run's plots over time.
    pub(crate) fn chart(&self, backend: &str) -> TimeChart {
        let points = |value: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
            self.samples
                .iter()
                .filter_map(|s| value(s).map(|v| (s.minutes, v)))
                .collect()
        };
        let line = |name: &str, value: &dyn Fn(&Sample) -> Option<f64>| Line {
            name: name.to_owned(),
            points: points(value),
        };
        let mut panels = vec![
            TimePanel {
                title: "throughput".to_owned(),
                unit: "tasks/s".to_owned(),
                lines: vec![
                    line("enqueued", &|s| Some(s.enqueued_per_s)),
                    line("handled", &|s| Some(s.handled_per_s)),
                ],
            },
            TimePanel {
                title: "commit to handler start".to_owned(),
                unit: "ms".to_owned(),
                lines: vec![
                    line("p50", &|s| quantile(&s.latencies, 0.5)),
                    line("p99", &|s| quantile(&s.latencies, 0.99)),
                ],
            },
            TimePanel {
                title: "claim".to_owned(),
                unit: "ms".to_owned(),
                lines: vec![
                    line("p50", &|s| quantile(&s.claims, 0.5)),
                    line("p99", &|s| quantile(&s.claims, 0.99)),
                ],
            },
            TimePanel {
                title: "task table".to_owned(),
                unit: "MB".to_owned(),
                lines: vec![
                    line("rows", &|s| s.storage.data_bytes.map(|b| b as f64 / 1e6)),
                    line("indexes", &|s| {
                        s.storage.index_bytes.map(|b| b as f64 / 1e6)
                    }),
                    line("on disk", &|s| s.storage.file_bytes.map(|b| b as f64 / 1e6)),
                ],
            },
        ];
        if self.samples.iter().any(|s| s.cpu_busy.is_some()) {
            panels.push(TimePanel {
                title: "processors busy (the whole machine)".to_owned(),
                unit: "%".to_owned(),
                lines: vec![line("busy", &|s| s.cpu_busy)],
            });
        }
        if self.samples.iter().any(|s| s.storage.dead_rows.is_some()) {
            panels.push(TimePanel {
                title: "dead rows".to_owned(),
                unit: "rows".to_owned(),
                lines: vec![line("dead rows", &|s| {
                    s.storage.dead_rows.map(|v| v as f64)
                })],
            });
        }
        if self.samples.iter().any(|s| s.storage.history.is_some()) {
            panels.push(TimePanel {
                title: "InnoDB undo history".to_owned(),
                unit: "records".to_owned(),
                lines: vec![line("history list", &|s| {
                    s.storage.history.map(|v| v as f64)
                })],
            });
        }
        TimeChart {
            title: format!(
                "Soak, {backend}: {:.0} tasks/s offered ({:.0}% of {:.0} sustained), retention {} s",
                self.rate,
                self.share_percent(),
                self.capacity,
                self.plan.retention.as_secs()
            ),
            x_label: "minutes".to_owned(),
            panels,
        }
    }
}

/// The plot's file name for `backend`.
fn plot_name(backend: &str) -> String {
    format!("soak-{backend}.svg")
}

/// The soak's section of the docs: the run, then per backend its verdict,
/// its plot and its table.
pub(crate) fn section(runs: &[SoakRun], meta: &Meta) -> String {
    let mut out = String::from(
        "<!-- Written by `outbox-bench --soak --write-docs`; a soak rewrites everything between the markers. -->\n\n",
    );
    if meta.quick {
        out.push_str("> **Quick soak: a smoke check, not judged.** A full soak replaces it.\n\n");
    }
    if !meta.gaps.is_empty() {
        out.push_str(&format!(
            "> **Partial soak: {}.** Written with `--allow-partial-docs`.\n\n",
            meta.gaps.join("; ")
        ));
    }
    let commit = match &meta.commit {
        Some((commit, false)) => format!(" at commit `{commit}`"),
        Some((commit, true)) => format!(" at commit `{commit}` (with uncommitted changes)"),
        None => String::new(),
    };
    out.push_str(&format!(
        "Soaked on {}{commit}, {}, with `{}`.\n",
        meta.date, meta.machine, meta.command
    ));
    for run in runs {
        let backend = meta.backend(run.backend);
        let server = meta
            .servers
            .iter()
            .find(|(b, _)| *b == run.backend)
            .map_or_else(String::new, |(_, s)| format!(" ({s})"));
        out.push_str(&format!(
            "\n### {backend}{server}\n\n\
             {} minutes: producers offered {} tasks/s, {:.0}% of the {} tasks/s the machine \
             delivered while producers enqueued flat out beside the relays for {} s just before{}; \
             retention {} s, purged every {} s{}; a sample every {} s.{} Server: {}.\n\n",
            run.plan.duration.as_secs() / 60,
            group_digits(&format!("{:.0}", run.rate)),
            run.share_percent(),
            group_digits(&format!("{:.0}", run.capacity)),
            run.plan.calibration.as_secs(),
            run.capacity_cpu.map_or_else(String::new, |busy| format!(
                " (its processors {busy:.0}% busy over the time measured)"
            )),
            run.plan.retention.as_secs(),
            run.plan.purge_interval.as_secs(),
            run.plan
                .purge_batch
                .map_or_else(String::new, |rows| format!(
                    " in statements of {} rows",
                    group_digits(&rows.to_string())
                )),
            run.plan.sample.as_secs(),
            run.cpu_spread()
                .map_or_else(String::new, |(median, highest)| format!(
                    " Every process on the machine together (the database's too, where it \
                 runs there) kept its processors busy {median:.0}% of the time in the \
                 median sample, {highest:.0}% in the busiest."
                )),
            run.cleanup,
        ));
        out.push_str(&run.verdict());
        out.push_str(&format!(
            "\n![soak on {backend}]({}/{})\n\n",
            docs::PLOTS,
            plot_name(run.backend)
        ));
        out.push_str("<details><summary>every sample</summary>\n\n");
        out.push_str(&run.table());
        out.push_str("\n</details>\n");
    }
    out
}

/// Refuses, before a long soak starts, a docs file without the soak's
/// markers.
pub(crate) fn check(dir: &Path) -> anyhow::Result<()> {
    docs::check_markers(dir, SOAK)
}

/// Writes the section and the plots of `runs` into `dir`; returns the
/// files written.
pub(crate) fn write(dir: &Path, runs: &[SoakRun], meta: &Meta) -> anyhow::Result<Vec<PathBuf>> {
    let plots: Vec<(String, String)> = runs
        .iter()
        .map(|r| {
            (
                plot_name(r.backend),
                r.chart(&meta.backend(r.backend)).svg(),
            )
        })
        .collect();
    docs::write_between(dir, SOAK, &section(runs, meta), &plots)
}
