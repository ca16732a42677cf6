//! The inbox consumer against a real nats-server, on PostgreSQL, MariaDB and
//! SQLite:
//! each message applied once, duplicates acknowledged without the handler,
//! poison messages dead-lettered while the others flow, and a shutdown that
//! never acknowledges an uncommitted message.

use std::{
    collections::HashSet,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::PullConsumer};
use diesel_async::AsyncConnection;
use diesel_outbox_nats::{
    ConsumeHandler, ConsumerReport, DEAD_REASON, DeadLetter, InboxConsumer, Incoming,
    JetStreamPublisher,
};
use diesel_outbox_postgres::outbox::{
    CancellationToken, Delivery, HandlerError, Inbox, RetryPolicy, Task, TaskId,
};
use diesel_outbox_testkit::{TestBackend, nats::TestStream};
use tokio::sync::{Notify, Semaphore};

/// Applies an order by inserting its shipment row. Orders in `retryable`
/// always fail retryably; with `gate`, every handler waits for a permit
/// after saying it started (`started`).
#[derive(Default)]
struct Ship {
    retryable: HashSet<i64>,
    gate: Option<(Arc<Notify>, Arc<Semaphore>)>,
    /// Panics once, on this order's first delivery.
    panic_once: Option<(i64, AtomicBool)>,
}

#[async_trait::async_trait]
impl<C> ConsumeHandler<C> for Ship
where
    C: AsyncConnection + Send + 'static,
{
    async fn handle(&self, conn: &mut C, incoming: &Incoming) -> Result<(), HandlerError> {
        let order: serde_json::Value = incoming.json()?;
        let order = order["order"]
            .as_i64()
            .ok_or_else(|| HandlerError::permanent(anyhow::anyhow!("order without a number")))?;
        if let Some((started, permits)) = &self.gate {
            started.notify_one();
            permits.acquire().await?.forget();
        }
        if let Some((panicking, panicked)) = &self.panic_once
            && *panicking == order
            && !panicked.swap(true, Ordering::SeqCst)
        {
            panic!("order {order}: the handler panics");
        }
        if self.retryable.contains(&order) {
            return Err(HandlerError::retryable(anyhow::anyhow!(
                "order {order}: not yet"
            )));
        }
        conn.batch_execute(&format!(
            "INSERT INTO shipments (order_id) VALUES ({order})"
        ))
        .await?;
        Ok(())
    }
}

const SHIPMENTS: &str = "CREATE TABLE shipments (order_id BIGINT NOT NULL)";

async fn setup<B: TestBackend>(test: &str) -> anyhow::Result<(B, TestStream)> {
    let db = B::create(test).await?;
    db.migrate_inbox().await?;
    db.execute_sql(SHIPMENTS).await?;
    Ok((db, TestStream::create(test).await?))
}

/// Publishes orders `orders` as the outbox would (task id = order number).
async fn publish(stream: &TestStream, orders: impl IntoIterator<Item = i64>) -> anyhow::Result<()> {
    let publisher = JetStreamPublisher::builder(stream.jetstream().clone())
        .subject_prefix(format!("{}.orders", stream.prefix()))
        .route("order.created", 1)
        .message_id_prefix("orders")
        .build()?;
    for order in orders {
        let task = Task::json("order.created", 1, &serde_json::json!({ "order": order }))?;
        publisher
            .publish(&Delivery::new(TaskId::new(order), 1, task))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

async fn durable(stream: &TestStream, name: &str) -> anyhow::Result<PullConsumer> {
    Ok(stream
        .jetstream()
        .get_stream(stream.name())
        .await?
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some(name.into()),
            filter_subject: format!("{}.orders.>", stream.prefix()),
            // A message pulled by a run that then stopped comes back soon.
            ack_wait: Duration::from_secs(2),
            ..Default::default()
        })
        .await?)
}

fn no_delay() -> RetryPolicy {
    RetryPolicy::new(Duration::ZERO, Duration::ZERO, 0.0).expect("policy")
}

