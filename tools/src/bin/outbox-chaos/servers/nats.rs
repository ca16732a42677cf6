//! A private NATS server with JetStream, its store under the run directory.

use std::{path::PathBuf, time::Duration};

use rustix::process::Signal;
use tokio::process::Command;

use super::{free_port, wait_until};
use crate::{process::Proc, run_dir::RunDir};

/// The private server.
#[derive(Debug)]
pub(crate) struct NatsServer {
    store: PathBuf,
    log: PathBuf,
    port: u16,
    server: Option<Proc>,
}

impl NatsServer {
    /// Starts a server on a free port with JetStream storing under `run`.
    pub(crate) async fn start(run: &RunDir) -> anyhow::Result<Self> {
        let mut server = Self {
            store: run.subdir("nats")?,
            log: run.path().join("nats.log"),
            port: free_port()?,
            server: None,
        };
        server.launch(run).await?;
        Ok(server)
    }

    /// Its URL.
    pub(crate) fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    async fn launch(&mut self, run: &RunDir) -> anyhow::Result<()> {
        let mut command = Command::new("nats-server");
        command
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store);
        self.server = Some(Proc::spawn(
            "nats-server",
            &mut command,
            &self.log,
            Signal::KILL,
            run,
        )?);
        let url = self.url();
        wait_until("the private NATS", Duration::from_secs(30), || async {
            let client = async_nats::connect(&url).await?;
            // The server listens for clients once JetStream has recovered its store.
            anyhow::ensure!(client.server_info().jetstream, "JetStream is off");
            Ok(())
        })
        .await
    }

    /// SIGKILL: the server is gone until [`NatsServer::restart`].
    pub(crate) async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut server) = self.server.take() {
            server.kill().await?;
        }
        Ok(())
    }

    /// Starts it again on the same port and store, and waits for JetStream.
    pub(crate) async fn restart(&mut self, run: &RunDir) -> anyhow::Result<()> {
        self.kill().await?;
        self.launch(run).await
    }
}
