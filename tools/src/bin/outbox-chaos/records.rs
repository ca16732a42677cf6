//! What each process handled, kept outside every server a scenario faults.
//!
//! Every process (each relay incarnation, and the scenario's own producer
//! side) appends to a file of its own in the scenario's directory, one line
//! per event, written with a single `write` before the handler returns. A
//! SIGKILL of the process cannot take back what was written: the kernel
//! holds it. The files are read back once the processes are gone or idle.
//!
//! A line is `<µs on the monotonic clock> <event> <fields...>`:
//!
//! | event | fields | written |
//! |---|---|---|
//! | `start` | `<pid> <wall clock ms>` | when the process starts |
//! | `claim` | `<id>:<attempt>...` | after the store claimed these tasks for this process |
//! | `begin` | `<id> <attempt> <order>` | when a handler starts |
//! | `done` | `<id> <attempt> <order> <0/1: JetStream dropped it as a replay>` | when a handler's effect happened, right before it returns `Ok` |
//! | `fail` | `<id> <attempt> <order>` | when a handler returns an error |
//! | `write` | `<applied> <id>:<attempt>...` | after the store wrote these results (`applied` still matched their claims) |
//! | `writeerr` | `<results> <error kind>` | after a write of results failed |
//! | `claimerr` | `<error kind>` | after a claim failed (read by the Galera scenario only) |

use std::{
    collections::HashMap,
    fmt::Write as _,
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
};

use anyhow::Context as _;

use super::clock;

/// A task's claim: `(task id, attempt)`.
pub(crate) type Fence = (i64, i64);

/// Appends one process's events to its file.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    file: Arc<Mutex<fs::File>>,
}

impl Recorder {
    /// Opens (creating) `path` for appending and writes the `start` line.
    pub(crate) fn open(path: &Path) -> anyhow::Result<Self> {
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        let recorder = Self {
            file: Arc::new(Mutex::new(file)),
        };
        recorder.line(&format!(
            "start {} {}",
            std::process::id(),
            clock::wall_ms()
        ))?;
        Ok(recorder)
    }

    /// Writes one event line, stamped now.
    pub(crate) fn line(&self, event: &str) -> anyhow::Result<()> {
        let text = format!("{} {event}\n", clock::now_us());
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        file.write_all(text.as_bytes())
            .context("appending to the record file")
    }

    /// `claim` for these fences.
    pub(crate) fn claims(&self, fences: impl IntoIterator<Item = Fence>) {
        let mut text = String::from("claim");
        for (id, attempt) in fences {
            let _ = write!(text, " {id}:{attempt}");
        }
        self.line(&text).ok();
    }

    /// `write` of these fences, `applied` of them still current.
    pub(crate) fn written(&self, applied: u64, fences: impl IntoIterator<Item = Fence>) {
        let mut text = format!("write {applied}");
        for (id, attempt) in fences {
            let _ = write!(text, " {id}:{attempt}");
        }
        self.line(&text).ok();
    }
}

/// One event read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The process started; its wall clock then.
    Start { wall_ms: i64 },
    /// Tasks claimed.
    Claim(Vec<Fence>),
    /// A handler started.
    Begin { fence: Fence, order: i64 },
    /// A handler's effect happened.
    Done {
        fence: Fence,
        order: i64,
        replay: bool,
    },
    /// A handler returned an error.
    Fail { fence: Fence, order: i64 },
    /// Results written; `applied` of them matched their claims.
    Write { applied: u64, fences: Vec<Fence> },
    /// A write of results failed.
    WriteErr,
}

/// The events of one process, in the order written.
#[derive(Debug, Clone)]
pub(crate) struct ProcessLog {
    /// The owner name (the file's stem).
    pub(crate) owner: String,
    /// `(µs, event)`.
    pub(crate) events: Vec<(u64, Event)>,
}

