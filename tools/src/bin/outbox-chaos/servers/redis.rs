//! A private Redis, append-only with every write on disk before its
//! reply, its files under the run directory.

use std::{path::PathBuf, time::Duration};

use rustix::process::Signal;
use tokio::process::Command;

use super::{free_port, wait_until};
use crate::{process::Proc, run_dir::RunDir};

/// The private server.
#[derive(Debug)]
pub(crate) struct RedisServer {
    dir: PathBuf,
    port: u16,
    server: Option<Proc>,
}

impl RedisServer {
    /// Starts a server on a free port, its append-only file under `run`.
    pub(crate) async fn start(run: &RunDir) -> anyhow::Result<Self> {
        let mut server = Self {
            dir: run.subdir("redis")?,
            port: free_port()?,
            server: None,
        };
        server.launch(run).await?;
        Ok(server)
    }

    /// Its URL.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn launch(&mut self, run: &RunDir) -> anyhow::Result<()> {
        let mut command = Command::new("redis-server");
        // `appendfsync always`: an add Redis answered is on disk, so a
        // SIGKILL loses none of them (with `everysec`, the last second's).
        command
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ]);
        self.server = Some(Proc::spawn(
            "redis-server",
            &mut command,
            &run.path().join("redis.log"),
            Signal::TERM,
            run,
        )?);
        let url = self.url();
        wait_until("the private Redis", Duration::from_secs(30), || async {
            let client = redis::Client::open(url.as_str())?;
            let mut connection = client.get_multiplexed_async_connection().await?;
            redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await?;
            Ok(())
        })
        .await
    }

    /// SIGKILL: gone until [`RedisServer::restart`].
    pub(crate) async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut server) = self.server.take() {
            server.kill().await?;
        }
        Ok(())
    }

    /// Starts it again on the same port and files, and waits until it
    /// answers (after loading its append-only file).
    pub(crate) async fn restart(&mut self, run: &RunDir) -> anyhow::Result<()> {
        self.kill().await?;
        self.launch(run).await
    }
}

impl crate::scenarios::broker_outage::Broker for RedisServer {
    async fn kill(&mut self) -> anyhow::Result<()> {
        RedisServer::kill(self).await
    }

    async fn restart(&mut self, run: &RunDir) -> anyhow::Result<()> {
        RedisServer::restart(self, run).await
    }
}
