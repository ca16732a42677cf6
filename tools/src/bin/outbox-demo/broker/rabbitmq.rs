//! The demo on RabbitMQ: a direct exchange with the shipping service's
//! durable queue bound to it, published to with confirms. RabbitMQ keeps
//! no message ids, so every replay reaches the queue and the inbox alone
//! drops it; an audit queue bound beside it keeps a copy of every message
//! for the summary.

use diesel_outbox_core::{CancellationToken, Inbox, consume::ConsumeHandler};
use diesel_outbox_rabbitmq::{InboxConsumer, RabbitPublisher};
use diesel_outbox_testkit::rabbitmq::{TestQueue, broker_url};

use super::{Carried, Consuming};
use crate::{effect, settings};

/// The demo's exchange and queue, and the audit queue bound beside it,
/// with the consumer's retry queue deleted along with them.
pub(super) async fn queue() -> anyhow::Result<TestQueue> {
    let queue = TestQueue::create("demo").await?;
    queue.adopt(retry_queue(&queue));
    let audit = queue.another_queue(AUDIT).await?;
    queue.bind(&audit, queue.routing_key()).await?;
    Ok(queue)
}

/// The suffix of the audit queue, `<queue>.audit`: bound under the same
/// routing key as the shipping service's queue, it receives a copy of
/// every message and nobody consumes it.
const AUDIT: &str = "audit";

/// The audit queue's name.
fn audit_queue(queue: &TestQueue) -> String {
    format!("{}.{AUDIT}", queue.queue())
}

/// Where the consumer parks a message that failed, until its retry: the
/// consumer declares it as `<queue>.retry`.
fn retry_queue(queue: &TestQueue) -> String {
    format!("{}.retry", queue.queue())
}

/// A publisher of order.created to `exchange` under `routing_key`.
pub(super) fn publisher(exchange: &str, routing_key: &str) -> anyhow::Result<RabbitPublisher> {
    Ok(RabbitPublisher::builder(broker_url())
        .route(effect::ORDER_CREATED, 1, exchange, routing_key)
        .build()?)
}

/// Starts the shipping service's consumer on `queue`.
pub(super) fn consume<I, H>(
    queue: &TestQueue,
    inbox: I,
    handler: H,
    concurrency: u16,
    shutdown: CancellationToken,
) -> anyhow::Result<Consuming>
where
    I: Inbox,
    H: ConsumeHandler<I::Conn> + 'static,
{
    let consumer = InboxConsumer::builder(inbox, broker_url(), queue.queue(), handler)
        .name("shipping")
        .prefetch(concurrency)
        .retry(settings::retry())
        .build()?;
    Ok(tokio::spawn(
        async move { Ok(consumer.run(shutdown).await?) },
    ))
}

/// The messages ready in the queue and in its retry queue (not those the
/// consumer holds).
pub(super) async fn unconsumed(queue: &TestQueue) -> anyhow::Result<u64> {
    let ready = queue.ready(queue.queue()).await?;
    let waiting = queue.ready(&retry_queue(queue)).await?;
    Ok(u64::from(ready) + u64::from(waiting))
}

/// The messages the exchange routed (the audit queue's copies), and the
/// distinct task ids among them.
pub(super) async fn carried(queue: &TestQueue) -> anyhow::Result<Carried> {
    let messages = queue.drain(&audit_queue(queue)).await?;
    let ids: std::collections::HashSet<_> = messages
        .iter()
        .filter_map(|m| diesel_outbox_rabbitmq::decode(&m.properties).ok())
        .map(|received| received.id)
        .collect();
    Ok(Carried {
        broker: "RabbitMQ",
        messages: messages.len() as u64,
        ids: ids.len() as u64,
        deduplicates: false,
    })
}
