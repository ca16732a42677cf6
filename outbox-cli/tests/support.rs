//! Running the binary, and tasks to run it on.

use std::process::{Command, Output, Stdio};

use diesel_outbox_core::TaskId;
use diesel_outbox_testkit::{
    TestBackend,
    conformance::support::{KIND, config, enqueue_committed, registry, worker},
    handler,
};
use serde_json::Value;

/// The binary under test.
pub(crate) const OUTBOX: &str = env!("CARGO_BIN_EXE_outbox");

/// What a run of `outbox` gave.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// Stdout as one JSON document.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {self:?}"))
    }

    /// Asserts the exit code, showing the whole run otherwise.
    #[track_caller]
    pub(crate) fn expect(self, code: i32) -> Self {
        assert_eq!(self.code, code, "{self:#?}");
        self
    }
}

/// Runs `outbox ARGS` with `DATABASE_URL=url` and no terminal on stdin, as
/// a script would.
pub(crate) fn outbox(url: &str, args: &[&str]) -> Run {
    let output: Output = Command::new(OUTBOX)
        .args(args)
        .env("DATABASE_URL", url)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("running {OUTBOX}: {error}"));
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// [`outbox`], failing when the command has not ended within `limit` (a
/// `serve` that started when it should have refused), and killing it then.
pub(crate) async fn outbox_within(
    url: &str,
    args: &[&str],
    limit: std::time::Duration,
) -> anyhow::Result<Run> {
    let child = tokio::process::Command::new(OUTBOX)
        .args(args)
        .env("DATABASE_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| anyhow::anyhow!("`outbox {}` still ran after {limit:?}", args.join(" ")))??;
    Ok(Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Fails `ids` for good, through a worker whose handler refuses them; the
/// last error names the injected failure.
pub(crate) async fn fail<B: TestBackend>(db: &B, ids: &[TaskId]) -> anyhow::Result<()> {
    let (mock, _) = handler::failing_permanently();
    let worker = worker(db, registry(mock)?, config("cli-test"))?;
    for &id in ids {
        anyhow::ensure!(worker.send(id).await.is_err(), "task {id} did not fail");
    }
    Ok(())
}

/// Enqueues one task per error of `errors`, committed, and fails each for
/// good with that error as its last: tasks failing in several ways, for
/// the failure groups.
pub(crate) async fn fail_with<B: TestBackend>(
    db: &B,
    errors: &[&str],
) -> anyhow::Result<Vec<TaskId>> {
    let tasks = errors
        .iter()
        .map(|error| {
            diesel_outbox_core::Task::json(KIND, 1, &serde_json::json!({ "error": error }))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ids = enqueue_committed(db, tasks).await?;
    let handler =
        diesel_outbox_core::handler_fn(|delivery: diesel_outbox_core::Delivery| async move {
            let payload: Value = delivery.json()?;
            let error = payload["error"].as_str().unwrap_or_default().to_owned();
            Err(diesel_outbox_core::HandlerError::permanent(
                anyhow::anyhow!(error),
            ))
        });
    let worker = worker(db, registry(handler)?, config("cli-test"))?;
    for &id in &ids {
        anyhow::ensure!(worker.send(id).await.is_err(), "task {id} did not fail");
    }
    Ok(ids)
}

/// Enqueues `tasks` committed, then fails the first `failed` of them.
pub(crate) async fn seed<B: TestBackend>(
    db: &B,
    tasks: Vec<diesel_outbox_core::Task>,
    failed: usize,
) -> anyhow::Result<Vec<TaskId>> {
    let ids = enqueue_committed(db, tasks).await?;
    fail(db, &ids[..failed]).await?;
    Ok(ids)
}

/// The text of the failure the test handler injects.
pub(crate) const INJECTED: &str = handler::INJECTED_PERMANENT_FAILURE;

/// `outbox ARGS` run on a terminal of its own (a pseudo-terminal util-linux
/// `script` opens), as an operator runs it: it asks its questions there,
/// and the test answers them. Dropping it kills the command if it still
/// runs.
pub(crate) struct OnTerminal {
    child: std::process::Child,
    output: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: Vec<u8>,
}

/// How long a terminal is waited for, at most, before the test fails.
const TERMINAL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl OnTerminal {
    /// Starts `outbox ARGS` with `DATABASE_URL=url` on a terminal.
    pub(crate) fn start(url: &str, args: &[&str]) -> anyhow::Result<Self> {
        // `script` runs one command line with `$SHELL -c`: name a POSIX
        // shell, whatever the user's is, and quote every word for it.
        let quoted: Vec<String> = std::iter::once(OUTBOX)
            .chain(args.iter().copied())
            .map(|word| format!("'{}'", word.replace('\'', r"'\''")))
            .collect();
        let mut child = Command::new("script")
            .args([
                "--quiet",
                "--return",
                "--command",
                &quoted.join(" "),
                "/dev/null",
            ])
            .env("SHELL", "/bin/sh")
            .env("DATABASE_URL", url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|error| {
                anyhow::anyhow!(
                    "starting `script` (util-linux), which gives the command a terminal: {error}"
                )
            })?;
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let (sender, output) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut stdout, &mut chunk) {
                if sender.send(chunk[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            output,
            seen: Vec::new(),
        })
    }

    /// What the terminal showed so far, as text.
    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    /// Waits ([`TERMINAL_WAIT`] at most) until the terminal shows `text`.
    pub(crate) fn wait_for(&mut self, text: &str) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + TERMINAL_WAIT;
        while !self.shown().contains(text) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.output.recv_timeout(left) {
                Ok(chunk) => self.seen.extend_from_slice(&chunk),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait()?;
                    anyhow::bail!(
                        "the command ended ({status}) without showing {text:?}: {:?}",
                        self.shown()
                    )
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    anyhow::bail!("the terminal never showed {text:?}: {:?}", self.shown())
                }
            }
        }
        Ok(())
    }

    /// Types `line` and Enter, then waits ([`TERMINAL_WAIT`] at most) for
    /// the command to end: its exit code and everything the terminal
    /// showed.
    pub(crate) fn answer(mut self, line: &str) -> anyhow::Result<(i32, String)> {
        let mut stdin = self
            .child
            .stdin
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
        std::io::Write::write_all(&mut stdin, format!("{line}\n").as_bytes())?;
        let deadline = std::time::Instant::now() + TERMINAL_WAIT;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self
                .output
                .recv_timeout(left.min(std::time::Duration::from_millis(50)))
            {
                Ok(chunk) => self.seen.extend_from_slice(&chunk),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
            anyhow::ensure!(
                !left.is_zero(),
                "the command did not end after the answer {line:?}: {:?}",
                self.shown()
            );
        };
        drop(stdin);
        // The reader ends at the terminal's end of file; wait for the rest.
        while let Ok(chunk) = self.output.recv_timeout(TERMINAL_WAIT) {
            self.seen.extend_from_slice(&chunk);
        }
        Ok((status.code().unwrap_or(-1), self.shown()))
    }
}

impl Drop for OnTerminal {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
