//! The run's scratch directory: server data, record files, logs, and the
//! pids of every process the run started.
//!
//! Everything lives under `<temp>/outbox-chaos/run-<pid>/`. A run ended by
//! SIGKILL cannot stop its servers; the next run finds its directory (the
//! pid no longer runs `outbox-chaos`), stops every process listed in its `pids`
//! file whose command line still names that directory, and removes it.

use std::{
    fs,
    io::Write as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;

use super::process::send_signal;

/// The directory of one run; removed when dropped unless [`RunDir::keep`] was called.
#[derive(Debug)]
pub(crate) struct RunDir {
    path: PathBuf,
    keep: bool,
}

impl RunDir {
    /// Creates this run's directory after clearing what dead runs left behind.
    pub(crate) fn create() -> anyhow::Result<Self> {
        let base = std::env::temp_dir().join("outbox-chaos");
        fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        open_to_all(&base)?;
        reap_stale(&base);
        let path = base.join(format!("run-{}", std::process::id()));
        if path.exists() {
            fs::remove_dir_all(&path)?;
        }
        fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        // Servers run as their own users when this runs as root.
        open_to_all(&path)?;
        Ok(Self { path, keep: false })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A subdirectory, created if missing.
    pub(crate) fn subdir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.path.join(name);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        open_to_all(&dir)?;
        Ok(dir)
    }

    /// Notes a started process, so a later run can stop it if this one dies.
    pub(crate) fn note_pid(&self, pid: u32, name: &str) -> anyhow::Result<()> {
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path.join("pids"))?;
        writeln!(file, "{pid} {name}")?;
        Ok(())
    }

    /// Keeps the directory (logs, data, records) for inspection.
    pub(crate) fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("chaos: kept {} for inspection", self.path.display());
        } else if let Err(error) = fs::remove_dir_all(&self.path) {
            eprintln!("chaos: could not remove {}: {error}", self.path.display());
        }
    }
}

fn open_to_all(dir: &Path) -> anyhow::Result<()> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("setting the mode of {}", dir.display()))
}

/// The command line of process `pid`, arguments joined by spaces; `None`
/// when no such process runs.
pub(crate) fn command_line(pid: u32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(String::from_utf8_lossy(&raw).replace('\0', " "))
}

/// Stops what runs that died left running, and removes their directories.
fn reap_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let Some(owner) = dir
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_prefix("run-"))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = command_line(owner).is_some_and(|cmd| cmd.contains("outbox-chaos"));
        if alive && owner != std::process::id() {
            continue;
        }
        let pids = fs::read_to_string(dir.join("pids")).unwrap_or_default();
        let marker = dir.display().to_string();
        let mut stopped = 0;
        for line in pids.lines() {
            let mut words = line.split_whitespace();
            let (Some(pid), Some(name)) = (words.next().and_then(|p| p.parse().ok()), words.next())
            else {
                continue;
            };
            // Only a process whose command line names the dead run's
            // directory: the pid may have been reused since.
            if command_line(pid).is_some_and(|cmd| cmd.contains(&marker)) {
                let signal = if name.starts_with("postgres") {
                    rustix::process::Signal::QUIT
                } else {
                    rustix::process::Signal::KILL
                };
                send_signal(pid, signal).ok();
                stopped += 1;
            }
        }
        if stopped > 0 {
            eprintln!("chaos: stopped {stopped} processes a killed run left behind ({marker})");
            std::thread::sleep(Duration::from_millis(500));
        }
        fs::remove_dir_all(&dir).ok();
    }
}
