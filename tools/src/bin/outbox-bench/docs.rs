//! `--write-docs DIR`: the run's figures written into `DIR/benchmarks.md`,
//! between its two marker comments, and its plots drawn into `DIR/bench/`.
//!
//! Only the text between [`BEGIN`] and [`END`] is replaced; the rest of the
//! file is the hand-written explanation of the figures and is left as it
//! is, byte for byte. A file without both markers, in order, is refused
//! with a [`MarkerError`] naming it, before anything is written (and
//! before the run starts, so a long run is not spent for nothing).
//!
//! Quick figures must never silently replace full ones: a `--quick` run
//! writes docs only with `--allow-quick-docs`, and a run of fewer backends
//! or scenarios than all only with `--allow-partial-docs`; either way the
//! section and the plots say so at the top.

use std::{
    fmt,
    path::{Path, PathBuf},
    process::Command,
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;

use super::{
    Backend, Plan, Results, Scenario,
    figure::{CPU_UNIT, Figure, Plot},
    plot::{BASELINE, Chart, Group, LIBRARY, Panel, Scale, Series, group_digits, number},
};

/// The line before the generated section.
pub(crate) const BEGIN: &str = "<!-- bench-results:begin -->";
/// The line after it.
pub(crate) const END: &str = "<!-- bench-results:end -->";
/// The bench's section: between [`BEGIN`] and [`END`].
pub(crate) const RESULTS: Markers = Markers {
    begin: BEGIN,
    end: END,
};

/// The two marker lines around a generated section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Markers {
    /// The line before the section.
    pub(crate) begin: &'static str,
    /// The line after it.
    pub(crate) end: &'static str,
}
/// The file, in the docs directory, holding the markers.
pub(crate) const FILE: &str = "benchmarks.md";
/// The directory, in the docs directory, the plots go to (and the
/// Markdown refers to).
pub(crate) const PLOTS: &str = "bench";

/// What is wrong with the markers of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MarkerProblem {
    /// The marker is not in the file.
    Missing(&'static str),
    /// The marker is in the file more than once.
    Repeated(&'static str),
    /// The end marker comes before the begin marker.
    EndFirst,
}

/// The results section of `file` cannot be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MarkerError {
    pub(crate) file: PathBuf,
    pub(crate) markers: Markers,
    pub(crate) problem: MarkerProblem,
}

impl fmt::Display for MarkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        let Markers { begin, end } = self.markers;
        match self.problem {
            MarkerProblem::Missing(marker) => write!(f, "{file} has no `{marker}` line"),
            MarkerProblem::Repeated(marker) => {
                write!(f, "{file} has the `{marker}` line more than once")
            }
            MarkerProblem::EndFirst => write!(f, "{file} has `{end}` before `{begin}`"),
        }?;
        write!(
            f,
            ": --write-docs replaces only what lies between one `{begin}` line and one `{end}` line after it"
        )
    }
}

impl std::error::Error for MarkerError {}

/// `text` (the contents of `file`) with what lies between its marker
/// lines replaced by `body`; everything else, the marker lines included,
/// stays as it was. A marker counts only as a line of its own (surrounding
/// spaces aside), so prose may quote it.
pub(crate) fn replace_section(file: &Path, text: &str, body: &str) -> Result<String, MarkerError> {
    replace_between(file, text, RESULTS, body)
}

/// As [`replace_section`], between the lines `markers` names.
pub(crate) fn replace_between(
    file: &Path,
    text: &str,
    markers: Markers,
    body: &str,
) -> Result<String, MarkerError> {
    let error = |problem| MarkerError {
        file: file.to_owned(),
        markers,
        problem,
    };
    // Each marker line's start and end (past its newline).
    let lines = |marker: &'static str| {
        let mut at = 0;
        let mut found = Vec::new();
        for line in text.split_inclusive('\n') {
            if line.trim() == marker {
                found.push((at, at + line.len()));
            }
            at += line.len();
        }
        match found.as_slice() {
            [] => Err(error(MarkerProblem::Missing(marker))),
            [one] => Ok(*one),
            _ => Err(error(MarkerProblem::Repeated(marker))),
        }
    };
    let ((_, begin_end), (end_start, _)) = (lines(markers.begin)?, lines(markers.end)?);
    if end_start < begin_end {
        return Err(error(MarkerProblem::EndFirst));
    }
    let head = &text[..begin_end];
    let tail = &text[end_start..];
    let body = body.trim_matches('\n');
    let body = if body.is_empty() {
        String::new()
    } else {
        format!("{body}\n")
    };
    Ok(format!("{head}{body}{tail}"))
}

