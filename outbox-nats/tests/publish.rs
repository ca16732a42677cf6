//! Publishing one task: subject, headers, payload, deduplication, failures.

use std::collections::BTreeMap;

use diesel_async::AsyncConnection;
use diesel_outbox_nats::{JetStreamPublisher, NatsError, StreamSpec, decode_parts, headers};
use diesel_outbox_postgres::{
    PgStore,
    outbox::{
        Delivery, Error, Registry, RetryPolicy, Status, Store, Task, TaskId, Worker, WorkerConfig,
    },
};
use diesel_outbox_testkit::{TestBackend, nats::TestStream, postgres::PgTestDb};

fn publisher(stream: &TestStream) -> JetStreamPublisher {
    JetStreamPublisher::builder(stream.jetstream().clone())
        .subject_prefix(stream.prefix())
        .route("order.created", 1)
        .message_id_prefix("orders")
        .build()
        .expect("publisher")
}

fn worker(db: &PgTestDb, publisher: &JetStreamPublisher) -> Worker<PgStore> {
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
async fn a_committed_task_lands_once_with_its_subject_headers_and_payload() {
    let db = PgTestDb::create("nats_publish").await.expect("database");
    let stream = TestStream::create("nats_publish").await.expect("stream");
    let publisher = publisher(&stream);
    let worker = worker(&db, &publisher);
    let id = enqueue(
        &db,
        Task::new("order.created", 1, "{\"order\":42}")
            .header(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            )
            .header("correlation-id", "req-7f3a"),
    )
    .await;
    worker.send(id).await.expect("send");

    let messages = stream.messages().await.expect("messages");
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    assert_eq!(
        message.subject.as_str(),
        format!("{}.order.created.v1", stream.prefix())
    );
    assert_eq!(
        message.headers.get("Nats-Msg-Id").map(|v| v.as_str()),
        Some(format!("orders:{id}").as_str())
    );
    let received = decode_parts(Some(&message.headers), &message.payload).expect("decode");
    assert_eq!((received.id, received.attempt), (id, 1));
    assert_eq!(
        (received.kind.as_str(), received.version),
        ("order.created", 1)
    );
    assert_eq!(received.payload, b"{\"order\":42}");
    let expected: BTreeMap<String, String> = [
        ("correlation-id", "req-7f3a"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(received.headers, expected);
    assert_eq!(
        db.store().get(id).await.expect("get").status,
        Status::Succeeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_task_is_acknowledged_as_a_duplicate_and_stored_once() {
    let stream = TestStream::create("nats_replay").await.expect("stream");
    let publisher = publisher(&stream);
    let delivery = Delivery::new(TaskId::new(7), 1, Task::new("order.created", 1, "{}"));
    let first = publisher.publish(&delivery).await.expect("first publish");
    // The completion write was lost: the next attempt publishes again.
    let replay = Delivery::new(TaskId::new(7), 2, Task::new("order.created", 1, "{}"));
    let second = publisher.publish(&replay).await.expect("second publish");
    assert!(!first.duplicate);
    assert!(second.duplicate, "the replay was stored again");
    assert_eq!(first.sequence, second.sequence);
    assert_eq!(first.stream, stream.name());
    assert_eq!(stream.count().await.expect("count"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_stream_is_retried_and_an_oversized_message_fails_for_good() {
    let db = PgTestDb::create("nats_failures").await.expect("database");
    let stream = TestStream::planned("nats_failures")
        .await
        .expect("stream name");
    let publisher = publisher(&stream);
    let worker = worker(&db, &publisher);

    let id = enqueue(&db, Task::new("order.created", 1, "{}")).await;
    let first = worker.send(id).await;
    assert!(
        matches!(
            first,
            Err(Error::Handler {
                will_retry: true,
                ..
            })
        ),
        "{first:?}"
    );
    assert_eq!(
        db.store().get(id).await.expect("get").status,
        Status::Available
    );
    stream.create_now().await.expect("create the stream");
    worker.send(id).await.expect("send once the stream exists");
    assert_eq!(stream.count().await.expect("count"), 1);

    // The whole message (payload plus headers) exceeds max_payload.
    let max = stream.jetstream().client().server_info().max_payload;
    let big = vec![b'x'; max.min(diesel_outbox_postgres::outbox::limits::MAX_PAYLOAD_BYTES)];
    let id = enqueue(&db, Task::new("order.created", 1, big)).await;
    let oversized = worker.send(id).await;
    assert!(
        matches!(
            oversized,
            Err(Error::Handler {
                will_retry: false,
                ..
            })
        ),
        "{oversized:?}"
    );
    let record = db.store().get(id).await.expect("get");
    assert_eq!(record.status, Status::Failed);
    assert!(
        record.last_error.contains("max payload"),
        "{}",
        record.last_error
    );
    assert_eq!(stream.count().await.expect("count"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_or_unroutable_configuration_is_refused() {
    let stream = TestStream::planned("nats_config")
        .await
        .expect("stream name");
    let js = stream.jetstream().clone();
    let unroutable = JetStreamPublisher::builder(js.clone())
        .subject_prefix("orders")
        .route("has space", 1)
        .build();
    assert!(
        matches!(
            unroutable,
            Err(NatsError::Config {
                field: "routes",
                ..
            })
        ),
        "{unroutable:?}"
    );
    let wildcard = JetStreamPublisher::builder(js.clone())
        .route_to("k", 1, "orders.*")
        .build();
    assert!(matches!(
        wildcard,
        Err(NatsError::Config {
            field: "routes",
            ..
        })
    ));
    let unprefixed = JetStreamPublisher::builder(js.clone())
        .route("order.created", 1)
        .build();
    assert!(
        matches!(
            unprefixed,
            Err(NatsError::Config {
                field: "subject_prefix",
                ..
            })
        ),
        "a derived subject has no default prefix: {unprefixed:?}"
    );
    let too_long = JetStreamPublisher::builder(js.clone())
        .route_to("order.created", 1, "orders.created")
        .message_id_prefix("p".repeat(diesel_outbox_nats::MAX_MESSAGE_ID_PREFIX_BYTES + 1))
        .build();
    assert!(
        matches!(
            too_long,
            Err(NatsError::Config {
                field: "message_id_prefix",
                ..
            })
        ),
        "ids longer than an inbox takes: {too_long:?}"
    );
    assert!(
        JetStreamPublisher::builder(js.clone())
            .route_to("order.created", 1, "orders.created")
            .message_id_prefix("p".repeat(diesel_outbox_nats::MAX_MESSAGE_ID_PREFIX_BYTES))
            .build()
            .is_ok()
    );
    let none = JetStreamPublisher::builder(js.clone()).build();
    assert!(matches!(
        none,
        Err(NatsError::Config {
            field: "routes",
            ..
        })
    ));

    // A task header in the reserved space fails for good, before publishing.
    let publisher = publisher(&stream);
    let delivery = Delivery::new(
        TaskId::new(1),
        1,
        Task::new("order.created", 1, "{}").header(headers::TASK_ID, "forged"),
    );
    let refused = publisher
        .publish(&delivery)
        .await
        .expect_err("reserved header");
    assert!(refused.is_permanent());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_spec_creates_or_checks_the_stream() {
    let stream = TestStream::planned("nats_spec").await.expect("stream name");
    let publisher = publisher(&stream);
    let spec = StreamSpec::for_publisher(stream.name(), &publisher)
        .duplicate_window(std::time::Duration::from_secs(300));
    let created = spec.ensure(stream.jetstream()).await.expect("create");
    assert_eq!(
        created.config.duplicate_window,
        std::time::Duration::from_secs(300)
    );
    spec.ensure(stream.jetstream())
        .await
        .expect("an existing stream that fits");

    let wider = spec
        .clone()
        .duplicate_window(std::time::Duration::from_secs(600));
    assert!(matches!(
        wider.ensure(stream.jetstream()).await,
        Err(NatsError::DuplicateWindow { .. })
    ));
    let other = StreamSpec::new(stream.name(), [format!("{}.elsewhere", stream.prefix())]);
    assert!(matches!(
        other.ensure(stream.jetstream()).await,
        Err(NatsError::StreamMismatch { .. })
    ));
    // The stream was made on one server; a spec wanting three copies of
    // every message must not accept it.
    assert_eq!(created.config.num_replicas, 1);
    let replicated = spec.clone().replicas(3);
    match replicated.ensure(stream.jetstream()).await {
        Err(NatsError::StreamMismatch { reason, .. }) => {
            assert!(reason.contains("replicas"), "{reason}");
        }
        other => panic!("a one-replica stream accepted for three: {other:?}"),
    }
    for replicas in [0, 6] {
        match spec
            .clone()
            .replicas(replicas)
            .ensure(stream.jetstream())
            .await
        {
            Err(NatsError::Config { field, .. }) => assert_eq!(field, "replicas"),
            other => panic!("{replicas} replicas accepted: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_refusing_the_message_fails_for_good() {
    let stream = TestStream::create("nats_refused").await.expect("stream");
    // The subject is captured by the test's stream, but the publisher insists
    // on another one: JetStream refuses the message, and no retry can help.
    let publisher = JetStreamPublisher::builder(stream.jetstream().clone())
        .subject_prefix(stream.prefix())
        .route("order.created", 1)
        .expected_stream("SOME_OTHER_STREAM")
        .build()
        .expect("publisher");
    let delivery = Delivery::new(TaskId::new(5), 1, Task::new("order.created", 1, "{}"));
    let refused = publisher
        .publish(&delivery)
        .await
        .expect_err("wrong stream");
    assert!(refused.is_permanent(), "{refused}");
    assert_eq!(stream.count().await.expect("count"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_goes_out_together_and_an_oversized_message_fails_alone() {
    let db = PgTestDb::create("nats_batch").await.expect("database");
    let stream = TestStream::create("nats_batch").await.expect("stream");
    let publisher = publisher(&stream);
    let worker = worker(&db, &publisher);
    let max = stream.jetstream().client().server_info().max_payload;
    let big = vec![b'x'; max.min(diesel_outbox_postgres::outbox::limits::MAX_PAYLOAD_BYTES)];
    let mut ids = Vec::new();
    for n in 0..20 {
        let task = match n {
            7 => Task::new("order.created", 1, big.clone()),
            _ => Task::new("order.created", 1, format!("{{\"order\":{n}}}")),
        };
        ids.push(enqueue(&db, task).await);
    }
    // One round claims all twenty and hands them to the publisher at once.
    let report = worker.retry_pending(32).await.expect("round");
    assert_eq!((report.succeeded, report.failed), (19, 1), "{report:?}");
    assert_eq!(stream.count().await.expect("count"), 19);
    for (n, id) in ids.into_iter().enumerate() {
        let record = db.store().get(id).await.expect("get");
        if n == 7 {
            assert_eq!(record.status, Status::Failed);
            assert!(
                record.last_error.contains("max payload"),
                "{}",
                record.last_error
            );
        } else {
            assert_eq!(record.status, Status::Succeeded, "order {n}");
        }
    }
    // Each message kept its own id and payload.
    let mut orders: Vec<String> = stream
        .messages()
        .await
        .expect("messages")
        .into_iter()
        .map(|message| String::from_utf8_lossy(&message.payload).into_owned())
        .collect();
    orders.sort();
    assert_eq!(orders.len(), 19);
    assert!(
        orders
            .iter()
            .all(|payload| payload.starts_with("{\"order\":"))
    );
}