/// Waits until the consumer has nothing pending and nothing unacknowledged.
async fn drained(consumer: &mut PullConsumer) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let info = consumer.info().await?;
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "not drained: {} pending, {} unacknowledged",
            info.num_pending,
            info.num_ack_pending
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `consumer` until its durable consumer is drained, then shuts it down.
async fn run_until_drained<B: TestBackend>(
    consumer: InboxConsumer<B::Store, Ship>,
    mut durable: PullConsumer,
) -> anyhow::Result<ConsumerReport> {
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { consumer.run(shutdown).await }
    });
    drained(&mut durable).await?;
    shutdown.cancel();
    Ok(running.await??)
}

async fn shipments<B: TestBackend>(db: &B) -> anyhow::Result<i64> {
    db.count("shipments").await
}

/// Twenty orders apply once each; an order whose record a previous,
/// unacknowledged delivery committed is acknowledged without the handler.
/// Both are counted in the consumer's metrics.
async fn each_message_applies_once<B: TestBackend>(test: &str) -> anyhow::Result<()> {
    let captured = diesel_outbox_testkit::metrics::capture()?;
    diesel_outbox_nats::describe_consumer_metrics();
    for (name, unit, help) in diesel_outbox_nats::CONSUMER_METRICS {
        assert_eq!(
            captured.description(name),
            Some((Some(unit), help.to_owned()))
        );
    }
    let (db, stream) = setup::<B>(test).await?;
    // A name of this test's own: other tests record into the same recorder.
    let name = stream.prefix().to_owned();
    publish(&stream, 1..=20).await?;
    // As if a delivery of order 3 had committed and then crashed before its ack.
    let (store, recorded) = (db.store().clone(), name.clone());
    db.store()
        .transaction(move |conn: &mut B::Conn| {
            Box::pin(async move { store.record(conn, &recorded, "orders:3").await })
        })
        .await?;
    let durable = durable(&stream, "shipping").await?;
    let consumer = InboxConsumer::builder(db.store().clone(), durable.clone(), Ship::default())
        .name(name.clone())
        .concurrency(4)
        .build()?;
    assert_eq!(consumer.name(), name);
    let report = run_until_drained::<B>(consumer, durable).await?;
    assert_eq!((report.applied, report.duplicates), (19, 1), "{report:?}");
    assert_eq!(shipments(&db).await?, 19, "order 3 was not applied again");
    assert_eq!(db.count("outbox_inbox").await?, 20);
    let labels = [("consumer", name.as_str())];
    assert_eq!(
        captured.counter("outbox_consumer_applied_total", &labels),
        19
    );
    assert_eq!(
        captured.counter("outbox_consumer_duplicates_total", &labels),
        1
    );
    assert!(captured.gauge("outbox_consumer_lag", &labels).is_some());
    Ok(())
}

/// A durable consumer's name is the default inbox name.
async fn the_durable_name_is_the_default_name<B: TestBackend>(test: &str) -> anyhow::Result<()> {
    let (db, stream) = setup::<B>(test).await?;
    let durable = durable(&stream, "shipping").await?;
    let consumer = InboxConsumer::builder(db.store().clone(), durable, Ship::default()).build()?;
    assert_eq!(consumer.name(), "shipping");
    Ok(())
}

/// A handler that panics rolls its transaction back and the message comes
/// again; the loop lives on and applies it then.
async fn a_panicking_handler_is_handed_back<B: TestBackend>(test: &str) -> anyhow::Result<()> {
    let (db, stream) = setup::<B>(test).await?;
    publish(&stream, 1..=5).await?;
    let durable = durable(&stream, "shipping").await?;
    let handler = Ship {
        panic_once: Some((3, AtomicBool::new(false))),
        ..Ship::default()
    };
    let consumer = InboxConsumer::builder(db.store().clone(), durable.clone(), handler)
        .retry(no_delay())
        .build()?;
    let report = run_until_drained::<B>(consumer, durable).await?;
    assert_eq!((report.applied, report.failed), (5, 1), "{report:?}");
    assert_eq!(shipments(&db).await?, 5);
    Ok(())
}

