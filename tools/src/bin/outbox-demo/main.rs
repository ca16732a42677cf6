//! `cargo xtask demo` (the `outbox-demo` binary): the outbox doing its job, on SQLite (a temporary
//! file, nothing to start) or on the local database servers.
//!
//! An order service writes orders and enqueues `order.created` in the same
//! transactions and sends each right after commit, while a relay runs in a
//! process of its own. Failures are injected: the handler fails now and then,
//! and the relay is killed with SIGKILL a third of the way through. A relay
//! started afterwards catches up, and the summary shows that no order lost
//! its message.
//!
//! With `--nats` the messages go to JetStream, and a shipping service with a
//! database of its own consumes them through the inbox, recording one
//! shipment per order. The stream's duplicate window is kept shorter than
//! the relay's lease, so the killed relay's replays reach the stream again;
//! the summary shows the inbox suppressing them, for the consumer side too.
//!
//! With `--rabbitmq` (not with `--nats`) the messages go to a RabbitMQ
//! exchange instead, each confirmed into the shipping service's queue, and
//! the same service consumes that queue through the inbox. RabbitMQ keeps
//! no message ids: every replay reaches the queue, and the inbox alone
//! suppresses it.

mod broker;
mod child;
mod effect;
mod settings;
mod shipping;
mod summary;

use std::{process::Stdio, sync::Arc, time::Instant};

use anyhow::Context as _;
use clap::Parser;
use diesel_outbox_core::{CancellationToken, Maintenance, Relay, Task};
use diesel_outbox_sql::BackendKind;
use indicatif::{ProgressBar, ProgressState, ProgressStyle};

use outbox_tools::{
    raw::{self, Prepare, Raw},
    stats,
};

/// The command line: the demo, or (hidden) the relay process it starts.
#[derive(Debug, Parser)]
#[command(
    name = "outbox-demo",
    about = "Run an order service on the outbox, with failures injected, and summarise",
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
    /// The demo's relay process (started by the demo).
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

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The database to run on: SQLite needs no server.
    #[arg(long, value_parser = outbox_tools::backend::parser(&BackendKind::ALL), default_value = "sqlite")]
    backend: BackendKind,
    /// How many orders the service places.
    #[arg(long, default_value_t = 2000)]
    orders: usize,
    /// Concurrent order-placing connections.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Publish each order.created to NATS JetStream too.
    #[arg(long)]
    nats: bool,
    /// Publish each order.created to RabbitMQ too.
    #[arg(long, conflicts_with = "nats")]
    rabbitmq: bool,
}

impl Args {
    /// The broker the command line names, if any.
    fn broker(&self) -> Option<broker::Kind> {
        match (self.nats, self.rabbitmq) {
            (true, _) => Some(broker::Kind::Nats),
            (false, true) => Some(broker::Kind::RabbitMq),
            (false, false) => None,
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.orders > 0 && args.writers > 0,
        "--orders and --writers must be positive"
    );
    match args.backend {
        #[cfg(feature = "sqlite")]
        BackendKind::Sqlite => demo::<diesel_outbox_testkit::sqlite::SqliteTestDb>(&args).await,
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => demo::<diesel_outbox_testkit::postgres::PgTestDb>(&args).await,
        #[cfg(feature = "mysql")]
        BackendKind::Mysql => demo::<diesel_outbox_testkit::mysql::MysqlTestDb>(&args).await,
        #[allow(unreachable_patterns)]
        _ => anyhow::bail!(
            "outbox-demo was built without the {} backend",
            args.backend.name()
        ),
    }
}

/// A progress bar whose rate is its position over the time since `since`, in
/// whole items per second: the summary's rates are computed the same way.
fn bar(len: usize, what: &str, since: Instant) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    let template = format!("{{spinner}} {what:<18} [{{bar:40}}] {{pos}}/{{len}} ({{rate}})");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        let style = style.progress_chars("=> ").with_key(
            "rate",
            move |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                let rate = state.pos() as f64 / since.elapsed().as_secs_f64().max(f64::EPSILON);
                let _ = write!(out, "{}/s", summary::whole(rate));
            },
        );
        bar.set_style(style);
    }
    bar
}

