//! A private RabbitMQ broker, its node's files under the run directory.

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use rustix::process::Signal;
use tokio::process::Command;

use super::{free_port, is_root, wait_until};
use crate::{process::Proc, run_dir::RunDir};

/// The broker user's id (`-u`) or group id (`-g`).
fn id(which: &str) -> anyhow::Result<u32> {
    let output = std::process::Command::new("id")
        .args([which, "rabbitmq"])
        .output()
        .context("running id")?;
    anyhow::ensure!(output.status.success(), "there is no user rabbitmq");
    Ok(String::from_utf8_lossy(&output.stdout).trim().parse()?)
}

/// The private broker.
#[derive(Debug)]
pub(crate) struct RabbitServer {
    dir: PathBuf,
    node: String,
    port: u16,
    dist_port: u16,
    server: Option<Proc>,
}

impl RabbitServer {
    /// Starts a broker on a free port, a node of its own named for the run,
    /// its configuration, database and logs under `run`.
    pub(crate) async fn start(run: &RunDir) -> anyhow::Result<Self> {
        let dir = run.subdir("rabbitmq")?;
        let port = free_port()?;
        // Without its own listener the node would take the shared port.
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!("listeners.tcp.default = 127.0.0.1:{port}\n"),
        )?;
        std::fs::write(dir.join("plugins"), "[].\n")?;
        if is_root() {
            // The server drops to its own user, which must own the files.
            let status = std::process::Command::new("chown")
                .args(["-R", "rabbitmq:rabbitmq"])
                .arg(&dir)
                .status()
                .context("running chown")?;
            anyhow::ensure!(status.success(), "chown of {} failed", dir.display());
        }
        let mut server = Self {
            node: format!("outbox-chaos-{}@localhost", std::process::id()),
            dir,
            port,
            dist_port: free_port()?,
            server: None,
        };
        server.launch(run).await?;
        Ok(server)
    }

    /// Its URL.
    pub(crate) fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    async fn launch(&mut self, run: &RunDir) -> anyhow::Result<()> {
        let dir = &self.dir;
        // The script itself, not /usr/sbin's wrapper, which `su`s into a
        // session of its own, out of reach of the process group this run
        // kills. As root it runs as the broker's user instead.
        let mut command = Command::new("/usr/lib/rabbitmq/bin/rabbitmq-server");
        if is_root() {
            let (uid, gid) = (id("-u")?, id("-g")?);
            command
                .uid(uid)
                .gid(gid)
                .env("HOME", "/var/lib/rabbitmq")
                .env("USER", "rabbitmq");
        }
        command
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq"))
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_PID_FILE", dir.join("pid"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("plugins"));
        self.server = Some(Proc::spawn(
            "rabbitmq-server",
            &mut command,
            &run.path().join("rabbitmq.log"),
            Signal::TERM,
            run,
        )?);
        let url = self.url();
        wait_until("the private RabbitMQ", Duration::from_secs(60), || async {
            let connection =
                lapin::Connection::connect(&url, lapin::ConnectionProperties::default()).await?;
            connection.close(200, "ready".into()).await?;
            Ok(())
        })
        .await
    }

    /// SIGKILL of the broker and everything it started: gone until
    /// [`RabbitServer::restart`].
    pub(crate) async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut server) = self.server.take() {
            server.kill().await?;
        }
        Ok(())
    }

    /// Starts it again on the same port and files, and waits until it
    /// accepts connections.
    pub(crate) async fn restart(&mut self, run: &RunDir) -> anyhow::Result<()> {
        self.kill().await?;
        self.launch(run).await
    }
}

impl crate::scenarios::broker_outage::Broker for RabbitServer {
    async fn kill(&mut self) -> anyhow::Result<()> {
        RabbitServer::kill(self).await
    }

    async fn restart(&mut self, run: &RunDir) -> anyhow::Result<()> {
        RabbitServer::restart(self, run).await
    }
}
