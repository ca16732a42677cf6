//! End to end with crashes on both sides: 2,000 orders go from the order
//! database's outbox through JetStream into the shipping database's inbox.
//! The relay is killed with SIGKILL mid-run and restarted, the consumer is
//! killed mid-run between commits and acknowledgements and restarted, and the
//! stream's duplicate window is shorter than the relay's lease, so replays
//! of the killed relay's tasks are stored again. Every order must have
//! exactly one shipment, and the inbox must have suppressed duplicates.

use std::{process::Stdio, sync::Arc, time::Duration};

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::PullConsumer, stream};
use diesel_async::AsyncConnection;
use diesel_outbox_nats::{ConsumeHandler, InboxConsumer, Incoming, JetStreamPublisher};
use diesel_outbox_postgres::outbox::{
    CancellationToken, Delivery, Error, Handler, HandlerError, Inbox, Maintenance, Receipt,
    Registry, Relay, RelayConfig, Store, Task, Worker, WorkerConfig, handler_fn, inbox::BodyFuture,
};
use diesel_outbox_testkit::{TestBackend, conformance::crash::test_name, nats::TestStream};
use tokio::{
    io::{AsyncBufReadExt, BufReader, Lines},
    process::{Child, ChildStderr},
};

const ORDERS: i64 = 2000;
const ORDERS_DB: &str = "OUTBOX_E2E_ORDERS_DB";
const SHIPPING_DB: &str = "OUTBOX_E2E_SHIPPING_DB";
const PREFIX: &str = "OUTBOX_E2E_PREFIX";
const STREAM: &str = "OUTBOX_E2E_STREAM";
/// Replays later than this are stored again; the relay's lease is longer.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(2);

/// Publishes, says so on stderr, then lingers before the completion write
/// as a real service would: the window in which a kill leaves a task to be
/// published again.
fn publishing(prefix: &str, jetstream: jetstream::Context) -> anyhow::Result<impl Handler> {
    let publisher = Arc::new(
        JetStreamPublisher::builder(jetstream)
            .subject_prefix(format!("{prefix}.orders"))
            .route("order.created", 1)
            .message_id_prefix("orders")
            .build()?,
    );
    Ok(handler_fn(move |delivery: Delivery| {
        let publisher = Arc::clone(&publisher);
        async move {
            publisher.publish(&delivery).await?;
            eprintln!("published {}", delivery.id);
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<(), HandlerError>(())
        }
    }))
}

fn relay<B: TestBackend>(
    store: B::Store,
    jetstream: jetstream::Context,
    prefix: &str,
    owner: &str,
) -> anyhow::Result<Relay<B::Store>> {
    let registry = Registry::builder()
        .handler("order.created", 1, publishing(prefix, jetstream)?)
        .build()?;
    let config = WorkerConfig::default()
        .handler_timeout(Duration::from_millis(500))
        .lease_duration(LEASE)
        .owner(owner);
    let relay_config = RelayConfig::default().poll_interval(Duration::from_millis(50));
    Ok(Relay::new(
        Worker::with_config(store, registry, config)?,
        relay_config,
    )?)
}

/// Ships an order: one row in `shipments` per application.
struct Ship;

#[async_trait::async_trait]
impl<C: AsyncConnection + Send + 'static> ConsumeHandler<C> for Ship {
    async fn handle(&self, conn: &mut C, incoming: &Incoming) -> Result<(), HandlerError> {
        let order: serde_json::Value = incoming.json()?;
        let order = order["order"]
            .as_i64()
            .ok_or_else(|| HandlerError::permanent(anyhow::anyhow!("order without a number")))?;
        conn.batch_execute(&format!(
            "INSERT INTO shipments (order_id) VALUES ({order})"
        ))
        .await?;
        Ok(())
    }
}

/// An inbox whose transactions say on stderr that they committed, then take
/// 20 ms to return, as over a slow link: the consumer acknowledges after
/// that, so a kill meanwhile leaves committed messages unacknowledged.
#[derive(Clone)]
struct SlowAck<I>(I);

impl<I: Inbox> Inbox for SlowAck<I> {
    type Conn = I::Conn;

