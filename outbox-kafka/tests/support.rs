//! What the tests share: a publisher and a worker for a test's topic, and
//! tasks enqueued in committed transactions.

use diesel_async::AsyncConnection;
use diesel_outbox_kafka::{KafkaPublisher, PublisherBuilder};
use diesel_outbox_postgres::{
    PgStore,
    outbox::{Registry, RetryPolicy, Store, Task, TaskId, Worker, WorkerConfig},
};
use diesel_outbox_testkit::{TestBackend as _, kafka::TestTopic, postgres::PgTestDb};

/// A publisher builder for `topic`'s cluster, with the test clients'
/// properties, routing `order.created` v1 to the topic.
pub(crate) fn publisher(topic: &TestTopic) -> PublisherBuilder {
    topic
        .client_properties()
        .iter()
        .fold(
            KafkaPublisher::builder(topic.bootstrap()),
            |builder, (name, value)| builder.property(*name, *value),
        )
        .route("order.created", 1, topic.topic())
}

/// A worker that publishes with `publisher` and retries at once.
pub(crate) fn worker(db: &PgTestDb, publisher: &KafkaPublisher) -> Worker<PgStore> {
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

/// Enqueues `task` in a transaction of its own and commits.
pub(crate) async fn enqueue(db: &PgTestDb, task: Task) -> TaskId {
    let mut conn = db.connect().await.expect("connect");
    conn.transaction::<_, anyhow::Error, _>(async |tx| Ok(db.store().enqueue(tx, task).await?))
        .await
        .expect("enqueue")
}