/// Reads the docs file of `dir` and checks that its markers are in place.
pub(crate) fn check(dir: &Path) -> anyhow::Result<()> {
    let file = dir.join(FILE);
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("reading {} for --write-docs", file.display()))?;
    replace_section(&file, &text, "")?;
    Ok(())
}

/// Why a run may not write the docs, if it may not: quick figures or
/// partial coverage, each without the flag that allows it.
pub(crate) fn refusal(
    quick: bool,
    allow_quick: bool,
    gaps: &[String],
    allow_partial: bool,
) -> Option<String> {
    if quick && !allow_quick {
        return Some(
            "--write-docs refuses a --quick run: its figures would replace the full run's. \
             Run without --quick, or add --allow-quick-docs to write them marked as quick \
             (to a scratch copy of the docs, not to be committed)"
                .to_owned(),
        );
    }
    if !gaps.is_empty() && !allow_partial {
        return Some(format!(
            "--write-docs refuses a partial run ({}): its figures would replace every \
             backend's and scenario's. Run them all, or add --allow-partial-docs to write \
             the run marked as partial",
            gaps.join("; ")
        ));
    }
    None
}

/// What a run leaves out of a full one, in words (nothing for a full run).
pub(crate) fn gaps(
    backend: Backend,
    scenarios: &[Scenario],
    nats: bool,
    rabbitmq: bool,
    redis: bool,
    kafka: bool,
) -> Vec<String> {
    let mut gaps: Vec<String> = backend.only().into_iter().collect();
    // The scaling curve has a section of its own, written whenever it ran;
    // a run of it alone leaves the results section as it was.
    let scenarios: Vec<Scenario> = match scenarios {
        [] => Vec::new(),
        named => {
            let results: Vec<Scenario> = named
                .iter()
                .copied()
                .filter(|s| *s != Scenario::Scaling)
                .collect();
            if results.is_empty() {
                return gaps;
            }
            results
        }
    };
    let scenarios = scenarios.as_slice();
    let all = [
        Scenario::Enqueue,
        Scenario::Drain,
        Scenario::Latency,
        Scenario::Scale,
        Scenario::Nats,
        Scenario::Rabbitmq,
        Scenario::Redis,
        Scenario::Kafka,
    ];
    if !scenarios.is_empty() && !all.iter().all(|s| scenarios.contains(s)) {
        let names: Vec<&str> = all
            .iter()
            .filter(|s| scenarios.contains(s))
            .map(|s| scenario_name(*s))
            .collect();
        let scenarios = if names.len() == 1 {
            "scenario"
        } else {
            "scenarios"
        };
        gaps.push(format!("only the {scenarios} {}", names.join(", ")));
    }
    if !nats && (scenarios.is_empty() || scenarios.contains(&Scenario::Nats)) {
        gaps.push("no JetStream".to_owned());
    }
    if !rabbitmq && (scenarios.is_empty() || scenarios.contains(&Scenario::Rabbitmq)) {
        gaps.push("no RabbitMQ".to_owned());
    }
    if !redis && (scenarios.is_empty() || scenarios.contains(&Scenario::Redis)) {
        gaps.push("no Redis".to_owned());
    }
    if !kafka && (scenarios.is_empty() || scenarios.contains(&Scenario::Kafka)) {
        gaps.push("no Kafka".to_owned());
    }
    gaps
}

fn scenario_name(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::Enqueue => "enqueue",
        Scenario::Drain => "drain",
        Scenario::Latency => "latency",
        Scenario::Scale => "scale",
        Scenario::Nats => "nats",
        Scenario::Rabbitmq => "rabbitmq",
        Scenario::Redis => "redis",
        Scenario::Kafka => "kafka",
        Scenario::Scaling => "scaling",
    }
}

