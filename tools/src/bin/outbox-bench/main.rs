//! `cargo xtask bench` (the `outbox-bench` binary): this project against
//! hand-written SQL, in one run.
//!
//! Each scenario runs the library and its baseline interleaved (A B A B ...)
//! on a database of its own, and reports medians and their ratio; absolute
//! numbers drift on shared machines, ratios hold.
//!
//! With `--write-docs`, the run's figures also replace the results section
//! of `docs/benchmarks.md` and its plots in `docs/bench/` (see [`docs`]).

mod counting;
mod curve;
mod docs;
mod drain;
mod enqueue;
mod figure;
#[cfg(feature = "kafka")]
mod kafka;
mod latency;
#[cfg(feature = "nats")]
mod nats;
mod plot;
#[cfg(any(
    feature = "nats",
    feature = "rabbitmq",
    feature = "redis",
    feature = "kafka"
))]
mod publishing;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;
#[cfg(feature = "redis")]
mod redis;
mod scale;
mod server;
mod soak;
mod timeline;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use clap::Parser;
use outbox_tools::{raw, stats};

use self::{figure::Figure, latency::Latencies, raw::Raw, server::Server};

/// Where `--write-docs` writes when given no directory: the workspace's
/// `docs`.
const DOCS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs");

/// Which backends to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Backend {
    /// PostgreSQL only.
    Postgres,
    /// MySQL/MariaDB only.
    Mysql,
    /// SQLite only (a temporary file, no server).
    Sqlite,
    /// All three.
    All,
}

impl Backend {
    /// What a run of one backend leaves out, as the docs' headers say it
    /// (`--backend mysql` runs on MariaDB as well as MySQL); nothing for
    /// all three.
    pub(crate) fn only(self) -> Option<String> {
        let name = match self {
            Self::Postgres => "PostgreSQL",
            Self::Mysql => "MySQL/MariaDB",
            Self::Sqlite => "SQLite",
            Self::All => return None,
        };
        Some(format!("only {name}"))
    }
}

