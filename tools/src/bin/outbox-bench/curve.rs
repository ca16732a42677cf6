//! The scaling curve: drain throughput as relays, `retry_pending` workers
//! or hand-written loops are added (1, 2, 4 and 8), at claims of 10, 100
//! and 1,000 tasks, each on as many connections as it has loops: the
//! library's store gets a pool of that size, the hand-written loop one
//! connection per loop.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use super::{
    Plan,
    docs::{self, Markers, Meta},
    drain::{self, Shape},
    plot::{group_digits, number},
    raw::{Prepare, Raw},
    stats::median,
    timeline::{Line, TimeChart, TimePanel},
};

/// Relays, workers or loops, side by side.
pub(crate) const WORKERS: [usize; 4] = [1, 2, 4, 8];
/// Tasks each claims at a time.
pub(crate) const BATCHES: [usize; 3] = [10, 100, 1_000];

/// What drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `Relay::run`, until every task was handled.
    Relays,
    /// One `retry_pending` round per worker.
    Rounds,
    /// The hand-written claim + complete loop, prepared once.
    Raw,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Relays, Mode::Rounds, Mode::Raw];

    fn name(self) -> &'static str {
        match self {
            Mode::Relays => "relays",
            Mode::Rounds => "rounds",
            Mode::Raw => "hand-written loop",
        }
    }
}

/// The median rate of one mode at one shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    pub(crate) mode: Mode,
    pub(crate) shape: Shape,
    /// Tasks per second.
    pub(crate) rate: f64,
}

/// One backend's curve.
#[derive(Debug, Clone)]
pub(crate) struct Curve {
    pub(crate) backend: &'static str,
    /// Tasks per drain.
    pub(crate) tasks: u64,
    /// Drains per point (the median is kept).
    pub(crate) runs: usize,
    pub(crate) points: Vec<Point>,
}

/// Every mode at every shape, interleaved per shape (relays, rounds, the
/// loop, again), each drain on a fresh backlog of `plan.curve_tasks`.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Curve> {
    let tasks = plan.curve_tasks;
    let mut points = Vec::new();
    for batch in BATCHES {
        for workers in WORKERS {
            let shape = Shape { workers, batch };
            let store = db.store_with_pool(workers)?;
            let mut rates = [Vec::new(), Vec::new(), Vec::new()];
            for _ in 0..plan.curve_runs {
                for (mode, rates) in Mode::ALL.into_iter().zip(&mut rates) {
                    drain::fresh(db, tasks).await?;
                    rates.push(match mode {
                        Mode::Relays => drain::relays::<B>(&store, tasks, shape).await?,
                        Mode::Rounds => drain::rounds::<B>(&store, tasks, shape).await?,
                        Mode::Raw => drain::raw_loop(db, tasks, shape, Prepare::Once).await?,
                    });
                }
            }
            drop(store);
            for (mode, rates) in Mode::ALL.into_iter().zip(&rates) {
                points.push(Point {
                    mode,
                    shape,
                    rate: median(rates),
                });
            }
        }
    }
    Ok(Curve {
        backend: B::NAME,
        tasks,
        runs: plan.curve_runs,
        points,
    })
}

impl Curve {
    fn rate(&self, mode: Mode, shape: Shape) -> Option<f64> {
        self.points
            .iter()
            .find(|p| p.mode == mode && p.shape == shape)
            .map(|p| p.rate)
    }

