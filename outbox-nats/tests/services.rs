//! Two services side by side, each with a database of its own, publishing
//! into one stream: their task ids are the same numbers, their message ids
//! never are.

use diesel_async::AsyncConnection;
use diesel_outbox_nats::{JetStreamPublisher, decode_parts};
use diesel_outbox_postgres::{
    PgStore,
    outbox::{Error, Registry, Status, Store, Task, TaskId, Worker},
};
use diesel_outbox_testkit::{TestBackend, nats::TestStream, postgres::PgTestDb};

/// A service's publisher into `stream`, on the defaults but for its
/// subjects (a subject prefix has no default), or with `message_id_prefix`.
fn publisher(
    stream: &TestStream,
    service: &str,
    message_id_prefix: Option<&str>,
) -> JetStreamPublisher {
    let builder = JetStreamPublisher::builder(stream.jetstream().clone())
        .subject_prefix(format!("{}.{service}", stream.prefix()))
        .route("order.created", 1);
    match message_id_prefix {
        Some(prefix) => builder.message_id_prefix(prefix),
        None => builder,
    }
    .build()
    .expect("publisher")
}

fn worker(db: &PgTestDb, publisher: &JetStreamPublisher) -> Worker<PgStore> {
    let registry = publisher
        .register(Registry::builder())
        .build()
        .expect("registry");
    Worker::new(db.store().clone(), registry).expect("worker")
}

async fn enqueue(db: &PgTestDb) -> TaskId {
    let mut conn = db.connect().await.expect("connect");
    conn.transaction::<_, anyhow::Error, _>(async |tx| {
        Ok(db
            .store()
            .enqueue(tx, Task::new("order.created", 1, "{}"))
            .await?)
    })
    .await
    .expect("enqueue")
}

/// On the defaults, two services' task 1 land as two messages: each
/// `Nats-Msg-Id` names its outbox, which each database's migration chose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_on_the_defaults_never_share_a_message_id() {
    let stream = TestStream::create("nats_two_services")
        .await
        .expect("stream");
    let (orders, billing) = (
        PgTestDb::create("nats_services_orders")
            .await
            .expect("database"),
        PgTestDb::create("nats_services_billing")
            .await
            .expect("database"),
    );
    let (a, b) = (
        worker(&orders, &publisher(&stream, "orders", None)),
        worker(&billing, &publisher(&stream, "billing", None)),
    );
    let (first, second) = (enqueue(&orders).await, enqueue(&billing).await);
    assert_eq!(
        first, second,
        "both databases number their first task alike"
    );
    a.send(first).await.expect("the first service's send");
    b.send(second).await.expect("the second service's send");

    let messages = stream.messages().await.expect("messages");
    assert_eq!(messages.len(), 2, "one message each");
    let ids: Vec<String> = messages
        .iter()
        .map(|message| {
            message
                .headers
                .get("Nats-Msg-Id")
                .map(|value| value.as_str().to_owned())
                .unwrap_or_default()
        })
        .collect();
    assert_ne!(ids[0], ids[1]);
    for (message, db) in messages.iter().zip([&orders, &billing]) {
        let outbox = db.store().outbox_id().await.expect("outbox id");
        let received = decode_parts(Some(&message.headers), &message.payload).expect("decode");
        assert_eq!(received.outbox.as_deref(), Some(outbox.as_str()));
        assert_eq!(
            message
                .headers
                .get("Nats-Msg-Id")
                .map(|v| v.as_str().to_owned()),
            Some(format!("{outbox}:{first}"))
        );
    }
}

/// Two services given the same explicit prefix do collide: the second
/// one's message is dropped by JetStream as a replay, and its task fails
/// for good, naming the collision, instead of counting as sent. A replay of
/// a service's own task is still a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_message_under_the_same_id_fails_the_task_naming_it() {
    let stream = TestStream::create("nats_collision").await.expect("stream");
    let (orders, billing) = (
        PgTestDb::create("nats_collision_orders")
            .await
            .expect("database"),
        PgTestDb::create("nats_collision_billing")
            .await
            .expect("database"),
    );
    let (a, b) = (
        worker(&orders, &publisher(&stream, "orders", Some("shared"))),
        worker(&billing, &publisher(&stream, "billing", Some("shared"))),
    );
    let (first, second) = (enqueue(&orders).await, enqueue(&billing).await);
    a.send(first).await.expect("the first service's send");

    // The first service's own replay (a crash before its completion write,
    // say): JetStream reports a duplicate, and it is the same task.
    let own = publisher(&stream, "orders", Some("shared"));
    let record = orders.store().get(first).await.expect("record");
    let replay = diesel_outbox_postgres::outbox::Delivery::new(first, 2, record.task)
        .in_outbox(orders.store().outbox_id().await.expect("outbox id"));
    let published = own
        .publish(&replay)
        .await
        .expect("an own replay is a success");
    assert!(published.duplicate);

    match b.send(second).await {
        Err(Error::Handler {
            will_retry,
            message,
            ..
        }) => {
            assert!(!will_retry, "a collision cannot pass by retrying");
            assert!(
                message.contains("message id `shared:1` is taken"),
                "{message}"
            );
        }
        other => panic!("the colliding send gave {other:?}"),
    }
    assert_eq!(
        billing.store().get(second).await.expect("record").status,
        Status::Failed
    );
    assert_eq!(stream.count().await.expect("count"), 1);
}

/// The outbox id is the database's own: two databases get two, and a
/// store reads the same one every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_database_names_its_outbox_once() {
    let (a, b) = (
        PgTestDb::create("nats_outbox_id_a")
            .await
            .expect("database"),
        PgTestDb::create("nats_outbox_id_b")
            .await
            .expect("database"),
    );
    let first = a.store().outbox_id().await.expect("outbox id");
    assert_eq!(first.as_str().len(), 32);
    assert!(first.as_str().chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(first, b.store().outbox_id().await.expect("outbox id"));
    let again = a
        .store_with_pool(1)
        .expect("store")
        .outbox_id()
        .await
        .expect("outbox id");
    assert_eq!(first, again);
}