    async fn record(&self, conn: &mut I::Conn, consumer: &str, id: &str) -> Result<Receipt, Error> {
        self.0.record(conn, consumer, id).await
    }

    async fn transaction<T, E, F>(&self, body: F) -> Result<T, E>
    where
        T: Send,
        E: From<Error> + Send,
        F: for<'c> FnOnce(&'c mut I::Conn) -> BodyFuture<'c, Result<T, E>> + Send,
    {
        let committed = self.0.transaction(body).await?;
        eprintln!("committed");
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(committed)
    }

    async fn purge_inbox_batch(&self, older_than: Duration, limit: u32) -> Result<u64, Error> {
        self.0.purge_inbox_batch(older_than, limit).await
    }
}

async fn durable(
    jetstream: &jetstream::Context,
    stream: &str,
    prefix: &str,
) -> anyhow::Result<PullConsumer> {
    Ok(jetstream
        .get_stream(stream)
        .await?
        .get_or_create_consumer(
            "shipping",
            jetstream::consumer::pull::Config {
                durable_name: Some("shipping".into()),
                filter_subject: format!("{prefix}.orders.>"),
                // Messages the killed consumer held come back soon.
                ack_wait: Duration::from_secs(2),
                ..Default::default()
            },
        )
        .await?)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The relay of the child process: publishes until it is killed.
async fn relay_child<B: TestBackend>() -> anyhow::Result<()> {
    let (Some(url), Some(prefix)) = (env(ORDERS_DB), env(PREFIX)) else {
        return Ok(());
    };
    let jetstream = diesel_outbox_testkit::nats::jetstream().await?;
    let db = B::attach(&url).await?;
    relay::<B>(db.store().clone(), jetstream, &prefix, "child")?
        .run(CancellationToken::new())
        .await;
    Ok(())
}

/// The consumer of the child process: applies until it is killed.
async fn consumer_child<B: TestBackend>() -> anyhow::Result<()> {
    let (Some(url), Some(prefix), Some(stream)) = (env(SHIPPING_DB), env(PREFIX), env(STREAM))
    else {
        return Ok(());
    };
    let jetstream = diesel_outbox_testkit::nats::jetstream().await?;
    let db = B::attach(&url).await?;
    let durable = durable(&jetstream, &stream, &prefix).await?;
    InboxConsumer::builder(SlowAck(db.store().clone()), durable, Ship)
        .build()?
        .run(CancellationToken::new())
        .await?;
    Ok(())
}

/// Starts the child test `child` of this module with `vars` set.
fn spawn(
    module: &str,
    child: &str,
    vars: &[(&str, &str)],
) -> anyhow::Result<(Child, Lines<BufReader<ChildStderr>>)> {
    let mut command = tokio::process::Command::new(std::env::current_exe()?);
    command
        .args([
            test_name(module, child).as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in vars {
        command.env(name, value);
    }
    let mut child = command.spawn()?;
    let stderr = child.stderr.take().context("the child's stderr")?;
    Ok((child, BufReader::new(stderr).lines()))
}

/// Reads the child's stderr until `count` lines start with `marker`, then
/// kills it with SIGKILL.
async fn kill_after(
    (mut child, mut lines): (Child, Lines<BufReader<ChildStderr>>),
    marker: &str,
    count: usize,
) -> anyhow::Result<()> {
    let mut seen = 0;
    while seen < count {
        let line = lines
            .next_line()
            .await?
            .context("the child exited before it was killed")?;
        seen += usize::from(line.starts_with(marker));
    }
    child.start_kill()?;
    child.wait().await?;
    Ok(())
}

pub(crate) async fn orders_ship_once_through_crashes<B: TestBackend>(
    module: &str,
    test: &str,
) -> anyhow::Result<()> {
    let orders = B::create(&format!("{test}_orders")).await?;
    let shipping = B::create(&format!("{test}_shipping")).await?;
    shipping.migrate_inbox().await?;
    shipping
        .execute_sql("CREATE TABLE shipments (order_id BIGINT NOT NULL)")
        .await?;
    let stream = TestStream::planned(test).await?;
    let jetstream = diesel_outbox_testkit::nats::jetstream().await?;
    jetstream
        .create_stream(stream::Config {
            name: stream.name().to_owned(),
            subjects: vec![format!("{}.>", stream.prefix())],
            duplicate_window: DUPLICATE_WINDOW,
            ..Default::default()
        })
        .await?;
    let tasks = (1..=ORDERS)
        .map(|order| Task::json("order.created", 1, &serde_json::json!({ "order": order })))
        .collect::<Result<Vec<_>, _>>()?;
    let mut conn = orders.connect().await?;
    conn.transaction::<_, anyhow::Error, _>(async |tx| {
        Ok(orders.store().enqueue_many(tx, tasks).await?)
    })
    .await?;

    // The relay: killed after 300 publishes, then restarted here.
    let relay_child = spawn(
        module,
        "e2e_relay_child",
        &[(ORDERS_DB, orders.url()), (PREFIX, stream.prefix())],
    )?;
    kill_after(relay_child, "published ", 300).await?;
    let relay = relay::<B>(
        orders.store().clone(),
        jetstream.clone(),
        stream.prefix(),
        "parent",
    )?;
    let shutdown = CancellationToken::new();
    let relaying = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });

    // The consumer: killed after 300 commits, then restarted here.
    let consumer_child = spawn(
        module,
        "e2e_consumer_child",
        &[
            (SHIPPING_DB, shipping.url()),
            (PREFIX, stream.prefix()),
            (STREAM, stream.name()),
        ],
    )?;
    kill_after(consumer_child, "committed", 300).await?;
    let mut durable = durable(&jetstream, stream.name(), stream.prefix()).await?;
    let consumer =
        InboxConsumer::builder(shipping.store().clone(), durable.clone(), Ship).build()?;
    let consuming = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { consumer.run(shutdown).await }
    });

    diesel_outbox_testkit::wait::eventually(async || {
        Ok(orders.store().stats().await?.backlog() == 0)
    })
    .await?;
    loop {
        let info = durable.info().await?;
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    relaying.await?;
    let report = consuming.await??;

    let stored = stream.count().await?;
    let shipments = shipping.count("shipments").await?;
    let shipped = shipping
        .count("(SELECT DISTINCT order_id FROM shipments) AS shipped")
        .await?;
    eprintln!(
        "{ORDERS} orders; stream stored {stored} messages; after the consumer's restart: \
         {} applied, {} duplicates suppressed; {shipments} shipments for {shipped} orders; \
         lost {}",
        report.applied,
        report.duplicates,
        ORDERS - shipped
    );
    assert_eq!(shipped, ORDERS, "an order was lost");
    assert_eq!(shipments, ORDERS, "an order was shipped twice");
    assert!(
        stored > u64::try_from(ORDERS)?,
        "no replay got past the duplicate window: {stored} messages"
    );
    assert!(report.duplicates > 0, "{report:?}");
    assert_eq!(shipping.count("outbox_inbox").await?, ORDERS);
    Ok(())
}

macro_rules! end_to_end_tests {
    ($module:ident, $backend:ty) => {
        mod $module {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "run as a child process by orders_ship_once_through_crashes"]
            async fn e2e_relay_child() {
                if let Err(error) = super::relay_child::<$backend>().await {
                    panic!("{error:#}");
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "run as a child process by orders_ship_once_through_crashes"]
            async fn e2e_consumer_child() {
                if let Err(error) = super::consumer_child::<$backend>().await {
                    panic!("{error:#}");
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn orders_ship_once_through_crashes() {
                let scenario = super::orders_ship_once_through_crashes::<$backend>(
                    module_path!(),
                    concat!("e2e_", stringify!($module)),
                );
                match tokio::time::timeout(std::time::Duration::from_secs(240), scenario).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => panic!("{error:#}"),
                    Err(_) => panic!("the scenario did not finish within 240 s"),
                }
            }
        }
    };
}

end_to_end_tests!(postgres, diesel_outbox_testkit::postgres::PgTestDb);
end_to_end_tests!(mysql, diesel_outbox_testkit::mysql::MysqlTestDb);