/// An undecodable payload and a message without outbox headers are
/// dead-lettered at once, an order that keeps failing after three
/// deliveries; the others apply.
async fn poison_messages_are_dead_lettered_and_the_others_flow<B: TestBackend>(
    test: &str,
) -> anyhow::Result<()> {
    let (db, stream) = setup::<B>(test).await?;
    let jetstream = stream.jetstream().clone();
    let subject = format!("{}.orders.order.created.v1", stream.prefix());
    publish(&stream, 1..=3).await?;
    // Outbox headers, but a payload that is not JSON.
    let mut headers = async_nats::HeaderMap::new();
    for (name, value) in [
        ("Outbox-Task-Id", "50"),
        ("Outbox-Kind", "order.created"),
        ("Outbox-Version", "1"),
        ("Outbox-Attempt", "1"),
        ("Nats-Msg-Id", "orders:50"),
    ] {
        headers.insert(name, value);
    }
    jetstream
        .publish_with_headers(subject.clone(), headers, "{".into())
        .await?
        .await?;
    // No headers at all.
    jetstream.publish(subject, "hello".into()).await?.await?;
    publish(&stream, [99, 4, 5]).await?;

    let dead_subject = format!("{}.dead", stream.prefix());
    let durable = durable(&stream, "shipping").await?;
    let handler = Ship {
        retryable: HashSet::from([99]),
        ..Ship::default()
    };
    let consumer = InboxConsumer::builder(db.store().clone(), durable.clone(), handler)
        .retry(no_delay())
        .max_deliveries(3)
        .dead_letter(DeadLetter::new(jetstream.clone(), dead_subject.clone()))
        .build()?;
    let report = run_until_drained::<B>(consumer, durable).await?;
    assert_eq!(
        (report.applied, report.dead_lettered, report.failed),
        (5, 3, 2),
        "{report:?}"
    );
    assert_eq!(shipments(&db).await?, 5);
    let dead: Vec<_> = stream
        .messages()
        .await?
        .into_iter()
        .filter(|message| message.subject.as_str() == dead_subject)
        .collect();
    assert_eq!(dead.len(), 3);
    let reasons: Vec<String> = dead
        .iter()
        .map(|message| {
            message
                .headers
                .get(DEAD_REASON)
                .map(|value| value.as_str().to_owned())
                .context("a dead letter names its reason")
        })
        .collect::<anyhow::Result<_>>()?;
    for expected in ["payload", "no headers", "order 99: not yet"] {
        assert_eq!(
            reasons
                .iter()
                .filter(|reason| reason.contains(expected))
                .count(),
            1,
            "one dead letter for `{expected}`: {reasons:?}"
        );
    }
    Ok(())
}

/// A shutdown while two messages are in their handlers lets both finish:
/// the one that succeeds commits and is acknowledged, the one that fails is
/// handed back; the next run applies only that one.
async fn shutdown_acknowledges_only_committed_messages<B: TestBackend>(
    test: &str,
) -> anyhow::Result<()> {
    let (db, stream) = setup::<B>(test).await?;
    publish(&stream, [1, 2]).await?;
    let durable = durable(&stream, "shipping").await?;
    let (started, permits) = (Arc::new(Notify::new()), Arc::new(Semaphore::new(0)));
    let handler = Ship {
        retryable: HashSet::from([2]),
        gate: Some((Arc::clone(&started), Arc::clone(&permits))),
        ..Ship::default()
    };
    let consumer = InboxConsumer::builder(db.store().clone(), durable.clone(), handler)
        .retry(no_delay())
        .concurrency(2)
        .build()?;
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { consumer.run(shutdown).await }
    });
    started.notified().await;
    started.notified().await;
    shutdown.cancel();
    permits.add_permits(2);
    let report = running.await??;
    assert_eq!((report.applied, report.failed), (1, 1), "{report:?}");
    assert_eq!(shipments(&db).await?, 1);

    let again =
        InboxConsumer::builder(db.store().clone(), durable.clone(), Ship::default()).build()?;
    let report = run_until_drained::<B>(again, durable).await?;
    assert_eq!(
        (report.applied, report.duplicates),
        (1, 0),
        "only the handed-back message comes again: {report:?}"
    );
    assert_eq!(shipments(&db).await?, 2);
    Ok(())
}

