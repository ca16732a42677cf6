//! Relay processes of a scenario: started by re-running this binary as
//! `outbox-chaos relay`, each incarnation with an owner name and a record file
//! of its own (`r1.0`, then `r1.1` after a restart, ...).

use std::{collections::HashMap, path::PathBuf};

use anyhow::Context as _;
use diesel_outbox_sql::BackendKind;
use rustix::process::Signal;
use tokio::process::Command;

use super::{process::Proc, run_dir::RunDir};

/// How a relay process is set up (see [`super::child::Args`]).
#[derive(Debug, Clone)]
pub(crate) struct RelaySpec {
    pub(crate) work_ms: u64,
    pub(crate) linger_ms: u64,
    pub(crate) timeout_ms: u64,
    pub(crate) lease_ms: u64,
    pub(crate) concurrency: usize,
    pub(crate) poll_ms: u64,
    pub(crate) retry_ms: u64,
    pub(crate) fail_first: bool,
    pub(crate) hang: bool,
    pub(crate) nats_url: Option<String>,
    /// Publish through the RabbitMQ batch publisher to this broker.
    pub(crate) amqp_url: Option<String>,
    /// Publish through the Redis Streams batch publisher to this server.
    pub(crate) redis_url: Option<String>,
    /// Publish through the Kafka publisher to the cluster at these
    /// bootstrap servers, to the topic of the relay's backend.
    pub(crate) kafka_bootstrap: Option<String>,
    /// Listen for wake-ups at commit where the backend can (PostgreSQL's
    /// NOTIFY), beside polling.
    pub(crate) notify: bool,
    /// Offset of the process's wall clock, in libfaketime's `FAKETIME`
    /// syntax (`+3600` is an hour ahead).
    pub(crate) clock_offset: Option<String>,
}

impl Default for RelaySpec {
    fn default() -> Self {
        Self {
            work_ms: 5,
            linger_ms: 0,
            timeout_ms: 1000,
            lease_ms: 3000,
            concurrency: 16,
            poll_ms: 100,
            retry_ms: 200,
            fail_first: false,
            hang: false,
            nats_url: None,
            amqp_url: None,
            redis_url: None,
            kafka_bootstrap: None,
            notify: false,
            clock_offset: None,
        }
    }
}

/// A running relay process.
#[derive(Debug)]
pub(crate) struct RelayProc {
    /// Its owner name, and the stem of its record file.
    pub(crate) owner: String,
    /// The process.
    pub(crate) proc: Proc,
}

/// Starts relay processes for one scenario.
#[derive(Debug)]
pub(crate) struct Relays {
    backend: BackendKind,
    url: String,
    records: PathBuf,
    incarnations: HashMap<String, u32>,
}

impl Relays {
    /// Relays on database `url`, recording into `records`.
    pub(crate) fn new(backend: BackendKind, url: &str, records: PathBuf) -> Self {
        Self {
            backend,
            url: url.to_owned(),
            records,
            incarnations: HashMap::new(),
        }
    }

    /// Starts the next incarnation of relay `slot`.
    pub(crate) fn start(
        &mut self,
        slot: &str,
        spec: &RelaySpec,
        run: &RunDir,
    ) -> anyhow::Result<RelayProc> {
        let n = self.incarnations.entry(slot.to_owned()).or_insert(0);
        let owner = format!("{slot}.{n}");
        *n += 1;
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args(["relay", "--backend", self.backend.name(), "--url"])
            .arg(&self.url)
            .arg("--records")
            .arg(&self.records)
            .args(["--owner", &owner])
            .args(["--work-ms", &spec.work_ms.to_string()])
            .args(["--linger-ms", &spec.linger_ms.to_string()])
            .args(["--timeout-ms", &spec.timeout_ms.to_string()])
            .args(["--lease-ms", &spec.lease_ms.to_string()])
            .args(["--concurrency", &spec.concurrency.to_string()])
            .args(["--poll-ms", &spec.poll_ms.to_string()])
            .args(["--retry-ms", &spec.retry_ms.to_string()]);
        if spec.fail_first {
            command.arg("--fail-first");
        }
        if spec.hang {
            command.arg("--hang");
        }
        if spec.notify {
            command.arg("--notify");
        }
        if let Some(url) = &spec.amqp_url {
            command.args(["--amqp-url", url]);
        }
        if let Some(url) = &spec.redis_url {
            command.args(["--redis-url", url]);
        }
        if let Some(bootstrap) = &spec.kafka_bootstrap {
            command.args(["--kafka-bootstrap", bootstrap]);
        }
        if let Some(url) = &spec.nats_url {
            command.args(["--nats-url", url]);
        }
        if let Some(offset) = &spec.clock_offset {
            command
                .env("LD_PRELOAD", libfaketime()?)
                .env("FAKETIME", offset)
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let log = self.records.join(format!("{owner}.err"));
        let proc = Proc::spawn(
            &format!("relay {owner}"),
            &mut command,
            &log,
            Signal::KILL,
            run,
        )?;
        Ok(RelayProc { owner, proc })
    }
}

/// Where libfaketime is: `OUTBOX_LIBFAKETIME`, or Debian's and other usual places.
pub(crate) fn libfaketime() -> anyhow::Result<String> {
    if let Ok(path) = std::env::var("OUTBOX_LIBFAKETIME")
        && !path.is_empty()
    {
        return Ok(path);
    }
    let arch = std::env::consts::ARCH;
    [
        format!("/usr/lib/{arch}-linux-gnu/faketime/libfaketimeMT.so.1"),
        "/usr/lib/faketime/libfaketimeMT.so.1".to_owned(),
        "/usr/local/lib/faketime/libfaketimeMT.so.1".to_owned(),
    ]
    .into_iter()
    .find(|path| std::path::Path::new(path).exists())
    .context(
        "the clock-skew scenario fakes a relay's clock with libfaketime, which is not \
         installed; install it (Debian: apt-get install libfaketime) or point \
         OUTBOX_LIBFAKETIME at libfaketimeMT.so.1",
    )
}
