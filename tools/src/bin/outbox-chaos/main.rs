//! `cargo xtask chaos` (the `outbox-chaos` binary): faults injected into real servers, measured from
//! outside with the published API.
//!
//! The run starts private servers of its own (a PostgreSQL cluster, a
//! MariaDB server, a NATS server, each on a free port with its data in a
//! scratch directory) that it may crash at will, never the shared ones, and
//! stops them by pid at the end, also when a scenario fails or the run is
//! interrupted. Relays run as child processes (this binary, `outbox-chaos relay`)
//! so they can be killed. What each process handled is appended to a record
//! file of its own on local disk, outside every server a scenario faults
//! ([`records`]). Each scenario checks its invariants and reports figures;
//! the run exits non-zero when an invariant breaks.

mod child;
mod clock;
mod cluster;
mod db;
mod effect;
mod probe;
mod process;
mod producer;
mod progress;
mod records;
mod relays;
mod report;
mod run_dir;
mod scenarios;
mod servers;

use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use diesel_outbox_sql::BackendKind;
use tokio::signal::unix::{SignalKind, signal};

use outbox_tools::raw;

/// The command line: the scenarios, or (hidden) a relay process they start.
#[derive(Debug, Parser)]
#[command(
    name = "outbox-chaos",
    about = "Inject faults into private servers and check that nothing is lost",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    child: Option<Child>,
    #[command(flatten)]
    args: Args,
}

#[derive(Debug, clap::Subcommand)]
enum Child {
    /// A scenario's relay process (started by a scenario).
    #[command(hide = true)]
    Relay(child::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.child {
        Some(Child::Relay(args)) => runtime.block_on(child::run(args)),
        None => runtime.block_on(run(cli.args)),
    }
}

use self::{db::ChaosDb, progress::Progress, report::Report, run_dir::RunDir, servers::DbServer};

/// The backends the scenarios run on: database servers, which they
/// restart, kill and fail over.
pub(crate) const BACKENDS: [BackendKind; 2] = [BackendKind::Postgres, BackendKind::Mysql];

/// Why the scenarios run on no other backend.
pub(crate) const SERVERS_ONLY: &str = "outbox-chaos faults database servers, and SQLite has none";

/// Arguments of `chaos`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The backend to run on: postgres or mysql; both when omitted.
    #[arg(long, value_parser = outbox_tools::backend::parser(&BACKENDS).because(SERVERS_ONLY))]
    backend: Option<BackendKind>,
    /// Run only this scenario: restart, kill, nats, rabbitmq, redis, kafka, pool,
    /// abandon, trickle, clock or hang; with `--cluster`: galera, failover or
    /// nats-cluster.
    #[arg(long)]
    scenario: Option<String>,
    /// Run the replicated topologies instead of the single-server
    /// scenarios: a Galera cluster, PostgreSQL failover to a standby, a
    /// three-node JetStream cluster (`--backend` does not apply).
    #[arg(long)]
    cluster: bool,
    /// Shorter scenarios (CI): about two minutes per backend.
    #[arg(long)]
    quick: bool,
    /// Print the results as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

async fn run(args: Args) -> anyhow::Result<()> {
    let known: &[&'static str] = match args.cluster {
        true => &cluster::ALL,
        false => &scenarios::ALL,
    };
    let scenarios: Vec<&'static str> = match &args.scenario {
        Some(name) => vec![
            *known
                .iter()
                .find(|known| *known == name)
                .with_context(|| format!("no scenario {name}; known: {}", known.join(", ")))?,
        ],
        None => known.to_vec(),
    };
    let backends = match args.backend {
        Some(backend) => vec![backend],
        None => BACKENDS.to_vec(),
    };
    let started = Instant::now();
    let mut run = RunDir::create()?;
    eprintln!(
        "chaos: private servers and records under {}",
        run.path().display()
    );
    let work = async {
        match args.cluster {
            true => cluster::run_all(&run, &scenarios, args.quick).await,
            false => run_all(&run, &backends, &scenarios, args.quick).await,
        }
    };
    let reports = tokio::select! {
        reports = work => reports,
        signal = interrupted() => {
            // Dropping `work` stopped every process it started.
            anyhow::bail!("interrupted by {signal}; private servers and relays stopped")
        }
    };
    let reports = match reports {
        Ok(reports) => reports,
        Err(error) => {
            run.keep();
            return Err(error);
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    print(&reports, &args, seconds)?;
    let failed: Vec<String> = reports
        .iter()
        .filter(|report| !report.passed())
        .map(|report| format!("{} [{}]", report.scenario, report.backend))
        .collect();
    if !failed.is_empty() {
        run.keep();
        anyhow::bail!("invariants broke in: {}", failed.join(", "));
    }
    eprintln!("chaos: every invariant held ({seconds:.0} s)");
    Ok(())
}

#[allow(clippy::print_stdout)] // the results are the command's output
fn print(reports: &[Report], args: &Args, seconds: f64) -> anyhow::Result<()> {
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::json(reports, args.quick, seconds))?
        );
    } else {
        println!("\n{}", report::table(reports));
    }
    Ok(())
}