/// One test per scenario for a backend; SQLite, whose transactions take
/// turns (one writer at a time), leaves out the shutdown scenario, which
/// needs two transactions in flight at once.
macro_rules! consume_tests {
    ($module:ident, $backend:ty) => {
        consume_tests!($module, $backend;
            each_message_applies_once,
            the_durable_name_is_the_default_name,
            a_panicking_handler_is_handed_back,
            poison_messages_are_dead_lettered_and_the_others_flow,
            shutdown_acknowledges_only_committed_messages,
            what_can_never_pass_is_given_up_at_once,
            a_lost_server_is_counted_and_waited_for,
        );
    };
    ($module:ident, $backend:ty, one_writer) => {
        consume_tests!($module, $backend;
            each_message_applies_once,
            the_durable_name_is_the_default_name,
            a_panicking_handler_is_handed_back,
            poison_messages_are_dead_lettered_and_the_others_flow,
            what_can_never_pass_is_given_up_at_once,
            a_lost_server_is_counted_and_waited_for,
        );
    };
    ($module:ident, $backend:ty; $($scenario:ident),* $(,)?) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    let test = concat!("consume_", stringify!($module));
                    super::$scenario::<$backend>(test)
                        .await
                        .unwrap_or_else(|error| panic!("{error:#}"));
                }
            )*
        }
    };
}

consume_tests!(postgres, diesel_outbox_testkit::postgres::PgTestDb);
consume_tests!(mysql, diesel_outbox_testkit::mysql::MysqlTestDb);
consume_tests!(
    sqlite,
    diesel_outbox_testkit::sqlite::SqliteTestDb,
    one_writer
);

/// Messages that can never pass are given up at their first delivery,
/// whatever `max_deliveries` says: one whose `Nats-Msg-Id` is longer than
/// the inbox stores (checked before any transaction), and, once the inbox
/// table is gone, every message, whose record then fails with an error no
/// retry can fix. Each goes to the dead-letter subject.
async fn what_can_never_pass_is_given_up_at_once<B: TestBackend>(test: &str) -> anyhow::Result<()> {
    let (db, stream) = setup::<B>(test).await?;
    let jetstream = stream.jetstream().clone();
    let subject = format!("{}.orders.order.created.v1", stream.prefix());
    let long_id = format!("foreign:{}", "x".repeat(300));
    let mut headers = async_nats::HeaderMap::new();
    for (name, value) in [
        ("Outbox-Task-Id", "7"),
        ("Outbox-Kind", "order.created"),
        ("Outbox-Version", "1"),
        ("Outbox-Attempt", "1"),
        ("Nats-Msg-Id", long_id.as_str()),
    ] {
        headers.insert(name, value);
    }
    jetstream
        .publish_with_headers(subject, headers, "{\"order\":7}".into())
        .await?
        .await?;
    let dead_subject = format!("{}.dead", stream.prefix());
    let durable = durable(&stream, "shipping").await?;
    let consumer = InboxConsumer::builder(db.store().clone(), durable.clone(), Ship::default())
        .retry(no_delay())
        .max_deliveries(10)
        .dead_letter(DeadLetter::new(jetstream.clone(), dead_subject.clone()))
        .build()?;
    let report = run_until_drained::<B>(consumer, durable.clone()).await?;
    assert_eq!((report.dead_lettered, report.failed), (1, 0), "{report:?}");

    // The inbox table is gone: recording fails, and no retry can change that.
    db.execute_sql("DROP TABLE outbox_inbox").await?;
    publish(&stream, [1]).await?;
    let consumer = InboxConsumer::builder(db.store().clone(), durable.clone(), Ship::default())
        .retry(no_delay())
        .max_deliveries(10)
        .dead_letter(DeadLetter::new(jetstream.clone(), dead_subject.clone()))
        .build()?;
    let report = run_until_drained::<B>(consumer, durable).await?;
    assert_eq!((report.dead_lettered, report.failed), (1, 0), "{report:?}");

    let reasons: Vec<String> = stream
        .messages()
        .await?
        .into_iter()
        .filter(|message| message.subject.as_str() == dead_subject)
        .filter_map(|message| {
            message
                .headers
                .get(DEAD_REASON)
                .map(|value| value.as_str().to_owned())
        })
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons[0].contains("message id cannot be recorded"),
        "{reasons:?}"
    );
    assert!(reasons[1].contains("database error"), "{reasons:?}");
    Ok(())
}

