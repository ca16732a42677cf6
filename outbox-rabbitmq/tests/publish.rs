//! Publishing: properties, confirms, a batch with unroutable messages, a
//! missing exchange, an unreachable broker, configuration refused.

use diesel_async::AsyncConnection;
use diesel_outbox_postgres::{
    PgStore,
    outbox::{Registry, RetryPolicy, Status, Store, Task, TaskId, Worker, WorkerConfig},
};
use diesel_outbox_rabbitmq::{RabbitError, RabbitPublisher, decode};
use diesel_outbox_testkit::{
    TestBackend,
    postgres::PgTestDb,
    rabbitmq::{TestQueue, broker_url},
};

fn worker(db: &PgTestDb, publisher: &RabbitPublisher) -> Worker<PgStore> {
    let registry = publisher
        .register(Registry::builder())
        .build()
        .expect("registry");
    let config = WorkerConfig::default().retry(
        RetryPolicy::new(std::time::Duration::ZERO, std::time::Duration::ZERO, 0.0)
            .expect("policy"),
    );
    Worker::with_config(db.store().clone(), registry, config).expect("worker")
}

async fn enqueue(db: &PgTestDb, task: Task) -> TaskId {
    let mut conn = db.connect().await.expect("connect");
    conn.transaction::<_, anyhow::Error, _>(async |tx| Ok(db.store().enqueue(tx, task).await?))
        .await
        .expect("enqueue")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_task_lands_once_persistent_with_its_id_and_headers() {
    let db = PgTestDb::create("amqp_publish").await.expect("database");
    let queue = TestQueue::create("amqp_publish").await.expect("queue");
    let publisher = RabbitPublisher::builder(broker_url())
        .route("order.created", 1, queue.exchange(), queue.routing_key())
        .build()
        .expect("publisher");
    let worker = worker(&db, &publisher);
    let id = enqueue(
        &db,
        Task::new("order.created", 1, "{\"order\":42}").header("correlation-id", "req-7f3a"),
    )
    .await;
    worker.send(id).await.expect("send");
    let messages = queue.drain(queue.queue()).await.expect("drain");
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(message.data, b"{\"order\":42}");
    assert_eq!(
        message.properties.delivery_mode(),
        &Some(2),
        "not persistent"
    );
    let outbox = worker.outbox_id().await.expect("outbox id");
    let received = decode(&message.properties).expect("decode");
    assert_eq!(received.message_id, format!("{outbox}:{id}"));
    assert_eq!(received.id, id);
    assert_eq!(
        (received.kind.as_str(), received.version, received.attempt),
        ("order.created", 1, 1)
    );
    assert_eq!(received.outbox.as_deref(), Some(outbox.as_str()));
    assert_eq!(
        received.headers.get("correlation-id").map(String::as_str),
        Some("req-7f3a")
    );
    assert_eq!(
        db.store().get(id).await.expect("get").status,
        Status::Succeeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_goes_out_together_and_unroutable_messages_fail_alone() {
    let db = PgTestDb::create("amqp_batch").await.expect("database");
    let queue = TestQueue::create("amqp_batch").await.expect("queue");
    // Tasks without an ordering key take the bound fallback; the others
    // route by their key, which no queue is bound for.
    let publisher = RabbitPublisher::builder(broker_url())
        .route_by_ordering_key("order.created", 1, queue.exchange(), queue.routing_key())
        .build()
        .expect("publisher");
    let worker = worker(&db, &publisher);
    let mut ids = Vec::new();
    for n in 0..10 {
        let task = Task::new("order.created", 1, format!("{{\"order\":{n}}}"));
        let task = if n % 3 == 0 {
            task.ordering_key(format!("nowhere-{n}"))
        } else {
            task
        };
        ids.push(enqueue(&db, task).await);
    }
    let report = worker.retry_pending(32).await.expect("round");
    assert_eq!((report.succeeded, report.retried), (6, 4), "{report:?}");
    assert_eq!(queue.drain(queue.queue()).await.expect("drain").len(), 6);
    for (n, id) in ids.into_iter().enumerate() {
        let record = db.store().get(id).await.expect("get");
        if n % 3 == 0 {
            assert_ne!(record.status, Status::Succeeded, "order {n}");
            assert!(
                record.last_error.contains("unroutable")
                    && record.last_error.contains(queue.exchange())
                    && record.last_error.contains(&format!("nowhere-{n}")),
                "{}",
                record.last_error
            );
        } else {
            assert_eq!(record.status, Status::Succeeded, "order {n}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_exchange_is_retried_and_the_channel_recovers() {
    let db = PgTestDb::create("amqp_missing").await.expect("database");
    let queue = TestQueue::create("amqp_missing").await.expect("queue");
    let missing = format!("{}.missing", queue.exchange());
    let publisher = RabbitPublisher::builder(broker_url())
        .route("order.created", 1, missing.as_str(), "order")
        .route("order.shipped", 1, queue.exchange(), queue.routing_key())
        .build()
        .expect("publisher");
    let worker = worker(&db, &publisher);
    let lost = enqueue(&db, Task::new("order.created", 1, "{}")).await;
    let error = worker.send(lost).await.expect_err("no such exchange");
    assert!(error.to_string().contains(&missing), "{error}");
    let record = db.store().get(lost).await.expect("get");
    assert_eq!((record.status, record.attempts), (Status::Available, 1));
    // The broker closed the channel; the next publish opens another.
    let shipped = enqueue(&db, Task::new("order.shipped", 1, "{}")).await;
    worker.send(shipped).await.expect("send on a new channel");
    assert_eq!(queue.drain(queue.queue()).await.expect("drain").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_retries_the_task_and_never_counts_it_sent() {
    let db = PgTestDb::create("amqp_unreachable")
        .await
        .expect("database");
    let publisher = RabbitPublisher::builder("amqp://guest:guest@127.0.0.1:1/%2f")
        .route("order.created", 1, "orders", "created")
        .build()
        .expect("publisher");
    let worker = worker(&db, &publisher);
    let id = enqueue(&db, Task::new("order.created", 1, "{}")).await;
    let error = worker.send(id).await.expect_err("unreachable");
    assert!(error.to_string().contains("RabbitMQ"), "{error}");
    let record = db.store().get(id).await.expect("get");
    assert_eq!((record.status, record.attempts), (Status::Available, 1));
    // Within the backoff the next try fails at once, without a connection.
    let again = worker.send(id).await.expect_err("still unreachable");
    assert!(again.to_string().contains("next try"), "{again}");
}

#[test]
fn unusable_configuration_is_refused_naming_the_setting() {
    let field = |built: Result<RabbitPublisher, RabbitError>| match built {
        Err(RabbitError::Config { field, .. }) => field,
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let url = "amqp://127.0.0.1:5672/%2f";
    assert_eq!(field(RabbitPublisher::builder(url).build()), "routes");
    assert_eq!(
        field(
            RabbitPublisher::builder("http://x")
                .route("k", 1, "x", "k")
                .build()
        ),
        "url"
    );
    assert_eq!(
        field(
            RabbitPublisher::builder(url)
                .route("k", 1, "x", "k".repeat(256))
                .build()
        ),
        "routes"
    );
    assert_eq!(
        field(
            RabbitPublisher::builder(url)
                .route("k", 1, "x", "a")
                .route("k", 1, "x", "b")
                .build()
        ),
        "routes"
    );
    assert_eq!(
        field(
            RabbitPublisher::builder(url)
                .route("k", 1, "x", "a")
                .message_id_prefix(
                    "p".repeat(diesel_outbox_rabbitmq::MAX_MESSAGE_ID_PREFIX_BYTES + 1)
                )
                .build()
        ),
        "message_id_prefix"
    );
}
