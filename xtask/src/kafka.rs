//! The Kafka-protocol broker the Kafka tests, bench and chaos scenarios
//! talk to: `tansu`, installed from crates.io into the user's cache once
//! per machine, and a private instance of it for `cargo xtask test`.

use std::{
    net::{Ipv4Addr, TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};

/// The version installed; its storage engines are features of their own
/// (`dynostore` for memory, `libsql` for a SQLite file).
const VERSION: &str = "0.6.0";
const FEATURES: &str = "libsql,dynostore";

/// Environment variable naming the program, as the testkit reads it.
const PROGRAM_VAR: &str = "OUTBOX_TANSU";
/// Environment variable naming the cluster the tests use.
pub(crate) const BOOTSTRAP_VAR: &str = "OUTBOX_KAFKA_BOOTSTRAP";

/// Where the program is: [`PROGRAM_VAR`], else under the user's cache
/// (where the testkit looks too).
fn program() -> PathBuf {
    match std::env::var_os(PROGRAM_VAR) {
        Some(program) => PathBuf::from(program),
        None => cache_root().join("bin/tansu"),
    }
}

fn cache_root() -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".cache/outbox-tools/tansu")
}

/// Installs `tansu` unless it is there: `cargo install` into the cache,
/// built in a scratch target directory that is removed afterwards (about
/// ten minutes on two cores, once per machine).
pub(crate) fn ensure_installed() -> anyhow::Result<PathBuf> {
    let program = program();
    if program.exists() {
        return Ok(program);
    }
    ensure!(
        std::env::var_os(PROGRAM_VAR).is_none(),
        "{PROGRAM_VAR} names {}, which does not exist",
        program.display()
    );
    let root = cache_root();
    let scratch = std::env::temp_dir().join(format!("outbox-tansu-build-{}", std::process::id()));
    eprintln!(
        "xtask: installing tansu {VERSION} (a Kafka-protocol broker) into {}; it builds once per machine",
        root.display()
    );
    let status = Command::new(crate::tool::cargo_program())
        .args([
            "install",
            "tansu",
            "--version",
            VERSION,
            "--locked",
            "--features",
            FEATURES,
        ])
        .arg("--root")
        .arg(&root)
        .arg("--target-dir")
        .arg(&scratch)
        .status()
        .context("running cargo install tansu")?;
    std::fs::remove_dir_all(&scratch).ok();
    ensure!(status.success(), "cargo install tansu failed: {status}");
    ensure!(
        program.exists(),
        "{} is missing after the install",
        program.display()
    );
    Ok(program)
}

/// A private broker for the test run, its data in memory; killed when
/// dropped.
#[derive(Debug)]
pub(crate) struct PrivateBroker {
    child: Child,
    bootstrap: String,
}

impl PrivateBroker {
    /// Starts `tansu` on a free loopback port and waits until it listens.
    pub(crate) fn start() -> anyhow::Result<Self> {
        let program = ensure_installed()?;
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let listener = format!("tcp://127.0.0.1:{port}");
        let log = std::env::temp_dir().join(format!("outbox-tansu-{port}.log"));
        let child = Command::new(&program)
            .args([
                "broker",
                "--listener-url",
                &listener,
                "--advertised-listener-url",
                &listener,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(&log)
                    .with_context(|| format!("creating {}", log.display()))?,
            )
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let mut broker = Self {
            child,
            bootstrap: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            if let Some(status) = broker.child.try_wait()? {
                bail!("tansu exited with {status}; its log: {}", log.display());
            }
            if Instant::now() > deadline {
                bail!(
                    "tansu did not listen on port {port} within 30 s; its log: {}",
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("xtask: Kafka (tansu) answers at {}", broker.bootstrap);
        Ok(broker)
    }

    /// Its bootstrap servers.
    pub(crate) fn bootstrap(&self) -> &str {
        &self.bootstrap
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}
