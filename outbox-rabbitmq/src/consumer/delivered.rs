//! One RabbitMQ delivery on the shared consumer flow: decoded into an
//! [`Incoming`], answered with `basic.ack`, a copy to the retry queue that
//! comes back after the delay, or a copy to the dead-letter exchange.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use diesel_outbox_core::{
    BoxError,
    consume::{Acknowledge, Incoming, Received, Undecodable},
};
use lapin::{
    BasicProperties, Channel, Confirmation,
    message::Delivery,
    options::{BasicAckOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions},
    types::{AMQPValue, FieldTable, LongString, ShortString},
};
use tracing::Span;

use crate::properties::{self, DELIVERED, PERSISTENT};

/// Header naming the consumer that gave the message up.
pub const DEAD_CONSUMER: &str = "Outbox-Dead-Consumer";
/// Header with the reason (the last error, cut to 1 KiB).
pub const DEAD_REASON: &str = "Outbox-Dead-Reason";
/// Header naming the queue the message was given up from.
pub const DEAD_QUEUE: &str = "Outbox-Dead-Queue";
/// Header with how many deliveries were tried.
pub const DEAD_DELIVERED: &str = "Outbox-Dead-Delivered";

/// The longest reason carried, in bytes.
const MAX_REASON: usize = 1024;

/// The longest a message is held before it is handed back to the broker
/// when its copy to the retry queue failed.
const MAX_HAND_BACK_PAUSE: Duration = Duration::from_secs(5);

/// Where given-up messages go: an exchange and a routing key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The exchange.
    pub exchange: String,
    /// The routing key.
    pub routing_key: String,
}

/// What every delivery of one consumer run shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The consumer's name, as the inbox records it.
    pub(crate) consumer: String,
    /// The queue read.
    pub(crate) queue: String,
    /// The queue failed messages wait in until their delay passes.
    pub(crate) retry_queue: String,
    /// A channel in confirm mode for the copies.
    pub(crate) publishing: Channel,
    pub(crate) dead_letter: Option<DeadLetter>,
}

/// A delivery and what answering it needs.
pub(crate) struct Delivered {
    delivery: Delivery,
    shared: Arc<Shared>,
    delivered: i64,
}

impl Delivered {
    pub(crate) fn new(delivery: Delivery, shared: Arc<Shared>) -> Self {
        // Copies handed back count their deliveries; a delivery the broker
        // repeats (a consumer went away before answering) counts once more.
        // (A redelivery counts once however often the broker repeats it: a
        // message that crashes the consumer every time comes back for ever
        // on a classic queue; a quorum queue's `x-delivery-limit` bounds it.)
        let handed_back = properties::handed_back(&delivery.properties);
        let delivered = handed_back
            .saturating_add(1)
            .saturating_add(i64::from(delivery.redelivered));
        Self {
            delivery,
            shared,
            delivered,
        }
    }

    /// The original's properties, with `extra` headers set.
    fn copy_properties(&self, extra: &[(&str, AMQPValue)]) -> BasicProperties {
        let mut headers = self
            .delivery
            .properties
            .headers()
            .clone()
            .unwrap_or_default();
        for (name, value) in extra {
            headers.insert(ShortString::from(*name), value.clone());
        }
        self.delivery
            .properties
            .clone()
            .with_delivery_mode(PERSISTENT)
            .with_headers(headers)
    }

    /// Publishes a copy of the message to `exchange` / `routing_key` and
    /// waits for the broker's confirm; `Err` unless a queue took it.
    async fn publish_copy(
        &self,
        exchange: &str,
        routing_key: &str,
        properties: BasicProperties,
    ) -> Result<(), BoxError> {
        let routing =
            ShortString::try_new(routing_key).map_err(|e| BoxError::from(e.to_string()))?;
        let exchange_name =
            ShortString::try_new(exchange).map_err(|e| BoxError::from(e.to_string()))?;
        let confirm = self
            .shared
            .publishing
            .basic_publish(
                exchange_name,
                routing,
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &self.delivery.data,
                properties,
            )
            .await?
            .await?;
        match confirm {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(_)) => Err(format!(
                "no queue is bound to exchange `{exchange}` for routing key `{routing_key}`"
            )
            .into()),
            Confirmation::Nack(_) => Err("the broker refused the copy (nack)".into()),
            Confirmation::NotRequested => Err("the copy was not confirmed".into()),
        }
    }
}