async fn run_all(
    run: &RunDir,
    backends: &[BackendKind],
    scenarios: &[&'static str],
    quick: bool,
) -> anyhow::Result<Vec<Report>> {
    let mut brokers = Brokers::start(run, scenarios).await?;
    let mut reports = Vec::new();
    for backend in backends {
        let found = match backend {
            #[cfg(feature = "postgres")]
            BackendKind::Postgres => {
                on::<diesel_outbox_testkit::postgres::PgTestDb>(
                    *backend,
                    run,
                    scenarios,
                    quick,
                    &mut brokers,
                )
                .await?
            }
            #[cfg(feature = "mysql")]
            BackendKind::Mysql => {
                on::<diesel_outbox_testkit::mysql::MysqlTestDb>(
                    *backend,
                    run,
                    scenarios,
                    quick,
                    &mut brokers,
                )
                .await?
            }
            BackendKind::Sqlite => anyhow::bail!("cannot run on {backend}: {SERVERS_ONLY}"),
            #[allow(unreachable_patterns)]
            _ => anyhow::bail!(
                "outbox-chaos was built without the {} backend",
                backend.name()
            ),
        };
        reports.extend(found);
    }
    Ok(reports)
}

/// The private brokers of the run, each started only when one of its
/// scenarios runs, and shared by both backends' runs of it.
#[derive(Debug)]
struct Brokers {
    #[cfg(feature = "nats")]
    nats: Option<servers::nats::NatsServer>,
    #[cfg(feature = "rabbitmq")]
    rabbitmq: Option<servers::rabbitmq::RabbitServer>,
    #[cfg(feature = "redis")]
    redis: Option<servers::redis::RedisServer>,
    #[cfg(feature = "kafka")]
    kafka: Option<servers::kafka::KafkaServer>,
}

impl Brokers {
    /// Starts the brokers `scenarios` need.
    #[cfg_attr(
        not(any(
            feature = "nats",
            feature = "rabbitmq",
            feature = "redis",
            feature = "kafka"
        )),
        allow(unused_variables)
    )]
    async fn start(run: &RunDir, scenarios: &[&'static str]) -> anyhow::Result<Self> {
        Ok(Self {
            #[cfg(feature = "nats")]
            nats: match scenarios.contains(&"nats") {
                true => Some(servers::nats::NatsServer::start(run).await?),
                false => None,
            },
            #[cfg(feature = "rabbitmq")]
            rabbitmq: match scenarios.contains(&"rabbitmq") {
                true => Some(servers::rabbitmq::RabbitServer::start(run).await?),
                false => None,
            },
            #[cfg(feature = "redis")]
            redis: match scenarios.contains(&"redis") {
                true => Some(servers::redis::RedisServer::start(run).await?),
                false => None,
            },
            #[cfg(feature = "kafka")]
            kafka: match scenarios.contains(&"kafka") {
                true => Some(servers::kafka::KafkaServer::start(run).await?),
                false => None,
            },
        })
    }
}

/// Runs `scenarios` on a private server of backend `B`, stopped afterwards.
#[cfg_attr(
    not(any(
        feature = "nats",
        feature = "rabbitmq",
        feature = "redis",
        feature = "kafka"
    )),
    allow(unused_variables)
)]
async fn on<B: ChaosDb>(
    backend: BackendKind,
    run: &RunDir,
    scenarios: &[&'static str],
    quick: bool,
    brokers: &mut Brokers,
) -> anyhow::Result<Vec<Report>> {
    eprintln!("chaos: starting a private {} server", backend.name());
    let mut server = B::Server::start(run)
        .await
        .with_context(|| format!("starting the private {} server", backend.name()))?;
    let mut reports = Vec::new();
    for name in scenarios {
        let mut ctx = scenarios::Ctx::<B> {
            run,
            server: &mut server,
            #[cfg(feature = "nats")]
            nats: brokers.nats.as_mut(),
            #[cfg(feature = "rabbitmq")]
            rabbitmq: brokers.rabbitmq.as_mut(),
            #[cfg(feature = "redis")]
            redis: brokers.redis.as_mut(),
            #[cfg(feature = "kafka")]
            kafka: brokers.kafka.as_mut(),
            backend,
            quick,
            progress: Progress::new(name, backend.name()),
        };
        let report = scenarios::run(name, &mut ctx).await;
        ctx.progress.finish(report.passed());
        if let Some(error) = &report.error {
            eprintln!(
                "chaos: {name} [{}] could not finish: {error}",
                backend.name()
            );
        }
        reports.push(report);
    }
    Ok(reports)
}

/// Resolves at the first SIGINT, SIGTERM or SIGHUP, naming it.
async fn interrupted() -> &'static str {
    let kinds = [
        (SignalKind::interrupt(), "SIGINT"),
        (SignalKind::terminate(), "SIGTERM"),
        (SignalKind::hangup(), "SIGHUP"),
    ];
    let mut streams = Vec::new();
    for (kind, name) in kinds {
        if let Ok(stream) = signal(kind) {
            streams.push((stream, name));
        }
    }
    let waits = streams.iter_mut().map(|(stream, name)| {
        Box::pin(async move {
            stream.recv().await;
            *name
        })
    });
    futures_util::future::select_all(waits).await.0
}