/// The facts about a run that the section's header gives.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    /// The day the run started, `YYYY-MM-DD`, UTC.
    pub(crate) date: String,
    /// `git rev-parse --short HEAD` when the run started, and whether the
    /// tree had changes not committed.
    pub(crate) commit: Option<(String, bool)>,
    /// Cores, memory, OS.
    pub(crate) machine: String,
    /// The 1-minute load average when the run started.
    pub(crate) load: Option<String>,
    /// The command line, as a reader would type it.
    pub(crate) command: String,
    pub(crate) quick: bool,
    /// What the run left out (see [`gaps`]).
    pub(crate) gaps: Vec<String>,
    /// `release` or `debug`.
    pub(crate) profile: &'static str,
    pub(crate) runs: usize,
    pub(crate) claims: usize,
    pub(crate) seconds: u64,
    /// Each backend measured (`Raw::NAME`) and what its server said it
    /// is; the NATS server under `nats`.
    pub(crate) servers: Vec<(&'static str, String)>,
}

impl Meta {
    /// What the run and its machine are, gathered when the run starts.
    pub(crate) fn start(
        command: String,
        quick: bool,
        gaps: Vec<String>,
        profile: &'static str,
        plan: &Plan,
    ) -> Self {
        Self {
            date: today(),
            commit: commit(),
            machine: machine(),
            load: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|l| l.split_whitespace().next().map(str::to_owned)),
            command,
            quick,
            gaps,
            profile,
            runs: plan.runs,
            claims: plan.claims,
            seconds: 0,
            servers: Vec::new(),
        }
    }

    /// How the docs name `backend` (a `Raw::NAME`): MySQL's by what its
    /// server said it is.
    pub(crate) fn backend(&self, backend: &str) -> String {
        match backend {
            "postgres" => "PostgreSQL".to_owned(),
            "sqlite" => "SQLite".to_owned(),
            "mysql" => self
                .servers
                .iter()
                .find(|(b, _)| *b == "mysql")
                .and_then(|(_, server)| server.split(' ').next())
                .filter(|name| matches!(*name, "MariaDB" | "MySQL"))
                .unwrap_or("MySQL/MariaDB")
                .to_owned(),
            other => other.to_owned(),
        }
    }

    /// A line for the plots: the run they come from.
    fn subtitle(&self) -> String {
        let mut parts = vec![self.date.clone()];
        if let Some((commit, _)) = &self.commit {
            parts.push(format!("commit {commit}"));
        }
        parts.push(if self.quick {
            "QUICK RUN: smoke-check sizes, not comparable with full runs".to_owned()
        } else {
            format!("{} build, medians of {} runs", self.profile, self.runs)
        });
        if !self.gaps.is_empty() {
            parts.push(format!("partial: {}", self.gaps.join("; ")));
        }
        parts.join(" · ")
    }

    fn title(&self, title: &str) -> String {
        if self.quick {
            format!("{title} (quick run)")
        } else {
            title.to_owned()
        }
    }
}