impl Received for Delivered {
    fn delivered(&self) -> i64 {
        self.delivered
    }

    fn span(&self, consumer: &str) -> Span {
        tracing::info_span!(
            "outbox.consume",
            consumer = %consumer,
            queue = %self.shared.queue,
            delivered = self.delivered,
        )
    }

    fn decode(&self) -> Result<Incoming, Undecodable> {
        let message_id = self
            .delivery
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.as_str().to_owned());
        let received =
            properties::decode(&self.delivery.properties).map_err(|error| Undecodable {
                reason: error.to_string(),
                message_id: message_id.clone(),
            })?;
        Ok(Incoming::new(
            received.message_id,
            received.id,
            received.kind,
            received.version,
            received.attempt,
            self.delivery.data.clone(),
        )
        .with_headers(received.headers)
        .with_outbox(received.outbox)
        .with_source(self.shared.queue.clone(), None)
        .with_delivered(self.delivered))
    }
}

/// `Err` when lapin did not send the answer: the delivery was answered
/// already, or its channel is gone (the broker redelivers it).
fn sent(answered: bool) -> Result<(), BoxError> {
    match answered {
        true => Ok(()),
        false => Err("the delivery was answered already, or its channel is closed".into()),
    }
}

#[async_trait]
impl Acknowledge for Delivered {
    async fn ack(&self) -> Result<(), BoxError> {
        sent(self.delivery.ack(BasicAckOptions::default()).await?)
    }

    /// Copies the message, its delivery count in [`DELIVERED`], to the
    /// retry queue with `delay` as its expiration; the broker moves it back
    /// to the consumer's queue when it expires. Then acknowledges the
    /// original. If the copy fails, the original is handed back at once.
    async fn nak(&self, delay: Duration) -> Result<(), BoxError> {
        // The broker takes expirations of at most 2^32 - 1 ms (49 days).
        let millis = u32::try_from(delay.as_millis()).unwrap_or(u32::MAX);
        let properties = self
            .copy_properties(&[(DELIVERED, AMQPValue::LongLongInt(self.delivered))])
            .with_expiration(ShortString::from(millis.to_string()));
        match self
            .publish_copy("", &self.shared.retry_queue, properties)
            .await
        {
            Ok(()) => sent(self.delivery.ack(BasicAckOptions::default()).await?),
            Err(error) => {
                // Not at once: the broker would redeliver it straight away,
                // and the same failure would turn the message round in a
                // tight loop (a closed channel also ends the subscription,
                // which reconnects after its own pause).
                let pause = delay.min(MAX_HAND_BACK_PAUSE);
                tracing::warn!(%error, ?pause, "could not copy the message to the retry queue; handing it back after a pause");
                tokio::time::sleep(pause).await;
                sent(
                    self.delivery
                        .nack(BasicNackOptions {
                            requeue: true,
                            ..BasicNackOptions::default()
                        })
                        .await?,
                )
            }
        }
    }

    /// Copies the message to the dead-letter exchange, if any, with the
    /// reason, then acknowledges the original; without one, rejects it
    /// (the queue's own dead-letter exchange, if it has one, takes it).
    async fn give_up(&self, reason: &str, _message_id: Option<&str>) -> Result<(), BoxError> {
        let Some(dead_letter) = &self.shared.dead_letter else {
            return sent(
                self.delivery
                    .reject(BasicRejectOptions { requeue: false })
                    .await?,
            );
        };
        let mut cut = reason.len().min(MAX_REASON);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        let text = |text: &str| AMQPValue::LongString(LongString::from(text));
        let properties = self.copy_properties(&[
            (DEAD_CONSUMER, text(&self.shared.consumer)),
            (DEAD_REASON, text(&reason[..cut])),
            (DEAD_QUEUE, text(&self.shared.queue)),
            (DEAD_DELIVERED, AMQPValue::LongLongInt(self.delivered)),
        ]);
        self.publish_copy(&dead_letter.exchange, &dead_letter.routing_key, properties)
            .await?;
        if let Err(error) = self.delivery.ack(BasicAckOptions::default()).await {
            tracing::warn!(%error, "acknowledging a dead-lettered message failed; it comes back and is given up again");
        }
        Ok(())
    }
}

/// The arguments of a retry queue for `queue`: expired messages go back to
/// `queue` through the default exchange.
pub(crate) fn retry_queue_arguments(queue: &str) -> FieldTable {
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    arguments.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from(queue)),
    );
    arguments
}
