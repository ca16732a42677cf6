//! The demo on NATS JetStream: a stream that remembers message ids for one
//! second, and a durable pull consumer for the shipping service.

use std::time::Duration;

use async_nats::jetstream::{consumer::pull, stream};
use diesel_outbox_core::{CancellationToken, Inbox, consume::ConsumeHandler};
use diesel_outbox_nats::{InboxConsumer, JetStreamPublisher};
use diesel_outbox_testkit::nats::TestStream;

use super::{Carried, Consuming};
use crate::{effect, settings};

/// The shipping service's durable consumer.
const DURABLE: &str = "shipping";

/// The demo's stream, remembering message ids for one second only: shorter
/// than the relay's lease, so a killed relay's replays are stored again and
/// reach the consumer.
pub(super) async fn stream() -> anyhow::Result<TestStream> {
    let stream = TestStream::planned("demo").await?;
    stream
        .jetstream()
        .create_stream(stream::Config {
            name: stream.name().to_owned(),
            subjects: vec![format!("{}.>", stream.prefix())],
            duplicate_window: Duration::from_secs(1),
            ..Default::default()
        })
        .await?;
    Ok(stream)
}

/// A publisher of order.created under subject `prefix`.
pub(super) async fn publisher(prefix: &str) -> anyhow::Result<JetStreamPublisher> {
    Ok(
        JetStreamPublisher::builder(diesel_outbox_testkit::nats::jetstream().await?)
            .subject_prefix(prefix)
            .route(effect::ORDER_CREATED, 1)
            .message_id_prefix("demo")
            .build()?,
    )
}

/// Starts the shipping service's consumer on `stream`.
pub(super) async fn consume<I, H>(
    stream: &TestStream,
    inbox: I,
    handler: H,
    concurrency: u16,
    shutdown: CancellationToken,
) -> anyhow::Result<Consuming>
where
    I: Inbox,
    H: ConsumeHandler<I::Conn> + 'static,
{
    let durable = stream
        .jetstream()
        .get_stream(stream.name())
        .await?
        .create_consumer(pull::Config {
            durable_name: Some(DURABLE.into()),
            ack_wait: Duration::from_secs(5),
            ..Default::default()
        })
        .await?;
    let consumer = InboxConsumer::builder(inbox, durable, handler)
        .concurrency(usize::from(concurrency))
        .retry(settings::retry())
        .build()?;
    Ok(tokio::spawn(
        async move { Ok(consumer.run(shutdown).await?) },
    ))
}

/// The stream's messages the consumer has not acknowledged yet.
pub(super) async fn unconsumed(stream: &TestStream) -> anyhow::Result<u64> {
    let info = stream
        .jetstream()
        .get_stream(stream.name())
        .await?
        .consumer_info(DURABLE)
        .await?;
    Ok(info.num_pending + u64::try_from(info.num_ack_pending)?)
}

/// The messages the stream holds, and the distinct task ids among them.
pub(super) async fn carried(stream: &TestStream) -> anyhow::Result<Carried> {
    let messages = stream.messages().await?;
    let ids: std::collections::HashSet<_> = messages
        .iter()
        .filter_map(|m| diesel_outbox_nats::decode_parts(Some(&m.headers), &m.payload).ok())
        .map(|received| received.id)
        .collect();
    Ok(Carried {
        broker: "JetStream",
        messages: messages.len() as u64,
        ids: ids.len() as u64,
        deduplicates: true,
    })
}
