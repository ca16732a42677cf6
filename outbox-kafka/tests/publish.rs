//! Publishing: headers and keys, a key's order on its partition, a batch
//! with a record that cannot go, a missing topic, an unreachable broker,
//! configuration refused.

use std::collections::HashMap;

use confluent_kafka::common::header::{Header as _, Headers as _};
use diesel_outbox_kafka::{KafkaError, KafkaPublisher, MESSAGE_ID, decode};
use diesel_outbox_postgres::outbox::{BatchHandler as _, Delivery, Status, Store, Task, TaskId};
use diesel_outbox_testkit::{TestBackend, kafka::TestTopic, postgres::PgTestDb};

use crate::support::{enqueue, publisher, worker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_task_lands_once_with_its_id_key_and_headers() {
    let db = PgTestDb::create("kafka_publish").await.expect("database");
    let topic = TestTopic::create("kafka_publish", 3).await.expect("topic");
    let publisher = publisher(&topic).build().expect("publisher");
    let worker = worker(&db, &publisher);
    let id = enqueue(
        &db,
        Task::new("order.created", 1, "{\"order\":42}")
            .ordering_key("customer-7")
            .header(
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
    )
    .await;
    worker.send(id).await.expect("send");
    let records = topic.read(topic.topic(), 1).await.expect("read");
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(
        record.value().map(Vec::as_slice),
        Some(&b"{\"order\":42}"[..])
    );
    assert_eq!(record.key().map(Vec::as_slice), Some(&b"customer-7"[..]));
    let outbox = worker.outbox_id().await.expect("outbox id");
    let received = decode(record.headers()).expect("decode");
    assert_eq!(received.message_id, format!("{outbox}:{id}"));
    assert_eq!(
        (
            received.id,
            received.kind.as_str(),
            received.version,
            received.attempt
        ),
        (id, "order.created", 1, 1)
    );
    assert_eq!(received.outbox.as_deref(), Some(outbox.as_str()));
    assert!(received.headers.contains_key("traceparent"));
    assert_eq!(
        db.store().get(id).await.expect("get").status,
        Status::Succeeded
    );
    assert_eq!(topic.count(topic.topic()).await.expect("count"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_tasks_share_a_partition_in_commit_order() {
    let db = PgTestDb::create("kafka_order").await.expect("database");
    let topic = TestTopic::create("kafka_order", 3).await.expect("topic");
    let publisher = publisher(&topic).build().expect("publisher");
    let worker = worker(&db, &publisher);
    let mut ids = Vec::new();
    for n in 0..60 {
        let task = Task::new("order.created", 1, format!("{{\"order\":{n}}}"))
            .ordering_key(format!("customer-{}", n % 6));
        ids.push(enqueue(&db, task).await);
    }
    let mut sent = 0u64;
    while sent < 60 {
        let report = worker.retry_pending(25).await.expect("round");
        assert_eq!(report.retried + report.failed, 0, "{report:?}");
        sent += report.succeeded;
    }
    let records = topic.read(topic.topic(), 60).await.expect("read");
    assert_eq!(records.len(), 60);
    let mut by_key: HashMap<Vec<u8>, Vec<(i32, i64, TaskId)>> = HashMap::new();
    for record in &records {
        let id = decode(record.headers()).expect("decode").id;
        by_key
            .entry(record.key().cloned().unwrap_or_default())
            .or_default()
            .push((record.partition(), record.offset(), id));
    }
    assert_eq!(by_key.len(), 6);
    let mut partitions = std::collections::HashSet::new();
    for (key, mut seen) in by_key {
        let partition = seen[0].0;
        partitions.insert(partition);
        assert!(
            seen.iter().all(|(p, _, _)| *p == partition),
            "{key:?} spread over partitions"
        );
        seen.sort_by_key(|(_, offset, _)| *offset);
        let in_offset_order: Vec<TaskId> = seen.iter().map(|(_, _, id)| *id).collect();
        let mut in_commit_order = in_offset_order.clone();
        in_commit_order.sort();
        assert_eq!(in_offset_order, in_commit_order, "{key:?} out of order");
    }
    assert!(partitions.len() > 1, "every key landed on one partition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_cannot_go_fails_alone_and_for_good() {
    let topic = TestTopic::create("kafka_reserved", 1).await.expect("topic");
    let publisher = publisher(&topic)
        .property("max.request.size", "2048")
        .build()
        .expect("publisher");
    let delivery = |id: i64, task: Task| Delivery::new(TaskId::new(id), 1, task);
    let results = publisher
        .handle_batch(vec![
            delivery(1, Task::new("order.created", 1, "{}")),
            delivery(
                2,
                Task::new("order.created", 1, "{}").header("Outbox-Kind", "forged"),
            ),
            delivery(3, Task::new("order.created", 1, "x".repeat(4096))),
            delivery(4, Task::new("order.unrouted", 1, "{}")),
            delivery(5, Task::new("order.created", 1, "{}")),
        ])
        .await;
    assert!(results[0].is_ok() && results[4].is_ok(), "{results:?}");
    for (n, result) in results.iter().enumerate().take(4).skip(1) {
        let error = result.as_ref().expect_err("refused");
        assert!(error.is_permanent(), "delivery {}: {error}", n + 1);
    }
    let text = |n: usize| {
        results[n]
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default()
    };
    assert!(text(1).contains("Outbox-Kind"), "{}", text(1));
    assert!(text(3).contains("order.unrouted"), "{}", text(3));
    let records = topic.read(topic.topic(), 2).await.expect("read");
    let ids: Vec<String> = records
        .iter()
        .filter_map(|record| record.headers().last_header(MESSAGE_ID))
        .map(|header| String::from_utf8_lossy(header.value().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(topic.count(topic.topic()).await.expect("count"), 2);
    assert!(ids[0].ends_with(":1") && ids[1].ends_with(":5"), "{ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_fails_for_good_naming_it() {
    let db = PgTestDb::create("kafka_no_topic").await.expect("database");
    let topic = TestTopic::create("kafka_no_topic", 1).await.expect("topic");
    let missing = format!("{}-missing", topic.topic());
    let publisher = publisher(&topic)
        .route("order.shipped", 1, &missing)
        .build()
        .expect("publisher");
    let worker = worker(&db, &publisher);
    let shipped = enqueue(&db, Task::new("order.shipped", 1, "{}")).await;
    let created = enqueue(&db, Task::new("order.created", 1, "{}")).await;
    worker
        .send(created)
        .await
        .expect("send to a topic that exists");
    let error = worker.send(shipped).await.expect_err("no such topic");
    let record = db.store().get(shipped).await.expect("get");
    assert_eq!(record.status, Status::Failed, "{error}");
    assert!(
        record.last_error.contains(&missing) && record.last_error.contains("does not exist"),
        "{}",
        record.last_error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_fails_the_batch_retryably() {
    let port = diesel_outbox_testkit::private_server::free_port().expect("port");
    let publisher = KafkaPublisher::builder(format!("127.0.0.1:{port}"))
        .route("order.created", 1, "orders")
        .build()
        .expect("publisher");
    let deliveries = (1..=50)
        .map(|id| Delivery::new(TaskId::new(id), 1, Task::new("order.created", 1, "{}")))
        .collect();
    let started = std::time::Instant::now();
    let results = publisher.handle_batch(deliveries).await;
    // Not a measure of speed: a batch that waited for the topic's metadata
    // once per record would take 50 times `max.block.ms` (150 s).
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "the batch waited {:?}",
        started.elapsed()
    );
    assert_eq!(results.len(), 50);
    for result in results {
        let error = result.expect_err("nothing answers");
        assert!(!error.is_permanent(), "{error}");
    }
}

#[test]
fn properties_that_weaken_delivery_are_refused() {
    for (name, value) in [("acks", "1"), ("enable.idempotence", "false")] {
        let error = KafkaPublisher::builder("127.0.0.1:9092")
            .route("order.created", 1, "orders")
            .property(name, value)
            .build()
            .expect_err(name);
        assert!(
            matches!(&error, KafkaError::Config { field: "property", reason } if reason.contains(name)),
            "{error}"
        );
    }
}
