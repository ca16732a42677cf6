//! A private Kafka-protocol broker (tansu), its log in a SQLite file under
//! the run directory, kept across restarts.

use std::{path::PathBuf, time::Duration};

use anyhow::Context as _;
use confluent_kafka::admin::ListTopicsOptions;
use diesel_outbox_testkit::kafka::{admin, tansu_args, tansu_program};
use rustix::process::Signal;
use tokio::process::Command;

use super::{free_port, wait_until};
use crate::{process::Proc, run_dir::RunDir};

/// How long one readiness probe's topic listing may take.
const PROBE_TIMEOUT_MS: i32 = 2000;

/// The private broker.
#[derive(Debug)]
pub(crate) struct KafkaServer {
    dir: PathBuf,
    log: PathBuf,
    port: u16,
    server: Option<Proc>,
}

impl KafkaServer {
    /// Starts a broker on a free port, storing in `tansu.db` under `run`.
    pub(crate) async fn start(run: &RunDir) -> anyhow::Result<Self> {
        let mut server = Self {
            dir: run.subdir("kafka")?,
            log: run.path().join("kafka.log"),
            port: free_port()?,
            server: None,
        };
        server.launch(run).await?;
        Ok(server)
    }

    /// Its bootstrap servers, `host:port`.
    pub(crate) fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn launch(&mut self, run: &RunDir) -> anyhow::Result<()> {
        let port = self.port.to_string();
        let mut command = Command::new(tansu_program());
        // The storage URL is relative: the broker's working directory holds
        // its SQLite file, so a restart finds what the killed broker wrote.
        command
            .args(
                tansu_args(true)
                    .iter()
                    .map(|arg| arg.replace("{port}", &port)),
            )
            .current_dir(&self.dir);
        self.server = Some(Proc::spawn(
            "tansu",
            &mut command,
            &self.log,
            Signal::TERM,
            run,
        )?);
        // Listening is not answering: the broker is ready once it answers a
        // metadata request, which reads its storage.
        let admin = admin(&self.bootstrap())?;
        let ready = wait_until("the private Kafka (tansu)", Duration::from_secs(30), || {
            let admin = &admin;
            async move {
                let options = ListTopicsOptions::new().set_timeout_ms(Some(PROBE_TIMEOUT_MS));
                admin
                    .list_topics_with_options(options)
                    .names()
                    .get()
                    .await?;
                Ok(())
            }
        })
        .await;
        admin.close_with_timeout(Duration::from_secs(1)).await;
        ready
    }

    /// The panics in the broker's log, each with its message: a broker
    /// that panicked may go on answering, every request with an error.
    pub(crate) fn failures(&self) -> anyhow::Result<Vec<String>> {
        let log = std::fs::read_to_string(&self.log)
            .with_context(|| format!("reading {}", self.log.display()))?;
        let mut lines = log.lines();
        let mut failures = Vec::new();
        while let Some(line) = lines.next() {
            if let Some(at) = line.find("panicked at") {
                let message = lines.next().unwrap_or_default();
                failures.push(format!("{} {message}", &line[at..]));
            }
        }
        Ok(failures)
    }

    /// SIGKILL of the broker (and its process group): gone until
    /// [`KafkaServer::restart`].
    pub(crate) async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut server) = self.server.take() {
            server.kill().await?;
        }
        Ok(())
    }

    /// Starts it again on the same port and file, and waits until it
    /// answers.
    pub(crate) async fn restart(&mut self, run: &RunDir) -> anyhow::Result<()> {
        self.kill().await?;
        self.launch(run).await
    }
}

impl crate::scenarios::broker_outage::Broker for KafkaServer {
    async fn kill(&mut self) -> anyhow::Result<()> {
        KafkaServer::kill(self).await
    }

    async fn restart(&mut self, run: &RunDir) -> anyhow::Result<()> {
        KafkaServer::restart(self, run).await
    }
}