    /// A row per batch size and worker count: each mode's rate, and the
    /// library's against the loop.
    pub(crate) fn table(&self) -> String {
        let mut out = String::from(
            "| claims of | loops | relays (tasks/s) | rounds (tasks/s) | hand-written loop (tasks/s) | relays / loop | rounds / loop |\n\
             |---|---|---|---|---|---|---|\n",
        );
        let rate = |r: Option<f64>| r.map_or("-".to_owned(), |r| group_digits(&format!("{r:.0}")));
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".to_owned(),
        };
        for batch in BATCHES {
            for workers in WORKERS {
                let shape = Shape { workers, batch };
                let [relays, rounds, raw] = Mode::ALL.map(|mode| self.rate(mode, shape));
                let _ = writeln!(
                    out,
                    "| {} | {workers} | {} | {} | {} | {} | {} |",
                    group_digits(&batch.to_string()),
                    rate(relays),
                    rate(rounds),
                    rate(raw),
                    ratio(relays, raw),
                    ratio(rounds, raw),
                );
            }
        }
        out
    }

    /// A panel per batch size: each mode's rate against the loops.
    pub(crate) fn chart(&self, backend: &str) -> TimeChart {
        let panels = BATCHES
            .iter()
            .map(|&batch| TimePanel {
                title: format!("claims of {}", group_digits(&batch.to_string())),
                unit: "tasks/s".to_owned(),
                lines: Mode::ALL
                    .iter()
                    .map(|&mode| Line {
                        name: mode.name().to_owned(),
                        points: WORKERS
                            .iter()
                            .filter_map(|&workers| {
                                self.rate(mode, Shape { workers, batch })
                                    .map(|rate| (workers as f64, rate))
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        TimeChart {
            title: format!(
                "Drain {} tasks, {backend}: throughput by relays, workers or loops",
                number(self.tasks as f64)
            ),
            x_label: "relays, workers or loops (one connection each)".to_owned(),
            panels,
        }
    }
}

/// The curve's section of `docs/benchmarks.md`: between these lines.
pub(crate) const SCALING: Markers = Markers {
    begin: "<!-- scaling-results:begin -->",
    end: "<!-- scaling-results:end -->",
};

/// The plot's file name for `backend`.
fn plot_name(backend: &str) -> String {
    format!("scaling-{backend}.svg")
}

/// The section: the run, then per backend its plot and its table.
pub(crate) fn section(curves: &[Curve], meta: &Meta) -> String {
    let mut out = String::from(
        "<!-- Written by `outbox-bench --write-docs` when the scaling scenario ran; everything between the markers is rewritten. -->\n\n",
    );
    if meta.quick {
        out.push_str("> **Quick run: a smoke check.** A full run replaces it.\n\n");
    }
    let commit = match &meta.commit {
        Some((commit, false)) => format!(" at commit `{commit}`"),
        Some((commit, true)) => format!(" at commit `{commit}` (with uncommitted changes)"),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "Measured on {}{commit}, {}, with `{}`.",
        meta.date, meta.machine, meta.command
    );
    for curve in curves {
        let backend = meta.backend(curve.backend);
        let _ = write!(
            out,
            "\n### {backend}\n\n\
             Each figure: the median of {} drains of {} tasks.\n\n\
             ![scaling on {backend}]({}/{})\n\n",
            curve.runs,
            group_digits(&curve.tasks.to_string()),
            docs::PLOTS,
            plot_name(curve.backend)
        );
        out.push_str(&curve.table());
    }
    out
}

/// Refuses, before the run, a docs file without the curve's markers.
pub(crate) fn check(dir: &Path) -> anyhow::Result<()> {
    docs::check_markers(dir, SCALING)
}

/// Writes the section and the plots of `curves` into `dir`; returns the
/// files written.
pub(crate) fn write(dir: &Path, curves: &[Curve], meta: &Meta) -> anyhow::Result<Vec<PathBuf>> {
    let plots: Vec<(String, String)> = curves
        .iter()
        .map(|c| {
            (
                plot_name(c.backend),
                c.chart(&meta.backend(c.backend)).svg(),
            )
        })
        .collect();
    docs::write_between(dir, SCALING, &section(curves, meta), &plots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::tests::assert_well_formed;

    fn curve() -> Curve {
        let mut points = Vec::new();
        for batch in BATCHES {
            for workers in WORKERS {
                for (n, mode) in Mode::ALL.into_iter().enumerate() {
                    points.push(Point {
                        mode,
                        shape: Shape { workers, batch },
                        rate: (workers * 1_000 + n) as f64,
                    });
                }
            }
        }
        Curve {
            backend: "SQLite",
            tasks: 20_000,
            runs: 3,
            points,
        }
    }

    #[test]
    fn the_table_has_a_row_per_shape_with_the_ratios_to_the_loop() {
        let table = curve().table();
        assert_eq!(table.lines().count(), 2 + BATCHES.len() * WORKERS.len());
        assert!(
            table.contains("| 1,000 | 8 | 8,000 | 8,001 | 8,002 | 1.00 | 1.00 |"),
            "{table}"
        );
    }

    #[test]
    fn the_chart_has_a_panel_per_batch_and_a_line_per_mode() {
        let chart = curve().chart("SQLite");
        assert_eq!(chart.panels.len(), BATCHES.len());
        for panel in &chart.panels {
            assert_eq!(panel.lines.len(), Mode::ALL.len());
            assert!(panel.lines.iter().all(|l| l.points.len() == WORKERS.len()));
        }
        let svg = chart.svg();
        assert_well_formed(&svg);
        assert!(svg.contains("relays, workers or loops"));
    }
}