/// Arguments of `bench`.
#[derive(Debug, Parser)]
#[command(
    name = "outbox-bench",
    about = "Measure the library against hand-written SQL; prints ratios"
)]
pub(crate) struct Args {
    /// Which backends to measure.
    #[arg(long, value_enum, default_value = "all")]
    backend: Backend,
    /// Smaller sizes and fewer runs: a smoke check in under a minute per backend.
    #[arg(long)]
    quick: bool,
    /// Also write every figure as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Skip the JetStream scenario.
    #[arg(long)]
    no_nats: bool,
    /// Skip the RabbitMQ scenario.
    #[arg(long)]
    no_rabbitmq: bool,
    /// Skip the Redis Streams scenario.
    #[arg(long)]
    no_redis: bool,
    /// Skip the Kafka scenario.
    #[arg(long)]
    no_kafka: bool,
    /// Run on an outbox whose tables carry the prefix `tenant_`
    /// (`tenant_outbox_tasks`...), the library and the hand-written SQL
    /// alike: its ratios, beside a run without it, show what a table
    /// prefix costs.
    #[arg(long)]
    tenant_tables: bool,
    /// Run on an outbox in the schema `tenant` whose tables carry the
    /// prefix `tenant_` (`"tenant".tenant_outbox_tasks`...), PostgreSQL
    /// only: what a schema costs beside a run without it.
    #[arg(long, conflicts_with = "tenant_tables")]
    tenant_schema: bool,
    /// Run only these scenarios (repeat the flag, or separate with commas);
    /// all when not given. For profiling one of them; the table and the
    /// JSON then hold only their figures.
    #[arg(long, value_enum, value_delimiter = ',')]
    scenario: Vec<Scenario>,
    /// After the run, rewrite the results section of DIR/benchmarks.md
    /// (between its `<!-- bench-results:begin -->` and
    /// `<!-- bench-results:end -->` lines) with this run's figures, and
    /// draw its plots into DIR/bench/. DIR is the workspace's `docs` when
    /// not given. Refused for a --quick run or one of fewer backends or
    /// scenarios than all, unless allowed below.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = DOCS)]
    write_docs: Option<PathBuf>,
    /// Let --write-docs write a --quick run's figures, marked as quick (for
    /// checking the output on a scratch copy; never commit them).
    #[arg(long, requires = "write_docs")]
    allow_quick_docs: bool,
    /// Let --write-docs write a run of fewer backends or scenarios than
    /// all, marked as partial.
    #[arg(long, requires = "write_docs")]
    allow_partial_docs: bool,
    /// Instead of the scenarios, the soak: producers enqueue at a steady
    /// share of the rate the machine sustains (measured first) while two
    /// relays deliver and retention purges, for --soak-minutes (30 s with --quick),
    /// sampled as it ages the tables.
    #[arg(long, conflicts_with_all = ["scenario", "tenant_tables", "tenant_schema"])]
    soak: bool,
    /// How long the soak's producers run.
    #[arg(long, default_value_t = 30, requires = "soak")]
    soak_minutes: u64,
    /// The soak's rate, as a share of the rate the machine sustained with
    /// producers flat out beside the relays, measured first.
    #[arg(long, default_value_t = 0.7, requires = "soak")]
    soak_load: f64,
    /// A rate for the soak's producers in tasks/s, instead of --soak-load's
    /// share of the rate measured first: two builds compared at one rate.
    #[arg(long, requires = "soak", conflicts_with = "soak_load")]
    soak_rate: Option<f64>,
    /// How often the soak's relays purge, in seconds (`purge_interval`;
    /// 30 in the full form, 5 with --quick).
    #[arg(long, requires = "soak")]
    soak_purge_interval: Option<u64>,
    /// How long the soak keeps finished tasks, in seconds (`retention`;
    /// 300 in the full form, 20 with --quick): a shorter one starts the
    /// purge cycles sooner in a short run.
    #[arg(long, requires = "soak")]
    soak_retention: Option<u64>,
    /// How often the soak takes a sample, in seconds (60 in the full form,
    /// 5 with --quick): finer samples show what a minute's p99 hides.
    #[arg(long, requires = "soak")]
    soak_sample: Option<u64>,
    /// Rows per maintenance statement of the soak's relays, while the rate
    /// is measured and after (purge, promotion and rescue: `purge_batch`,
    /// 1 to 5,000; the relay's default of 1,000 unless given). To compare
    /// two settings, offer both one rate (--soak-rate).
    #[arg(long, requires = "soak")]
    soak_purge_batch: Option<usize>,
    /// The command the docs say ran the bench (`cargo xtask bench` passes
    /// its own name).
    #[arg(long, hide = true)]
    invoked_as: Option<String>,
}

/// One scenario of the bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    /// Order + enqueue, and enqueue_many, against hand-written inserts.
    Enqueue,
    /// Draining a backlog: rounds and relays against a hand-written loop.
    Drain,
    /// Commit to handler start: send_async, NOTIFY, polling.
    Latency,
    /// Claim cost, and the read of the ages, beside each backlog shape.
    Scale,
    /// Drain throughput with 1, 2, 4 and 8 relays, rounds and hand-written
    /// loops, at claims of 10, 100 and 1,000.
    Scaling,
    /// JetStream publishing through the relay against raw async-nats, a
    /// hand-written publisher and the raw drain loop alone.
    Nats,
    /// RabbitMQ publishing through the relay against raw lapin and a
    /// hand-written publisher, with confirms in flight.
    Rabbitmq,
    /// Redis Streams publishing through the relay against pipelined raw
    /// `XADD`s and a hand-written publisher.
    Redis,
    /// Kafka publishing through the relay against raw confluent-kafka and
    /// a hand-written publisher, idempotent with `acks=all`, acks in
    /// flight.
    Kafka,
}

