//! Processes this run starts (servers and relays), stopped by pid.
//!
//! Every [`Proc`] is stopped when dropped, whatever ends the run: a finished
//! scenario, a failed one, a panic, or SIGINT/SIGTERM/SIGHUP (which drop the
//! run's future, see [`super::run`]). Each runs in a process group of its
//! own, so a Ctrl-C in the terminal reaches only this process, which then
//! stops the others in order.

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio::process::{Child, Command};

use super::run_dir::RunDir;

/// SIGKILLs what is left of process group `pid` (helpers a server started,
/// such as a Galera node's state-transfer scripts); nothing when it is empty.
fn kill_group(pid: u32) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        kill_process_group(pid, Signal::KILL).ok();
    }
}

/// Sends `signal` to process `pid`.
pub(crate) fn send_signal(pid: u32, signal: Signal) -> anyhow::Result<()> {
    let raw = i32::try_from(pid).context("pid out of range")?;
    let pid = Pid::from_raw(raw).context("pid 0")?;
    kill_process(pid, signal).with_context(|| format!("signalling process {raw}"))?;
    Ok(())
}

/// A started process and how to stop it.
#[derive(Debug)]
pub(crate) struct Proc {
    name: String,
    pid: u32,
    child: Child,
    /// Sent first when stopping; SIGKILL follows if it does not exit.
    stop_signal: Signal,
}

impl Proc {
    /// Starts `command` in a process group of its own, output appended to
    /// `log`, and notes its pid in the run directory.
    pub(crate) fn spawn(
        name: &str,
        command: &mut Command,
        log: &Path,
        stop_signal: Signal,
        run: &RunDir,
    ) -> anyhow::Result<Self> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let err = out.try_clone()?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(false)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let pid = child.id().context("the process ended at once")?;
        run.note_pid(pid, name)?;
        Ok(Self {
            name: name.to_owned(),
            pid,
            child,
            stop_signal,
        })
    }

    /// Sends it `signal`.
    pub(crate) fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        send_signal(self.pid, signal)
    }

    /// Whether it still runs.
    pub(crate) fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `signal` and waits until the process has exited.
    pub(crate) async fn end_with(&mut self, signal: Signal) -> anyhow::Result<()> {
        if !self.running() {
            return Ok(());
        }
        self.signal(signal)?;
        self.child
            .wait()
            .await
            .with_context(|| format!("waiting for {} to exit", self.name))?;
        Ok(())
    }

    /// SIGKILL, then waits for the exit; whatever else runs in its process
    /// group is killed too.
    pub(crate) async fn kill(&mut self) -> anyhow::Result<()> {
        let ended = self.end_with(Signal::KILL).await;
        kill_group(self.pid);
        ended
    }

    /// Stops it: its stop signal, up to `grace` to exit, then SIGKILL.
    fn stop_now(&mut self, grace: Duration) {
        if !self.running() {
            return;
        }
        send_signal(self.pid, self.stop_signal).ok();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.running() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        send_signal(self.pid, Signal::KILL).ok();
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        kill_group(self.pid);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop_now(Duration::from_secs(5));
    }
}