async fn demo<B: Raw>(args: &Args) -> anyhow::Result<()> {
    eprintln!(
        "demo: {} orders on {}{}, {}% of handler calls failing, a relay killed mid-run",
        args.orders,
        args.backend.name(),
        match args.broker() {
            Some(kind) => format!(" with {}", kind.name()),
            None => String::new(),
        },
        settings::FAILURE_PERCENT
    );
    let db = Arc::new(B::create("demo").await?);
    db.create_orders().await?;
    db.execute_sql(B::DELIVERIES).await?;
    let broker = match args.broker() {
        Some(kind) => Some(broker::Broker::create(kind).await?),
        None => None,
    };
    let shipping = match &broker {
        Some(broker) => Some(shipping::Shipping::<B>::start(broker).await?),
        None => None,
    };
    let target = broker
        .as_ref()
        .map(broker::Broker::target)
        .unwrap_or_default();
    let worker = effect::worker(&db, "demo-service", target.publisher().await?)?;

    // The relay in a process of its own, to be killed.
    let mut command = tokio::process::Command::new(std::env::current_exe()?);
    command
        .args(["relay", "--backend", args.backend.name(), "--url", db.url()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .args(target.args())
        .kill_on_drop(true);
    let mut relay_process = Some(command.spawn().context("starting the relay process")?);

    // The order service: place orders, each with its message, send after commit.
    let started = Instant::now();
    let placed = bar(args.orders, "orders placed", started);
    let kill_at = (args.orders / 3).max(1);
    let third_placed = tokio::sync::Notify::new();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let writers = (0..args.writers).map(|_| async {
        let mut conn = db.connect().await?;
        loop {
            let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n >= args.orders {
                return anyhow::Ok(());
            }
            let order = i64::try_from(n)? + 1;
            // The order and its message commit together, and the message
            // is sent right after (`send_async`); on SQLite the transaction
            // queues with the relays' writes for the store's turn.
            diesel_outbox_sql::transaction(&worker, &mut conn, async |mut tx| {
                B::insert_order(tx.conn(), order, Prepare::Once).await?;
                let payload = serde_json::json!({ "order": order, "customer": "customer-9" });
                tx.enqueue(Task::json(effect::ORDER_CREATED, 1, &payload)?)
                    .await?;
                anyhow::Ok(())
            })
            .await?;
            placed.inc(1);
            if n + 1 == kill_at {
                third_placed.notify_one();
            }
        }
    });
    let killer = async {
        third_placed.notified().await;
        if let Some(mut process) = relay_process.take() {
            process.start_kill()?;
            process.wait().await?;
            placed.suspend(|| eprintln!("demo: relay process killed with SIGKILL"));
        }
        anyhow::Ok(())
    };
    futures_util::future::try_join(futures_util::future::try_join_all(writers), killer).await?;
    let placing = started.elapsed();
    placed.finish();
    worker.wait_idle().await;

    // A new relay catches up with whatever the failures left behind.
    let shutdown = CancellationToken::new();
    let relay = Relay::new(worker.clone(), settings::relay())?;
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });
    let delivered = bar(args.orders, "messages delivered", started);
    loop {
        let stats = db.store().stats().await?;
        delivered.set_position(stats.succeeded);
        if stats.backlog() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    delivered.finish();
    shutdown.cancel();
    running.await?;
    let total = started.elapsed();

    let summary = summary::Summary::collect(&*db, placing, total).await?;
    let summary = match (&broker, shipping) {
        (Some(broker), Some(shipping)) => {
            let shipped = shipping.finish(broker, summary.orders).await?;
            summary.with_broker(broker.carried().await?, shipped)
        }
        _ => summary,
    };
    summary.print();
    anyhow::ensure!(
        summary.lost == 0,
        "{} orders lost their message",
        summary.lost
    );
    summary.check_shipping()?;
    Ok(())
}