/// A consumer whose server goes away hears of it: missed heartbeats count
/// as receive errors (in the report and the metric), each followed by a
/// pause, and the consumer keeps going; once the server is back, it applies
/// what was published meanwhile. A consumer deleted under it ends the run
/// with an error at once.
async fn a_lost_server_is_counted_and_waited_for<B: TestBackend>(test: &str) -> anyhow::Result<()> {
    let captured = diesel_outbox_testkit::metrics::capture()?;
    let (db, _) = setup::<B>(test).await?;
    let mut server = diesel_outbox_testkit::nats::private_server("consume")?;
    let client = async_nats::connect(format!("nats://127.0.0.1:{}", server.port())).await?;
    let jetstream = jetstream::new(client);
    let stream = jetstream
        .create_stream(jetstream::stream::Config {
            name: "LOST".into(),
            subjects: vec!["lost.>".into()],
            ..Default::default()
        })
        .await?;
    let durable: PullConsumer = stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("shipping".into()),
            ack_wait: Duration::from_secs(2),
            ..Default::default()
        })
        .await?;
    let publisher = JetStreamPublisher::builder(jetstream.clone())
        .subject_prefix("lost")
        .route("order.created", 1)
        .build()?;
    let publish = async |orders: std::ops::RangeInclusive<i64>| -> anyhow::Result<()> {
        for order in orders {
            let task = Task::json("order.created", 1, &serde_json::json!({ "order": order }))?;
            publisher
                .publish(&Delivery::new(TaskId::new(order), 1, task))
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        Ok(())
    };
    let name = format!("{test}-lost");
    let consumer = InboxConsumer::builder(db.store().clone(), durable.clone(), Ship::default())
        .name(name.clone())
        .idle_heartbeat(Duration::from_millis(200))
        .build()?;
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { consumer.run(shutdown).await }
    });
    publish(1..=3).await?;
    diesel_outbox_testkit::wait::eventually(async || Ok(shipments(&db).await? == 3)).await?;

    server.kill()?;
    let labels = [("consumer", name.as_str())];
    diesel_outbox_testkit::wait::eventually(async || {
        Ok(captured.counter("outbox_consumer_receive_errors_total", &labels) >= 2)
    })
    .await?;
    server.restart()?;
    // The client reconnects on its own; publish once it is back.
    let published = async {
        while publish(4..=5).await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), published).await?;
    diesel_outbox_testkit::wait::eventually(async || Ok(shipments(&db).await? == 5)).await?;
    shutdown.cancel();
    let report = running.await??;
    assert!(report.receive_errors >= 2, "{report:?}");
    assert_eq!(report.applied, 5, "{report:?}");

    // Deleted under it (once its pull request waits at the server), the
    // consumer ends its run with an error.
    let watched = durable.clone();
    let consumer = InboxConsumer::builder(db.store().clone(), durable, Ship::default())
        .name(name.clone())
        .build()?;
    let running = tokio::spawn(async move { consumer.run(CancellationToken::new()).await });
    diesel_outbox_testkit::wait::eventually(async || {
        Ok(watched.clone().info().await?.num_waiting > 0)
    })
    .await?;
    stream.delete_consumer("shipping").await?;
    let ended = tokio::time::timeout(Duration::from_secs(30), running).await??;
    assert!(ended.is_err(), "{ended:?}");
    Ok(())
}
