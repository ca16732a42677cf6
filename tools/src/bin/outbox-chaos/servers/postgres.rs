//! A private PostgreSQL cluster: `initdb` and `postgres` from the
//! PostgreSQL 15 binaries, a data directory under the run directory, a free
//! port, TCP only. As root, both run as the `postgres` user.
//!
//! The failover scenario starts two named nodes with settings of their own:
//! a primary ([`PgServer::init`]) and a streaming standby made from it
//! (see [`standby`]).

mod standby;

use std::{os::unix::fs::chown, path::PathBuf, time::Duration};

use anyhow::Context as _;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use rustix::process::Signal;
use tokio::process::Command;

use super::{DbServer, free_port, is_root, system_user, wait_until};
use crate::{process::Proc, run_dir::RunDir};

/// Where the PostgreSQL 15 server binaries are (Debian's layout);
/// `OUTBOX_PG_BIN` overrides it.
const DEFAULT_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The private cluster.
#[derive(Debug)]
pub(crate) struct PgServer {
    bin: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    user: Option<(u32, u32)>,
    postmaster: Option<Proc>,
    /// The node's name in process names and file names.
    name: String,
    /// Extra `name=value` settings passed as `-c` options.
    settings: Vec<String>,
}

impl PgServer {
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        command
    }

    /// A new data directory `<run>/<name>` (`initdb`), and the server on it
    /// with `settings` (`name=value`) on top of the usual ones.
    pub(crate) async fn init(run: &RunDir, name: &str, settings: &[&str]) -> anyhow::Result<Self> {
        let server = Self::empty(run, name, settings)?;
        let out = std::fs::File::create(run.path().join(format!("{name}-initdb.log")))?;
        let status = server
            .command("initdb")
            .args(["-D", &server.data.display().to_string()])
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()
            .await
            .with_context(|| format!("running initdb from {}", server.bin.display()))?;
        anyhow::ensure!(
            status.success(),
            "initdb failed ({status}); see {name}-initdb.log in the run directory"
        );
        let mut server = server;
        server.launch(run).await?;
        Ok(server)
    }

    /// The node `name` with an empty data directory, not started.
    fn empty(run: &RunDir, name: &str, settings: &[&str]) -> anyhow::Result<Self> {
        let bin = PathBuf::from(
            std::env::var("OUTBOX_PG_BIN")
                .ok()
                .filter(|bin| !bin.is_empty())
                .unwrap_or_else(|| DEFAULT_BIN.to_owned()),
        );
        let user = if is_root() {
            Some(system_user("postgres")?)
        } else {
            None
        };
        let data = run.path().join(name);
        std::fs::create_dir(&data)?;
        if let Some((uid, gid)) = user {
            chown(&data, Some(uid), Some(gid)).context("handing the data directory to postgres")?;
        }
        // pg_basebackup wants the directory private, as initdb makes it.
        std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        Ok(Self {
            bin,
            log: run.path().join(format!("{name}.log")),
            data,
            port: free_port()?,
            user,
            postmaster: None,
            name: name.to_owned(),
            settings: settings.iter().map(|&setting| setting.to_owned()).collect(),
        })
    }

    async fn launch(&mut self, run: &RunDir) -> anyhow::Result<()> {
        let port = self.port.to_string();
        let data = self.data.display().to_string();
        let mut command = self.command("postgres");
        command.args(["-D", &data, "-p", &port]).args([
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "unix_socket_directories=",
            // A crash here is the server process's, never the machine's:
            // what a commit wrote to the kernel survives it without fsync.
            "-c",
            "fsync=off",
            "-c",
            "max_connections=300",
        ]);
        for setting in &self.settings {
            command.args(["-c", setting]);
        }
        self.postmaster = Some(Proc::spawn(
            &self.name,
            &mut command,
            &self.log,
            Signal::QUIT,
            run,
        )?);
        let url = self.admin_url();
        wait_until(
            "the private PostgreSQL",
            Duration::from_secs(60),
            || async {
                AsyncPgConnection::establish(&url).await?;
                Ok(())
            },
        )
        .await
    }
}

impl DbServer for PgServer {
    const CRASH: &'static str = "immediate shutdown (SIGQUIT to the postmaster)";

    async fn start(run: &RunDir) -> anyhow::Result<Self> {
        Self::init(run, "postgres", &[]).await
    }

    fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    fn admin_url(&self) -> String {
        self.url("postgres")
    }

    async fn crash(&mut self) -> anyhow::Result<()> {
        if let Some(mut postmaster) = self.postmaster.take() {
            postmaster.end_with(Signal::QUIT).await?;
        }
        Ok(())
    }

    async fn restart(&mut self, run: &RunDir) -> anyhow::Result<()> {
        self.crash().await?;
        self.launch(run).await
    }
}
