//! `outbox-chaos relay`: one relay in a process of its own, so that a
//! scenario can SIGKILL it, and its records in a file of its own.

use std::{path::PathBuf, time::Duration};

use diesel_outbox_core::{
    CancellationToken, Relay, RelayConfig, RetryPolicy, Worker, WorkerConfig,
};
use diesel_outbox_sql::BackendKind;

use super::{
    db::ChaosDb,
    effect::{self, Behaviour},
    probe::Probe,
    records::Recorder,
};

/// Arguments of the hidden `relay` command (see [`super::relays::RelaySpec`]).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Args {
    /// The scenario's backend.
    #[arg(long, value_parser = outbox_tools::backend::parser(&super::BACKENDS).because(super::SERVERS_ONLY))]
    pub(crate) backend: BackendKind,
    /// The scenario's database.
    #[arg(long)]
    pub(crate) url: String,
    /// The scenario's record directory; this process appends to `<owner>.log`.
    #[arg(long)]
    pub(crate) records: PathBuf,
    /// The relay's owner name (unique per process).
    #[arg(long)]
    pub(crate) owner: String,
    /// Milliseconds each handler works before its effect.
    #[arg(long, default_value_t = 5)]
    pub(crate) work_ms: u64,
    /// Milliseconds each handler waits after its effect.
    #[arg(long, default_value_t = 0)]
    pub(crate) linger_ms: u64,
    /// Handler timeout, milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub(crate) timeout_ms: u64,
    /// Lease, milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub(crate) lease_ms: u64,
    /// Handlers at once.
    #[arg(long, default_value_t = 16)]
    pub(crate) concurrency: usize,
    /// Relay poll interval, milliseconds.
    #[arg(long, default_value_t = 100)]
    pub(crate) poll_ms: u64,
    /// Backoff between attempts (base and cap), milliseconds.
    #[arg(long, default_value_t = 200)]
    pub(crate) retry_ms: u64,
    /// Fail every first attempt (retryably).
    #[arg(long)]
    pub(crate) fail_first: bool,
    /// Hang on tasks marked `hang` until another relay wrote their result.
    #[arg(long)]
    pub(crate) hang: bool,
    /// Listen for wake-ups at commit (PostgreSQL's NOTIFY) beside polling.
    #[arg(long)]
    pub(crate) notify: bool,
    /// Publish each delivery to JetStream on this server (or these,
    /// separated by commas).
    #[arg(long)]
    pub(crate) nats_url: Option<String>,
    /// Publish each claim's deliveries through the RabbitMQ batch publisher
    /// to this broker.
    #[arg(long)]
    pub(crate) amqp_url: Option<String>,
    /// Publish each claim's deliveries through the Redis Streams batch
    /// publisher to this server.
    #[arg(long)]
    pub(crate) redis_url: Option<String>,
    /// Publish each claim's deliveries through the Kafka publisher to the
    /// cluster at these bootstrap servers, to the topic of `backend`.
    #[arg(long)]
    pub(crate) kafka_bootstrap: Option<String>,
}

impl Args {
    /// The worker settings these arguments describe.
    pub(crate) fn worker_config(&self) -> anyhow::Result<WorkerConfig> {
        let retry = Duration::from_millis(self.retry_ms);
        Ok(WorkerConfig::default()
            .owner(self.owner.clone())
            .handler_timeout(Duration::from_millis(self.timeout_ms))
            .lease_duration(Duration::from_millis(self.lease_ms))
            .concurrency(self.concurrency)
            .retry(RetryPolicy::new(retry, retry, 0.0)?))
    }

    /// The relay settings these arguments describe.
    pub(crate) fn relay_config(&self) -> RelayConfig {
        RelayConfig::default()
            .poll_interval(Duration::from_millis(self.poll_ms))
            .batch_size(self.concurrency)
            .retention(None)
    }
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    exit_with_parent();
    match args.backend {
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => relay::<diesel_outbox_testkit::postgres::PgTestDb>(args).await,
        #[cfg(feature = "mysql")]
        BackendKind::Mysql => relay::<diesel_outbox_testkit::mysql::MysqlTestDb>(args).await,
        BackendKind::Sqlite => {
            anyhow::bail!("cannot run on {}: {}", args.backend, super::SERVERS_ONLY)
        }
        #[allow(unreachable_patterns)]
        _ => anyhow::bail!("outbox-chaos was built without this backend"),
    }
}

async fn relay<B: ChaosDb>(args: Args) -> anyhow::Result<()> {
    let recorder = Recorder::open(&args.records.join(format!("{}.log", args.owner)))?;
    let db = B::attach(&args.url).await?;
    let behaviour = Behaviour {
        work: Duration::from_millis(args.work_ms),
        linger: Duration::from_millis(args.linger_ms),
        fail_first: args.fail_first,
        hang: args
            .hang
            .then(|| (args.records.clone(), args.owner.clone())),
        #[cfg(feature = "nats")]
        publisher: match &args.nats_url {
            Some(url) => Some(std::sync::Arc::new(effect::publisher(url).await?)),
            None => None,
        },
        #[cfg(feature = "rabbitmq")]
        amqp: match &args.amqp_url {
            Some(url) => Some(std::sync::Arc::new(effect::amqp_publisher(url)?)),
            None => None,
        },
        #[cfg(feature = "redis")]
        redis: match &args.redis_url {
            Some(url) => Some(std::sync::Arc::new(effect::redis_publisher(url)?)),
            None => None,
        },
        #[cfg(feature = "kafka")]
        kafka: match &args.kafka_bootstrap {
            Some(bootstrap) => Some(std::sync::Arc::new(effect::kafka_publisher(
                bootstrap,
                &effect::kafka_topic(args.backend),
            )?)),
            None => None,
        },
    };
    #[cfg(not(feature = "kafka"))]
    anyhow::ensure!(
        args.kafka_bootstrap.is_none(),
        "outbox-chaos was built without `kafka`"
    );
    #[cfg(not(feature = "redis"))]
    anyhow::ensure!(
        args.redis_url.is_none(),
        "outbox-chaos was built without `redis`"
    );
    #[cfg(not(feature = "rabbitmq"))]
    anyhow::ensure!(
        args.amqp_url.is_none(),
        "outbox-chaos was built without `rabbitmq`"
    );
    #[cfg(not(feature = "nats"))]
    anyhow::ensure!(
        args.nats_url.is_none(),
        "outbox-chaos was built without `nats`"
    );
    let store = match args.notify {
        true => db
            .notifying_store()
            .ok_or_else(|| anyhow::anyhow!("this backend has no wake-ups at commit"))?,
        false => db.store().clone(),
    };
    let worker = Worker::with_config(
        Probe::new(store, recorder.clone()),
        effect::registry(recorder, behaviour)?,
        args.worker_config()?,
    )?;
    Relay::new(worker, args.relay_config())?
        .run(CancellationToken::new())
        .await;
    Ok(())
}

/// Ends this process when the chaos run that started it is gone, so a relay
/// never outlives a run that was itself killed.
fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if std::os::unix::process::parent_id() != parent {
                std::process::exit(1);
            }
        }
    });
}