/// The figures of `results` as the plots of the docs, each with the file
/// name it is written to; only those the run has figures for.
pub(crate) fn charts(results: &Results, meta: &Meta) -> Vec<(&'static str, Chart)> {
    let mut charts = Vec::new();
    let note = |f: &Figure| {
        let mut note = format!(
            "ratio {:.3} ({})",
            f.ratio,
            if f.higher_is_better { "rate" } else { "cost" }
        );
        if let Some(target) = f.target {
            let sign = if f.higher_is_better { ">=" } else { "<=" };
            note.push_str(&format!(", target {sign} {target:.2}"));
        }
        note
    };
    let mut panels: Vec<Panel> = Vec::new();
    for f in &results.figures {
        let Plot::Throughput(title) = f.plot else {
            continue;
        };
        let group = Group {
            label: meta.backend(f.backend),
            values: vec![Some(f.library), Some(f.baseline)],
            note: Some(note(f)),
        };
        match panels.iter_mut().find(|p| p.title == title) {
            Some(panel) => panel.groups.push(group),
            None => panels.push(Panel {
                title: title.to_owned(),
                unit: f.unit.to_owned(),
                scale: Scale::Linear,
                groups: vec![group],
            }),
        }
    }
    if !panels.is_empty() {
        charts.push((
            "throughput.svg",
            Chart {
                title: meta.title("Throughput: the library beside hand-written code"),
                subtitle: meta.subtitle(),
                series: vec![LIBRARY, BASELINE],
                panels,
            },
        ));
    }
    if !results.latencies.is_empty() {
        let groups = scenario_major(&results.latencies, |l| l.scenario)
            .into_iter()
            .map(|l| Group {
                label: format!("{}: {}", meta.backend(l.backend), l.scenario),
                values: vec![Some(l.p(0.5)), Some(l.p(0.9)), Some(l.p(0.99))],
                note: l.target_p99_ms.map(|t| format!("p99 target < {t:.0} ms")),
            })
            .collect();
        charts.push((
            "latency.svg",
            Chart {
                title: meta.title("Latency: commit to handler start"),
                subtitle: meta.subtitle(),
                series: vec![
                    Series {
                        name: "p50",
                        color: "#9ecae1",
                    },
                    Series {
                        name: "p90",
                        color: "#4292c6",
                    },
                    Series {
                        name: "p99",
                        color: "#08519c",
                    },
                ],
                panels: vec![Panel {
                    title: "percentiles over every task".to_owned(),
                    unit: "milliseconds (log scale)".to_owned(),
                    scale: Scale::Log,
                    groups,
                }],
            },
        ));
    }
    let mut claims: Vec<Panel> = Vec::new();
    for f in &results.figures {
        let Plot::Claim(shape) = &f.plot else {
            continue;
        };
        let title = meta.backend(f.backend);
        let group = Group {
            label: group_digits(shape),
            values: vec![Some(f.library), Some(f.baseline)],
            note: Some(note(f)),
        };
        match claims.iter_mut().find(|p| p.title == title) {
            Some(panel) => panel.groups.push(group),
            None => claims.push(Panel {
                title,
                unit: f.unit.to_owned(),
                scale: Scale::Linear,
                groups: vec![group],
            }),
        }
    }
    if !claims.is_empty() {
        charts.push((
            "claims.svg",
            Chart {
                title: meta.title("A claim of 100 beside each backlog shape"),
                subtitle: meta.subtitle(),
                series: vec![
                    Series {
                        name: "beside the backlog",
                        color: LIBRARY.color,
                    },
                    Series {
                        name: "the same claim, due rows only",
                        color: BASELINE.color,
                    },
                ],
                panels: claims,
            },
        ));
    }
    charts
}