/// Sizes and repetitions.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Runs per A/B pair (the median is reported).
    pub(crate) runs: usize,
    /// Business transactions per enqueue run.
    pub(crate) transactions: usize,
    /// Pending tasks per drain run.
    pub(crate) backlog: u64,
    /// Tasks per latency scenario.
    pub(crate) latency_tasks: usize,
    /// Waiting rows (not due, or in backoff) for the scale scenarios.
    pub(crate) waiting: u64,
    /// Rows of one ordering key (blocked, or succeeded) for the scale scenarios.
    pub(crate) keyed: u64,
    /// Finished rows for the scale scenarios.
    pub(crate) finished: u64,
    /// Claims per table in each scale scenario.
    pub(crate) claims: usize,
    /// Pending tasks per drain of the scaling curve.
    pub(crate) curve_tasks: u64,
    /// Drains per point of the scaling curve (the median is reported).
    pub(crate) curve_runs: usize,
    /// Tasks per broker run (JetStream, RabbitMQ, Redis, Kafka).
    #[cfg_attr(
        not(any(
            feature = "nats",
            feature = "rabbitmq",
            feature = "redis",
            feature = "kafka"
        )),
        allow(dead_code)
    )]
    pub(crate) nats_tasks: u64,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                runs: 3,
                transactions: 300,
                backlog: 5_000,
                latency_tasks: 300,
                waiting: 20_000,
                keyed: 10_000,
                finished: 100_000,
                claims: 20,
                curve_tasks: 1_000,
                curve_runs: 1,
                nats_tasks: 1_000,
            }
        } else {
            Self {
                runs: 5,
                transactions: 2_000,
                backlog: 100_000,
                latency_tasks: 5_000,
                waiting: 200_000,
                keyed: 100_000,
                finished: 1_000_000,
                claims: 50,
                curve_tasks: 20_000,
                curve_runs: 3,
                nats_tasks: 10_000,
            }
        }
    }
}

