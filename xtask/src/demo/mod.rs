//! `cargo xtask demo`: the outbox doing its job, on SQLite (a temporary
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

mod child;
mod effect;
mod settings;
#[cfg(feature = "nats")]
mod shipping;
mod summary;

use std::{process::Stdio, sync::Arc, time::Instant};

use anyhow::Context as _;
use diesel_async::AsyncConnection;
use diesel_outbox_core::{CancellationToken, Maintenance, Relay, Store, Task};
use indicatif::{ProgressBar, ProgressState, ProgressStyle};

pub(crate) use child::{Args as ChildArgs, run as run_child};

use crate::bench::raw::{Prepare, Raw};

/// Which backend the demo runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Backend {
    /// SQLite: a temporary database file, no server.
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL/MariaDB.
    Mysql,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::Mysql => "mysql",
        }
    }
}

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The database to run on: SQLite needs no server.
    #[arg(long, value_enum, default_value = "sqlite")]
    backend: Backend,
    /// How many orders the service places.
    #[arg(long, default_value_t = 2000)]
    orders: usize,
    /// Concurrent order-placing connections.
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Publish each order.created to NATS JetStream too.
    #[arg(long)]
    nats: bool,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.orders > 0 && args.writers > 0,
        "--orders and --writers must be positive"
    );
    match args.backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => demo::<diesel_outbox_testkit::sqlite::SqliteTestDb>(&args).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres => demo::<diesel_outbox_testkit::postgres::PgTestDb>(&args).await,
        #[cfg(feature = "mysql")]
        Backend::Mysql => demo::<diesel_outbox_testkit::mysql::MysqlTestDb>(&args).await,
        #[allow(unreachable_patterns)]
        _ => anyhow::bail!(
            "xtask was built without the {} backend",
            args.backend.name()
        ),
    }
}

#[cfg(feature = "nats")]
async fn publisher(prefix: &str) -> anyhow::Result<diesel_outbox_nats::JetStreamPublisher> {
    Ok(diesel_outbox_nats::JetStreamPublisher::builder(
        diesel_outbox_testkit::nats::jetstream().await?,
    )
    .subject_prefix(prefix)
    .route(effect::ORDER_CREATED, 1)
    .message_id_prefix("demo")
    .build()?)
}

/// The demo's stream, remembering message ids for one second only: shorter
/// than the relay's lease, so a killed relay's replays are stored again and
/// reach the consumer.
#[cfg(feature = "nats")]
async fn demo_stream() -> anyhow::Result<diesel_outbox_testkit::nats::TestStream> {
    let stream = diesel_outbox_testkit::nats::TestStream::planned("demo").await?;
    stream
        .jetstream()
        .create_stream(async_nats::jetstream::stream::Config {
            name: stream.name().to_owned(),
            subjects: vec![format!("{}.>", stream.prefix())],
            duplicate_window: std::time::Duration::from_secs(1),
            ..Default::default()
        })
        .await?;
    Ok(stream)
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
        if args.nats {
            " with NATS JetStream"
        } else {
            ""
        },
        settings::FAILURE_PERCENT
    );
    let db = Arc::new(B::create("demo").await?);
    db.create_orders().await?;
    db.execute_sql(B::DELIVERIES).await?;
    #[cfg(feature = "nats")]
    let stream = match args.nats {
        true => Some(demo_stream().await?),
        false => None,
    };
    #[cfg(feature = "nats")]
    let shipping = match &stream {
        Some(stream) => Some(shipping::Shipping::<B>::start(stream).await?),
        None => None,
    };
    #[cfg(not(feature = "nats"))]
    anyhow::ensure!(!args.nats, "xtask was built without the `nats` feature");
    #[cfg(feature = "nats")]
    let publisher = match &stream {
        Some(stream) => Some(Arc::new(publisher(stream.prefix()).await?)),
        None => None,
    };
    let worker = effect::worker(
        &db,
        "demo-service",
        #[cfg(feature = "nats")]
        publisher.clone(),
    )?;

    // The relay in a process of its own, to be killed.
    let mut command = tokio::process::Command::new(std::env::current_exe()?);
    command
        .args([
            "demo-relay",
            "--backend",
            args.backend.name(),
            "--url",
            db.url(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    #[cfg(feature = "nats")]
    if let Some(stream) = &stream {
        command.args(["--nats-prefix", stream.prefix()]);
    }
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
            let store = db.store();
            let id = conn
                .transaction::<_, anyhow::Error, _>(async |tx| {
                    B::insert_order(tx, order, Prepare::Once).await?;
                    let payload = serde_json::json!({ "order": order, "customer": "customer-9" });
                    Ok(store
                        .enqueue(tx, Task::json(effect::ORDER_CREATED, 1, &payload)?)
                        .await?)
                })
                .await?;
            worker.send_async(id);
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
    #[cfg(feature = "nats")]
    let summary = match &stream {
        Some(stream) => summary.with_stream(stream).await?,
        None => summary,
    };
    #[cfg(feature = "nats")]
    let summary = match shipping {
        Some(shipping) => summary.with_shipping(shipping.finish().await?),
        None => summary,
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