impl ProcessLog {
    /// Fences this process claimed and never saw written: what it held.
    pub(crate) fn held(&self) -> Vec<Fence> {
        let mut claimed: Vec<Fence> = Vec::new();
        let mut written = std::collections::HashSet::new();
        for (_, event) in &self.events {
            match event {
                Event::Claim(fences) => claimed.extend(fences),
                Event::Write { fences, .. } => written.extend(fences.iter().copied()),
                _ => {}
            }
        }
        claimed.retain(|fence| !written.contains(fence));
        claimed.sort_unstable();
        claimed.dedup();
        claimed
    }

    /// When the first successful write with applied rows came at or after `since`.
    pub(crate) fn first_write_after(&self, since: u64) -> Option<u64> {
        self.events.iter().find_map(|(at, event)| match event {
            Event::Write { applied, .. } if *at >= since && *applied > 0 => Some(*at),
            _ => None,
        })
    }

    /// The wall clock the process reported at its start, if it did.
    pub(crate) fn start_wall_ms(&self) -> Option<(u64, i64)> {
        self.events.iter().find_map(|(at, event)| match event {
            Event::Start { wall_ms } => Some((*at, *wall_ms)),
            _ => None,
        })
    }
}

fn fence(word: &str) -> Option<Fence> {
    let (id, attempt) = word.split_once(':')?;
    Some((id.parse().ok()?, attempt.parse().ok()?))
}

fn parse(line: &str) -> Option<(u64, Event)> {
    let mut words = line.split_whitespace();
    let at: u64 = words.next()?.parse().ok()?;
    let kind = words.next()?;
    let rest: Vec<&str> = words.collect();
    let num = |i: usize| rest.get(i).and_then(|w| w.parse::<i64>().ok());
    let event = match kind {
        "start" => Event::Start { wall_ms: num(1)? },
        "claim" => Event::Claim(rest.iter().filter_map(|w| fence(w)).collect()),
        "begin" => Event::Begin {
            fence: (num(0)?, num(1)?),
            order: num(2)?,
        },
        "done" => Event::Done {
            fence: (num(0)?, num(1)?),
            order: num(2)?,
            replay: num(3) == Some(1),
        },
        "fail" => Event::Fail {
            fence: (num(0)?, num(1)?),
            order: num(2)?,
        },
        "write" => Event::Write {
            applied: rest.first()?.parse().ok()?,
            fences: rest.iter().skip(1).filter_map(|w| fence(w)).collect(),
        },
        "writeerr" => Event::WriteErr,
        _ => return None,
    };
    Some((at, event))
}

/// Reads one record file. A torn last line (a process killed mid-write) is skipped.
pub(crate) fn read_file(path: &Path) -> anyhow::Result<ProcessLog> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let owner = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or_default()
        .to_owned();
    Ok(ProcessLog {
        owner,
        events: text.lines().filter_map(parse).collect(),
    })
}

/// Reads every `*.log` record file in `dir`.
pub(crate) fn read_dir(dir: &Path) -> anyhow::Result<Vec<ProcessLog>> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    paths.sort();
    paths.iter().map(|path| read_file(path)).collect()
}

/// How many `done` lines the record files in `dir` hold, without parsing
/// them (for the progress line).
pub(crate) fn count_done(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .filter_map(|path| fs::read_to_string(path).ok())
        .map(|text| text.matches(" done ").count())
        .sum()
}

/// Every handler effect across processes, by order: `(µs, owner, fence)`.
pub(crate) fn deliveries(logs: &[ProcessLog]) -> HashMap<i64, Vec<(u64, String, Fence)>> {
    let mut by_order: HashMap<i64, Vec<(u64, String, Fence)>> = HashMap::new();
    for log in logs {
        for (at, event) in &log.events {
            if let Event::Done { fence, order, .. } = event {
                by_order
                    .entry(*order)
                    .or_default()
                    .push((*at, log.owner.clone(), *fence));
            }
        }
    }
    for list in by_order.values_mut() {
        list.sort();
    }
    by_order
}