/// `items` grouped by scenario (in the order scenarios first appear), each
/// scenario's backends together, so that a table compares them row by row.
fn scenario_major<T, K: PartialEq>(items: &[T], key: impl Fn(&T) -> K) -> Vec<&T> {
    let mut keys: Vec<K> = Vec::new();
    for item in items {
        let k = key(item);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.iter()
        .flat_map(|k| items.iter().filter(|item| key(item) == *k))
        .collect()
}

/// Text for a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The generated section: the run's header, its figures in one table, its
/// latencies, and the plots `charts` names.
pub(crate) fn section(results: &Results, meta: &Meta, charts: &[(&str, Chart)]) -> String {
    let mut out = String::new();
    out.push_str(
        "<!-- Written by `outbox-bench --write-docs`; a run rewrites everything between the markers. -->\n\n",
    );
    if meta.quick {
        out.push_str(
            "> **Quick run: not comparable with full runs.** These figures come from \
             `--quick` (fewer runs, a tenth of the sizes), written with `--allow-quick-docs`. \
             A full run replaces them.\n\n",
        );
    }
    if !meta.gaps.is_empty() {
        out.push_str(&format!(
            "> **Partial run: {}.** Written with `--allow-partial-docs`; the figures of \
             what it left out are not shown.\n\n",
            meta.gaps.join("; ")
        ));
    }
    let commit = match &meta.commit {
        Some((commit, false)) => format!(" at commit `{commit}`"),
        Some((commit, true)) => format!(" at commit `{commit}` (with uncommitted changes)"),
        None => String::new(),
    };
    let claims = if results
        .figures
        .iter()
        .any(|f| matches!(f.plot, Plot::Claim(_)))
    {
        format!(
            " ({} claims per table and shape for the claims)",
            meta.claims
        )
    } else {
        String::new()
    };
    out.push_str(&format!(
        "Run of {}{commit}, with `{}`: {} sizes, {} build, medians of {} runs per \
         figure{claims}, {} s in all.\n",
        meta.date,
        meta.command,
        if meta.quick { "quick" } else { "full" },
        meta.profile,
        meta.runs,
        meta.seconds
    ));
    out.push_str(&format!("Machine: {}", meta.machine));
    match &meta.load {
        Some(load) => out.push_str(&format!("; load average {load} when the run started.\n")),
        None => out.push_str(".\n"),
    }
    if !meta.servers.is_empty() {
        let servers: Vec<&str> = meta.servers.iter().map(|(_, s)| s.as_str()).collect();
        out.push_str(&format!("Servers: {}.\n", servers.join(", ")));
    }
    let figures: Vec<&Figure> = results
        .figures
        .iter()
        .filter(|f| f.unit != CPU_UNIT)
        .collect();
    if !figures.is_empty() {
        out.push_str(
            "\n| scenario | backend | library | hand-written baseline | ratio | target | CPU per task, library / baseline |\n\
             |---|---|---|---|---|---|---|\n",
        );
        for f in scenario_major(&figures, |f| f.scenario.clone()) {
            let target = match (f.target, f.meets()) {
                (Some(t), Some(met)) => format!(
                    "{} {t:.2}, {}",
                    if f.higher_is_better { ">=" } else { "<=" },
                    if met { "met" } else { "missed" }
                ),
                _ => "none".to_owned(),
            };
            let cpu = f.cpu.map_or_else(
                || "-".to_owned(),
                |cpu| match cpu.baseline {
                    Some(baseline) => {
                        format!("{} / {} us", number(cpu.library), number(baseline))
                    }
                    None => format!("{} us / -", number(cpu.library)),
                },
            );
            out.push_str(&format!(
                "| {} | {} | {} {} | {} {} ({}) | {:.3} ({}) | {target} | {cpu} |\n",
                cell(&group_digits(&f.scenario)),
                meta.backend(f.backend),
                number(f.library),
                f.unit,
                number(f.baseline),
                f.unit,
                cell(f.baseline_name),
                f.ratio,
                if f.higher_is_better { "rate" } else { "cost" },
            ));
        }
    }
    if !results.latencies.is_empty() {
        out.push_str(
            "\n| commit to handler start | backend | p50 | p90 | p99 | max | p99 target | tasks |\n\
             |---|---|---|---|---|---|---|---|\n",
        );
        for l in scenario_major(&results.latencies, |l| l.scenario) {
            let target = l.target_p99_ms.map_or_else(
                || "none (bounded by the poll)".to_owned(),
                |t| {
                    format!(
                        "< {t:.0} ms, {}",
                        if l.p(0.99) < t { "met" } else { "missed" }
                    )
                },
            );
            out.push_str(&format!(
                "| {} | {} | {} ms | {} ms | {} ms | {} ms | {target} | {} |\n",
                cell(l.scenario),
                meta.backend(l.backend),
                number(l.p(0.5)),
                number(l.p(0.9)),
                number(l.p(0.99)),
                number(l.p(1.0)),
                number(l.samples.len() as f64),
            ));
        }
    }
    for (file, chart) in charts {
        out.push_str(&format!(
            "\n![{}]({PLOTS}/{file})\n",
            chart.title.replace(['[', ']'], "")
        ));
    }
    out
}

/// Writes the section and the plots of `results` into `dir`; returns the
/// files written.
pub(crate) fn write(dir: &Path, results: &Results, meta: &Meta) -> anyhow::Result<Vec<PathBuf>> {
    let file = dir.join(FILE);
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let charts = charts(results, meta);
    let replaced = replace_section(&file, &text, &section(results, meta, &charts))?;
    let plots = dir.join(PLOTS);
    std::fs::create_dir_all(&plots).with_context(|| format!("creating {}", plots.display()))?;
    let mut written = Vec::new();
    for (name, chart) in &charts {
        let path = plots.join(name);
        std::fs::write(&path, chart.svg())
            .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    std::fs::write(&file, replaced).with_context(|| format!("writing {}", file.display()))?;
    written.insert(0, file);
    Ok(written)
}

/// Refuses, before a long run, a docs file in `dir` without `markers`.
pub(crate) fn check_markers(dir: &Path, markers: Markers) -> anyhow::Result<()> {
    let file = dir.join(FILE);
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("reading {} for --write-docs", file.display()))?;
    replace_between(&file, &text, markers, "")?;
    Ok(())
}

/// Writes `body` between `markers` of the docs file in `dir`, and each of
/// `plots` (a file name in [`PLOTS`], its SVG); returns the files written.
pub(crate) fn write_between(
    dir: &Path,
    markers: Markers,
    body: &str,
    plots: &[(String, String)],
) -> anyhow::Result<Vec<PathBuf>> {
    let file = dir.join(FILE);
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let replaced = replace_between(&file, &text, markers, body)?;
    let folder = dir.join(PLOTS);
    std::fs::create_dir_all(&folder).with_context(|| format!("creating {}", folder.display()))?;
    let mut written = Vec::new();
    for (name, svg) in plots {
        let path = folder.join(name);
        std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    std::fs::write(&file, replaced).with_context(|| format!("writing {}", file.display()))?;
    written.insert(0, file);
    Ok(written)
}

/// The command line as a reader would type it: `invoked_as` (what
/// `cargo xtask bench` passes) or the binary's name, then the arguments,
/// with absolute paths cut to their last part (no machine's paths in the
/// docs) and quoted where a shell needs it.
pub(crate) fn command(invoked_as: Option<&str>, args: &[String]) -> String {
    let mut words = vec![invoked_as.unwrap_or("outbox-bench").to_owned()];
    let mut skip = false;
    for arg in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        if arg == "--invoked-as" {
            skip = true;
            continue;
        }
        if arg.starts_with("--invoked-as=") {
            continue;
        }
        let shown = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => format!("{flag}={}", redact(value)),
            _ => redact(arg),
        };
        words.push(quote(&shown));
    }
    words.join(" ")
}