#[derive(Default)]
pub(crate) struct Results {
    pub(crate) figures: Vec<Figure>,
    pub(crate) latencies: Vec<Latencies>,
    pub(crate) curves: Vec<curve::Curve>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.soak {
        return soak_backends(&args).await;
    }
    let plan = Plan::new(args.quick);
    let only = Only(args.scenario.clone());
    if only.0.contains(&Scenario::Nats) && (args.no_nats || !cfg!(feature = "nats")) {
        anyhow::bail!(
            "--scenario nats needs JetStream: drop --no-nats (and build with the `nats` feature)"
        );
    }
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    if only.0.contains(&Scenario::Rabbitmq) && (args.no_rabbitmq || !cfg!(feature = "rabbitmq")) {
        anyhow::bail!(
            "--scenario rabbitmq needs RabbitMQ: drop --no-rabbitmq (and build with the `rabbitmq` feature)"
        );
    }
    if only.0.contains(&Scenario::Redis) && (args.no_redis || !cfg!(feature = "redis")) {
        anyhow::bail!(
            "--scenario redis needs Redis: drop --no-redis (and build with the `redis` feature)"
        );
    }
    if only.0.contains(&Scenario::Kafka) && (args.no_kafka || !cfg!(feature = "kafka")) {
        anyhow::bail!(
            "--scenario kafka needs Kafka: drop --no-kafka (and build with the `kafka` feature)"
        );
    }
    if (args.tenant_tables || args.tenant_schema) && args.write_docs.is_some() {
        anyhow::bail!(
            "--write-docs keeps the default names' figures: drop --tenant-tables and --tenant-schema"
        );
    }
    if args.tenant_schema && !matches!(args.backend, Backend::Postgres) {
        anyhow::bail!(
            "--tenant-schema runs on PostgreSQL only (a MySQL schema is a database the \
             scenarios would share): add --backend postgres"
        );
    }
    let with_nats = !args.no_nats && cfg!(feature = "nats");
    let with_rabbitmq = !args.no_rabbitmq && cfg!(feature = "rabbitmq");
    let with_redis = !args.no_redis && cfg!(feature = "redis");
    let with_kafka = !args.no_kafka && cfg!(feature = "kafka");
    let mut meta = match &args.write_docs {
        Some(dir) => {
            let gaps = docs::gaps(
                args.backend,
                &args.scenario,
                with_nats,
                with_rabbitmq,
                with_redis,
                with_kafka,
            );
            if let Some(refusal) = docs::refusal(
                args.quick,
                args.allow_quick_docs,
                &gaps,
                args.allow_partial_docs,
            ) {
                anyhow::bail!(refusal);
            }
            // Before the run, so that a long run is not spent for nothing.
            docs::check(dir)?;
            if only.runs(Scenario::Scaling) {
                curve::check(dir)?;
            }
            let passed: Vec<String> = std::env::args().skip(1).collect();
            let command = docs::command(args.invoked_as.as_deref(), &passed);
            Some(docs::Meta::start(command, args.quick, gaps, profile, &plan))
        }
        None => None,
    };
    eprintln!(
        "bench: {} mode, {profile} build, {} runs per figure",
        if args.quick { "quick" } else { "full" },
        plan.runs
    );
    let brokers = Brokers {
        nats: with_nats,
        rabbitmq: with_rabbitmq,
        redis: with_redis,
        kafka: with_kafka,
    };
    let mut results = Results::default();
    let started = Instant::now();
    if args.tenant_schema {
        let names = backends::<diesel_outbox_testkit::SchemaTenantNames>;
        names(
            args.backend,
            &plan,
            &only,
            brokers,
            &mut results,
            meta.as_mut(),
        )
        .await?;
    } else if args.tenant_tables {
        let names = backends::<diesel_outbox_testkit::TenantNames>;
        names(
            args.backend,
            &plan,
            &only,
            brokers,
            &mut results,
            meta.as_mut(),
        )
        .await?;
    } else {
        let names = backends::<diesel_outbox_testkit::DefaultNames>;
        names(
            args.backend,
            &plan,
            &only,
            brokers,
            &mut results,
            meta.as_mut(),
        )
        .await?;
    }
    let seconds = started.elapsed().as_secs();
    print_table(&results, profile, seconds);
    if let Some(path) = args.json {
        let json = serde_json::json!({
            "profile": profile,
            "quick": args.quick,
            "figures": results.figures.iter().map(Figure::json).collect::<Vec<_>>(),
            "latencies": results.latencies.iter().map(Latencies::json).collect::<Vec<_>>(),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("bench: wrote {}", path.display());
    }
    if let (Some(dir), Some(mut meta)) = (&args.write_docs, meta) {
        meta.seconds = seconds;
        #[cfg(feature = "nats")]
        if with_nats && only.runs(Scenario::Nats) {
            match server::nats().await {
                Ok(server) => meta.servers.push(("nats", server)),
                Err(error) => eprintln!("bench: the NATS server's version: {error:#}"),
            }
        }
        #[cfg(feature = "redis")]
        if with_redis && only.runs(Scenario::Redis) {
            match server::redis().await {
                Ok(server) => meta.servers.push(("redis", server)),
                Err(error) => eprintln!("bench: the Redis server's version: {error:#}"),
            }
        }
        #[cfg(feature = "kafka")]
        if with_kafka && only.runs(Scenario::Kafka) {
            match server::kafka() {
                Ok(server) => meta.servers.push(("kafka", server)),
                Err(error) => eprintln!("bench: the Kafka broker's version: {error:#}"),
            }
        }
        if !results.figures.is_empty() || !results.latencies.is_empty() {
            for path in docs::write(dir, &results, &meta)? {
                eprintln!("bench: wrote {}", path.display());
            }
        }
        if !results.curves.is_empty() {
            for path in curve::write(dir, &results.curves, &meta)? {
                eprintln!("bench: wrote {}", path.display());
            }
        }
    }
    Ok(())
}

/// `--soak`: the soak on each backend `args` names, one after the other.
async fn soak_backends(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.soak_load > 0.0 && args.soak_load <= 2.0,
        "--soak-load must be above 0 and at most 2 (a share of the drain rate)"
    );
    anyhow::ensure!(args.soak_minutes > 0, "--soak-minutes must be at least 1");
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let mut plan = soak::SoakPlan::new(args.quick, args.soak_minutes, args.soak_load);
    if let Some(seconds) = args.soak_purge_interval {
        anyhow::ensure!(seconds > 0, "--soak-purge-interval must be at least 1");
        plan.purge_interval = Duration::from_secs(seconds);
    }
    if let Some(rate) = args.soak_rate {
        anyhow::ensure!(
            rate.is_finite() && rate >= 1.0,
            "--soak-rate must be at least 1 task/s"
        );
        plan.rate = Some(rate);
    }
    if let Some(seconds) = args.soak_retention {
        plan.retention = Duration::from_secs(seconds);
    }
    if let Some(seconds) = args.soak_sample {
        anyhow::ensure!(seconds > 0, "--soak-sample must be at least 1");
        plan.sample = Duration::from_secs(seconds);
    }
    if let Some(rows) = args.soak_purge_batch {
        anyhow::ensure!(
            (1..=diesel_outbox_core::limits::MAX_BATCH_SIZE).contains(&rows),
            "--soak-purge-batch must be 1 to 5,000 (the relay's MAX_BATCH_SIZE)"
        );
        plan.purge_batch = Some(rows);
    }
    if let Some(dir) = &args.write_docs {
        if args.quick && !args.allow_quick_docs {
            anyhow::bail!(
                "--write-docs refuses a quick soak's figures: drop --quick, or add --allow-quick-docs for a scratch copy"
            );
        }
        if args.backend != Backend::All && !args.allow_partial_docs {
            anyhow::bail!(
                "--write-docs writes a soak of every backend: drop --backend, or add --allow-partial-docs"
            );
        }
        soak::report::check(dir)?;
    }
    let passed: Vec<String> = std::env::args().skip(1).collect();
    let command = docs::command(args.invoked_as.as_deref(), &passed);
    let gaps: Vec<String> = args.backend.only().into_iter().collect();
    let mut meta = docs::Meta::start(command, args.quick, gaps, profile, &Plan::new(args.quick));
    let claims = soak::claim_times()?;
    let mut runs = Vec::new();
    if matches!(args.backend, Backend::Postgres | Backend::All) {
        #[cfg(feature = "postgres")]
        runs.push(
            soak_on::<diesel_outbox_testkit::postgres::PgTestDb>(&plan, &claims, &mut meta).await?,
        );
        #[cfg(not(feature = "postgres"))]
        anyhow::bail!("outbox-bench was built without the `postgres` feature");
    }
    if matches!(args.backend, Backend::Mysql | Backend::All) {
        #[cfg(feature = "mysql")]
        runs.push(
            soak_on::<diesel_outbox_testkit::mysql::MysqlTestDb>(&plan, &claims, &mut meta).await?,
        );
        #[cfg(not(feature = "mysql"))]
        anyhow::bail!("outbox-bench was built without the `mysql` feature");
    }
    if matches!(args.backend, Backend::Sqlite | Backend::All) {
        #[cfg(feature = "sqlite")]
        runs.push(
            soak_on::<diesel_outbox_testkit::sqlite::SqliteTestDb>(&plan, &claims, &mut meta)
                .await?,
        );
        #[cfg(not(feature = "sqlite"))]
        anyhow::bail!("outbox-bench was built without the `sqlite` feature");
    }
    print_soak(&runs, &meta);
    if let Some(dir) = &args.write_docs {
        for path in soak::report::write(dir, &runs, &meta)? {
            eprintln!("bench: wrote {}", path.display());
        }
    }
    Ok(())
}

/// One backend's soak, on a database of its own.
async fn soak_on<B: soak::Storage + Server>(
    plan: &soak::SoakPlan,
    claims: &soak::ClaimTimes,
    meta: &mut docs::Meta,
) -> anyhow::Result<soak::report::SoakRun> {
    let db = B::create("soak").await?;
    db.create_orders().await?;
    match db.server().await {
        Ok(server) => meta.servers.push((B::NAME, server)),
        Err(error) => eprintln!("bench: the {} server's version: {error:#}", B::NAME),
    }
    soak::run(&db, plan, claims).await
}

#[allow(clippy::print_stdout)] // the tables are the command's output
fn print_soak(runs: &[soak::report::SoakRun], meta: &docs::Meta) {
    for run in runs {
        println!();
        println!(
            "soak on {}: {:.0} tasks/s offered ({:.0}% of {:.0} tasks/s sustained)",
            meta.backend(run.backend),
            run.rate,
            run.share_percent(),
            run.capacity
        );
        println!();
        print!("{}", run.table());
        println!();
        print!("{}", run.verdict());
    }
}

/// The brokers a run measures.
#[derive(Debug, Clone, Copy)]
struct Brokers {
    nats: bool,
    rabbitmq: bool,
    redis: bool,
    kafka: bool,
}

/// The scenarios asked for; all when none was named.
struct Only(Vec<Scenario>);

impl Only {
    fn runs(&self, scenario: Scenario) -> bool {
        self.0.is_empty() || self.0.contains(&scenario)
    }
}

/// The backends `which` names, on the outbox called `N`.
async fn backends<N: diesel_outbox_testkit::TestNames>(
    which: Backend,
    plan: &Plan,
    only: &Only,
    brokers: Brokers,
    results: &mut Results,
    // Reborrowed for each backend but the last; a build with SQLite alone
    // only moves it.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(unused_mut))]
    mut meta: Option<&mut docs::Meta>,
) -> anyhow::Result<()> {
    if matches!(which, Backend::Postgres | Backend::All) {
        #[cfg(feature = "postgres")]
        backend::<diesel_outbox_testkit::postgres::PgTestDbNamed<N>>(
            plan,
            only,
            brokers,
            results,
            meta.as_deref_mut(),
        )
        .await?;
        #[cfg(not(feature = "postgres"))]
        anyhow::bail!("outbox-bench was built without the `postgres` feature");
    }
    if matches!(which, Backend::Mysql | Backend::All) {
        #[cfg(feature = "mysql")]
        backend::<diesel_outbox_testkit::mysql::MysqlTestDbNamed<N>>(
            plan,
            only,
            brokers,
            results,
            meta.as_deref_mut(),
        )
        .await?;
        #[cfg(not(feature = "mysql"))]
        anyhow::bail!("outbox-bench was built without the `mysql` feature");
    }
    if matches!(which, Backend::Sqlite | Backend::All) {
        #[cfg(feature = "sqlite")]
        backend::<diesel_outbox_testkit::sqlite::SqliteTestDbNamed<N>>(
            plan, only, brokers, results, meta,
        )
        .await?;
        #[cfg(not(feature = "sqlite"))]
        anyhow::bail!("outbox-bench was built without the `sqlite` feature");
    }
    Ok(())
}

async fn backend<B: Raw + Server>(
    plan: &Plan,
    only: &Only,
    brokers: Brokers,
    results: &mut Results,
    meta: Option<&mut docs::Meta>,
) -> anyhow::Result<()> {
    let step = |name: &str| eprintln!("bench: {} {name}", B::NAME);
    let db = B::create("bench").await?;
    if let Some(meta) = meta {
        match db.server().await {
            Ok(server) => meta.servers.push((B::NAME, server)),
            Err(error) => eprintln!("bench: the {} server's version: {error:#}", B::NAME),
        }
    }
    db.create_orders().await?;
    if only.runs(Scenario::Enqueue) {
        step("enqueue");
        results.figures.extend(enqueue::measure(&db, plan).await?);
    }
    if only.runs(Scenario::Drain) {
        step("drain");
        results.figures.extend(drain::measure(&db, plan).await?);
    }
    if only.runs(Scenario::Latency) {
        step("latency");
        results.latencies.extend(latency::measure(&db, plan).await?);
    }
    if only.runs(Scenario::Scale) {
        step("scale");
        let due_only = B::create("bench_due_only").await?;
        due_only.create_orders().await?;
        let shaped = B::create("bench_scale").await?;
        shaped.create_orders().await?;
        results
            .figures
            .extend(scale::measure(&due_only, &shaped, plan).await?);
        drop((due_only, shaped));
    }
    if only.runs(Scenario::Scaling) {
        step("scaling");
        results.curves.push(curve::measure(&db, plan).await?);
    }
    if brokers.nats && only.runs(Scenario::Nats) {
        #[cfg(feature = "nats")]
        {
            step("nats");
            results.figures.extend(nats::measure(&db, plan).await?);
        }
    }
    if brokers.rabbitmq && only.runs(Scenario::Rabbitmq) {
        #[cfg(feature = "rabbitmq")]
        {
            step("rabbitmq");
            results.figures.extend(rabbitmq::measure(&db, plan).await?);
        }
    }
    if brokers.redis && only.runs(Scenario::Redis) {
        #[cfg(feature = "redis")]
        {
            step("redis");
            results.figures.extend(redis::measure(&db, plan).await?);
        }
    }
    if brokers.kafka && only.runs(Scenario::Kafka) {
        #[cfg(feature = "kafka")]
        {
            step("kafka");
            results.figures.extend(kafka::measure(&db, plan).await?);
        }
    }
    Ok(())
}

#[allow(clippy::print_stdout)] // the table is the command's output
fn print_table(results: &Results, profile: &str, seconds: u64) {
    if !results.figures.is_empty() || !results.latencies.is_empty() {
        print_figures(results);
    }
    for curve in &results.curves {
        println!();
        println!(
            "scaling on {}: drains of {} tasks, medians of {}",
            curve.backend, curve.tasks, curve.runs
        );
        println!();
        print!("{}", curve.table());
    }
    println!();
    println!("{profile} build; took {seconds} s");
}

#[allow(clippy::print_stdout)] // the tables are the command's output
fn print_figures(results: &Results) {
    println!();
    println!("| backend | scenario | library | baseline | ratio | target | runs |");
    println!("|---|---|---|---|---|---|---|");
    for f in &results.figures {
        let reads = if f.higher_is_better {
            "library/baseline rate"
        } else {
            "library/baseline cost"
        };
        let target = match (f.target, f.meets()) {
            (Some(t), Some(true)) => format!(
                "{} {t:.2} (met)",
                if f.higher_is_better { ">=" } else { "<=" }
            ),
            (Some(t), _) => format!(
                "{} {t:.2} (missed)",
                if f.higher_is_better { ">=" } else { "<=" }
            ),
            (None, _) => "-".into(),
        };
        println!(
            "| {} | {} | {:.1} {} | {:.1} ({}) | {:.3} ({reads}) | {target} | {} |",
            f.backend, f.scenario, f.library, f.unit, f.baseline, f.baseline_name, f.ratio, f.runs
        );
    }
    println!();
    println!(
        "| backend | latency, commit to handler start | p50 ms | p99 ms | max ms | p99 target | tasks |"
    );
    println!("|---|---|---|---|---|---|---|");
    for l in &results.latencies {
        let target = l.target_p99_ms.map_or_else(
            || "-".to_owned(),
            |t| {
                format!(
                    "< {t:.0} ms ({})",
                    if l.p(0.99) < t { "met" } else { "missed" }
                )
            },
        );
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {target} | {} |",
            l.backend,
            l.scenario,
            l.p(0.5),
            l.p(0.99),
            l.p(1.0),
            l.samples.len()
        );
    }
}
