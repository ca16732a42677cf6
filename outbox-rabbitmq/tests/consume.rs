//! The inbox consumer against a real broker, on PostgreSQL: each message
//! applied once, a replay acknowledged without the handler, a failing
//! message retried through the retry queue until it is given up, and a
//! message another program wrote dead-lettered while the others flow.

use std::{collections::HashSet, time::Duration};

use anyhow::Context as _;
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use diesel_outbox_postgres::outbox::{
    CancellationToken, Delivery, HandlerError, Inbox, RetryPolicy, Task, TaskId,
};
use diesel_outbox_rabbitmq::{
    ConsumeHandler, DEAD_DELIVERED, DEAD_REASON, InboxConsumer, Incoming, RabbitPublisher,
};
use diesel_outbox_testkit::{
    TestBackend,
    postgres::PgTestDb,
    rabbitmq::{TestQueue, broker_url},
};
use lapin::types::AMQPValue;

/// Applies an order by inserting its shipment row; orders in `retryable`
/// always fail retryably.
#[derive(Default)]
struct Ship {
    retryable: HashSet<i64>,
}

#[async_trait::async_trait]
impl<C> ConsumeHandler<C> for Ship
where
    C: AsyncConnection + SimpleAsyncConnection + Send + 'static,
{
    async fn handle(&self, conn: &mut C, incoming: &Incoming) -> Result<(), HandlerError> {
        let order: serde_json::Value = incoming.json()?;
        let order = order["order"]
            .as_i64()
            .ok_or_else(|| HandlerError::permanent(anyhow::anyhow!("order without a number")))?;
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

/// Publishes orders `orders` as the outbox would (task id = order number,
/// message ids `orders:<n>`).
async fn publish(queue: &TestQueue, orders: impl IntoIterator<Item = i64>) -> anyhow::Result<()> {
    let publisher = RabbitPublisher::builder(broker_url())
        .route("order.created", 1, queue.exchange(), queue.routing_key())
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

fn no_delay() -> RetryPolicy {
    RetryPolicy::new(Duration::ZERO, Duration::ZERO, 0.0).expect("policy")
}

/// Polls until `done` holds, for at most 30 s.
async fn until<F: AsyncFn() -> anyhow::Result<bool>>(what: &str, done: F) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done().await? {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn header(delivery: &lapin::message::Delivery, name: &str) -> Option<AMQPValue> {
    delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|headers| headers.inner().get(name).cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_applies_once_and_what_cannot_apply_is_dead_lettered() -> anyhow::Result<()> {
    let db = PgTestDb::create("amqp_consume").await?;
    db.migrate_inbox().await?;
    db.execute_sql("CREATE TABLE shipments (order_id BIGINT NOT NULL)")
        .await?;
    let queue = TestQueue::create("amqp_consume").await?;
    let dead = queue.another_queue("dead").await?;
    queue.bind(&dead, "dead").await?;
    let name = queue.queue().replace('.', "-");
    publish(&queue, 1..=20).await?;
    // A message another program wrote: no outbox headers.
    queue
        .publish_raw(
            queue.routing_key(),
            b"{\"order\":99}",
            lapin::BasicProperties::default().with_message_id("stranger:1".into()),
        )
        .await?;
    // As if a delivery of order 3 had committed and then crashed before its ack.
    let (store, recorded) = (db.store().clone(), name.clone());
    db.store()
        .transaction(move |conn| {
            Box::pin(async move { store.record(conn, &recorded, "orders:3").await })
        })
        .await?;
    let consumer = InboxConsumer::builder(
        db.store().clone(),
        broker_url(),
        queue.queue(),
        Ship {
            retryable: HashSet::from([7]),
        },
    )
    .name(name.clone())
    .prefetch(4)
    .retry(no_delay())
    .max_deliveries(3)
    .dead_letter(queue.exchange(), "dead")
    .build()?;
    assert_eq!(consumer.retry_queue(), format!("{}.retry", queue.queue()));
    queue.adopt(consumer.retry_queue());
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { consumer.run(shutdown).await }
    });
    // 18 applied and the one recorded before; the stranger and order 7 dead.
    until("every message to be answered", async || {
        Ok(db.count("outbox_inbox").await? == 19 && queue.ready(&dead).await? == 2)
    })
    .await?;
    shutdown.cancel();
    let report = running.await?.context("consumer run")?;
    assert_eq!(
        (
            report.applied,
            report.duplicates,
            report.dead_lettered,
            report.failed
        ),
        (18, 1, 2, 2),
        "{report:?}"
    );
    assert_eq!(db.count("shipments").await?, 18);
    let copies = queue.drain(&dead).await?;
    assert_eq!(copies.len(), 2);
    let reason = |copy: &lapin::message::Delivery| match header(copy, DEAD_REASON) {
        Some(AMQPValue::LongString(text)) => String::from_utf8_lossy(text.as_bytes()).into_owned(),
        other => format!("{other:?}"),
    };
    let stranger = copies
        .iter()
        .find(|copy| copy.data == b"{\"order\":99}")
        .context("the stranger's copy")?;
    assert!(reason(stranger).contains("missing"), "{}", reason(stranger));
    let seventh = copies
        .iter()
        .find(|copy| copy.data == b"{\"order\":7}")
        .context("order 7's copy")?;
    assert!(
        reason(seventh).contains("gave up after 3 deliveries"),
        "{}",
        reason(seventh)
    );
    assert_eq!(
        header(seventh, DEAD_DELIVERED),
        Some(AMQPValue::LongLongInt(3))
    );
    assert_eq!(queue.ready(queue.queue()).await?, 0);
    assert_eq!(queue.ready(&format!("{}.retry", queue.queue())).await?, 0);
    Ok(())
}