/// An absolute path as `.../` and its last part; anything else as it is.
fn redact(arg: &str) -> String {
    if !arg.starts_with('/') {
        return arg.to_owned();
    }
    let last = Path::new(arg)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".../{last}")
}

fn quote(word: &str) -> String {
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_=.,/:+@".contains(c));
    if plain && !word.is_empty() {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Today's date, UTC, as `YYYY-MM-DD`.
fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil(i64::try_from(secs / 86_400).unwrap_or(0));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (the
/// days-to-civil algorithm of Howard Hinnant's `chrono`-compatible date
/// library).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// The workspace's commit, short, and whether tracked files have changes
/// not committed; none outside a git checkout.
fn commit() -> Option<(String, bool)> {
    let workspace = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(workspace)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "--short", "HEAD"]).filter(|h| !h.is_empty())?;
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|status| !status.is_empty());
    Some((head, dirty))
}

/// Cores, processor, memory and OS, from what Linux tells any process.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mut parts = vec![format!("{cores} core{}", if cores == 1 { "" } else { "s" })];
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if let Some(model) = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, model)| model.split_whitespace().collect::<Vec<_>>().join(" "))
    {
        parts[0].push_str(&format!(" ({model})"));
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    if let Some(kib) = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<f64>().ok())
    {
        parts.push(format!("{:.0} GiB", kib / 1_048_576.0));
    }
    let os = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|name| name.trim_matches('"').to_owned());
    parts.extend(os);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let kernel = kernel.trim().split('-').next().unwrap_or_default();
    parts.push(if kernel.is_empty() {
        std::env::consts::OS.to_owned()
    } else {
        format!("Linux {kernel}")
    });
    parts.push(std::env::consts::ARCH.to_owned());
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use std::{path::Path, time::Duration};

    use super::*;
    use crate::{figure::Cpu, latency::Latencies, plot::tests::assert_well_formed};

    const FILE_NAME: &str = "docs/benchmarks.md";

    fn doc(section: &str) -> String {
        format!(
            "# Benchmarks\n\nBefore, untouched: `{BEGIN}` quoted in prose.  \n\n{BEGIN}\n{section}\n{END}\n\n## After\n\nAlso untouched.\n"
        )
    }

    #[test]
    fn only_the_section_between_the_markers_is_replaced() {
        let text = "# Benchmarks\n\nIntro  with trailing spaces  \n\n<!-- bench-results:begin -->\nold table\n| a | b |\n<!-- bench-results:end -->\n\n## After\n\ntext\n";
        let replaced = replace_section(Path::new(FILE_NAME), text, "new table\n").unwrap();
        assert_eq!(
            replaced,
            "# Benchmarks\n\nIntro  with trailing spaces  \n\n<!-- bench-results:begin -->\nnew table\n<!-- bench-results:end -->\n\n## After\n\ntext\n"
        );
        // Again: the same text, so a rerun changes only the figures.
        let again = replace_section(Path::new(FILE_NAME), &replaced, "new table").unwrap();
        assert_eq!(again, replaced);
        // A marker quoted in prose is not a marker.
        let quoted = replace_section(Path::new(FILE_NAME), &doc("old"), "new").unwrap();
        assert_eq!(quoted, doc("new"));
        let (before, after) = text.split_once("old table").unwrap();
        assert!(replaced.starts_with(&before[..before.len() - 1]));
        assert!(replaced.ends_with(after.split_once("| a | b |\n").unwrap().1));
    }

    #[test]
    fn missing_or_misplaced_markers_are_typed_errors_naming_the_file() {
        let file = Path::new(FILE_NAME);
        let cases = [
            (
                "no markers at all\n".to_owned(),
                MarkerProblem::Missing(BEGIN),
            ),
            (format!("{BEGIN}\nbody\n"), MarkerProblem::Missing(END)),
            (format!("{END}\nbody\n{BEGIN}\n"), MarkerProblem::EndFirst),
            (
                format!("{BEGIN}\n{BEGIN}\n{END}\n"),
                MarkerProblem::Repeated(BEGIN),
            ),
        ];
        for (text, problem) in cases {
            let error = replace_section(file, &text, "new").unwrap_err();
            assert_eq!(
                error,
                MarkerError {
                    file: file.to_owned(),
                    markers: RESULTS,
                    problem
                }
            );
            let message = error.to_string();
            assert!(message.starts_with(FILE_NAME), "{message}");
        }
    }

    #[test]
    fn check_refuses_a_docs_dir_without_markers() {
        let dir = std::env::temp_dir().join(format!("outbox-bench-docs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(FILE), "# no markers\n").unwrap();
        let error = check(&dir).unwrap_err();
        let marker = error.downcast_ref::<MarkerError>().expect("a MarkerError");
        assert_eq!(marker.file, dir.join(FILE));
        std::fs::write(dir.join(FILE), format!("{BEGIN}\n{END}\n")).unwrap();
        check(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn quick_and_partial_runs_need_their_flag() {
        assert!(refusal(false, false, &[], false).is_none());
        let quick = refusal(true, false, &[], false).expect("refused");
        assert!(quick.contains("--allow-quick-docs"), "{quick}");
        assert!(refusal(true, true, &[], false).is_none());
        let gaps = gaps(Backend::Sqlite, &[], false, false, false, false);
        assert_eq!(
            gaps,
            [
                "only SQLite",
                "no JetStream",
                "no RabbitMQ",
                "no Redis",
                "no Kafka"
            ]
        );
        let partial = refusal(true, true, &gaps, false).expect("refused");
        assert!(partial.contains("--allow-partial-docs"), "{partial}");
        assert!(refusal(true, true, &gaps, true).is_none());
        assert!(super::gaps(Backend::All, &[], true, true, true, true).is_empty());
        assert_eq!(
            super::gaps(
                Backend::All,
                &[Scenario::Drain, Scenario::Enqueue],
                false,
                false,
                false,
                false
            ),
            ["only the scenarios enqueue, drain"]
        );
        assert_eq!(
            super::gaps(Backend::All, &[Scenario::Nats], true, false, false, false),
            ["only the scenario nats"]
        );
        // The scaling curve writes a section of its own: alone it leaves
        // the results untouched, beside others it is not one of them.
        let scaling = [Scenario::Scaling];
        assert!(super::gaps(Backend::All, &scaling, false, false, false, false).is_empty());
        assert_eq!(
            super::gaps(Backend::Sqlite, &scaling, false, false, false, false),
            ["only SQLite"]
        );
        assert_eq!(
            super::gaps(
                Backend::All,
                &[Scenario::Scaling, Scenario::Drain],
                true,
                true,
                true,
                true
            ),
            ["only the scenario drain"]
        );
    }

    #[test]
    fn commands_name_no_machine_path() {
        let args: Vec<String> = [
            "--backend",
            "sqlite",
            "--write-docs",
            "/tmp/scratch/benchdocs",
            "--json=/home/someone/bench.json",
            "--invoked-as",
            "cargo xtask bench",
            "--quick",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            command(Some("cargo xtask bench"), &args),
            "cargo xtask bench --backend sqlite --write-docs .../benchdocs --json=.../bench.json --quick"
        );
        assert_eq!(
            command(None, &["--json".into(), "my file.json".into()]),
            "outbox-bench --json 'my file.json'"
        );
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(20_454), (2026, 1, 1));
        assert_eq!(civil(19_782), (2024, 2, 29));
        assert_eq!(civil(-1), (1969, 12, 31));
    }

    fn meta(quick: bool) -> Meta {
        Meta {
            date: "2026-12-01".into(),
            commit: Some(("abc1234".into(), false)),
            machine: "2 cores, 24 GiB, Linux 6.8.0, x86_64".into(),
            load: Some("0.12".into()),
            command: "cargo xtask bench --write-docs".into(),
            quick,
            gaps: Vec::new(),
            profile: "release",
            runs: 5,
            claims: 50,
            seconds: 425,
            servers: vec![
                ("postgres", "PostgreSQL 15.10".into()),
                ("mysql", "MariaDB 10.11.6".into()),
            ],
        }
    }

    fn figure(backend: &'static str, scenario: &str, plot: Plot) -> Figure {
        Figure {
            backend,
            scenario: scenario.into(),
            unit: "tasks/s",
            library: 53_369.0,
            baseline: 54_421.0,
            ratio: 0.981,
            higher_is_better: true,
            runs: 5,
            target: Some(0.85),
            baseline_name: "raw claim + complete loop, prepared once",
            cpu: Some(Cpu {
                library: 4.4,
                baseline: Some(2.2),
            }),
            plot,
        }
    }

    fn results() -> Results {
        let rounds = Plot::Throughput("drain: rounds");
        let shape = Plot::Claim("1000000 finished rows".into());
        let mut claim = figure("mysql", "claim of 100 beside 1000000 finished rows", shape);
        claim.unit = "ms per claim";
        let mut cpu = figure("postgres", "drain 100000: CPU per task, rounds", Plot::None);
        cpu.unit = CPU_UNIT;
        Results {
            figures: vec![
                figure("postgres", "drain 100000: rounds", rounds.clone()),
                cpu,
                claim,
                figure("mysql", "drain 100000: rounds", rounds),
            ],
            latencies: vec![Latencies {
                backend: "postgres",
                scenario: "send_async right after commit",
                samples: (1..=100).map(Duration::from_micros).collect(),
                target_p99_ms: Some(10.0),
            }],
            curves: Vec::new(),
        }
    }

    #[test]
    fn the_section_holds_one_table_by_scenario_and_the_plots() {
        let (results, meta) = (results(), meta(false));
        let charts = charts(&results, &meta);
        let names: Vec<&str> = charts.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["throughput.svg", "latency.svg", "claims.svg"]);
        let section = section(&results, &meta, &charts);
        assert!(section.contains("Run of 2026-12-01 at commit `abc1234`, with `cargo xtask bench --write-docs`: full sizes, release build, medians of 5 runs per figure (50 claims per table and shape for the claims), 425 s in all."));
        assert!(section.contains("Servers: PostgreSQL 15.10, MariaDB 10.11.6."));
        assert!(section.contains("| drain 100,000: rounds | PostgreSQL | 53,369 tasks/s | 54,421 tasks/s (raw claim + complete loop, prepared once) | 0.981 (rate) | >= 0.85, met | 4.40 / 2.20 us |"));
        // The rows of one scenario follow each other; CPU-only figures are
        // in the CPU column, not rows of their own.
        let rows: Vec<&str> = section
            .lines()
            .filter(|l| l.starts_with("| drain"))
            .collect();
        assert_eq!(rows.len(), 2);
        assert!(rows[1].contains("| MariaDB |"));
        assert!(!section.contains("CPU per task, rounds"));
        assert!(section.contains("| send_async right after commit | PostgreSQL | 0.050 ms | 0.090 ms | 0.099 ms | 0.10 ms | < 10 ms, met | 100 |"));
        for name in names {
            assert!(section.contains(&format!("({PLOTS}/{name})")), "{name}");
        }
        assert!(!section.contains("Quick run"));
        for (_, chart) in &charts {
            let svg = chart.svg();
            assert_well_formed(&svg);
            assert!(svg.contains("2026-12-01 · commit abc1234"));
        }
        let claims = charts[2].1.svg();
        assert!(claims.contains("1,000,000 finished rows"));
        assert!(claims.contains("MariaDB"));
    }

    #[test]
    fn quick_figures_say_so_in_the_section_and_the_plots() {
        let (results, meta) = (results(), meta(true));
        let charts = charts(&results, &meta);
        let section = section(&results, &meta, &charts);
        assert!(section.contains("**Quick run: not comparable with full runs.**"));
        for (_, chart) in &charts {
            assert!(chart.title.ends_with("(quick run)"));
            assert!(chart.svg().contains("QUICK RUN"));
        }
    }
}
