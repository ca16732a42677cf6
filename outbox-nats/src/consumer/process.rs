//! One JetStream delivery on the shared consumer flow: decoded into an
//! [`Incoming`], answered with `+ACK`, `-NAK` with a delay, or a copy to the
//! dead-letter subject and `+TERM`.

use std::{sync::Arc, time::Duration};

use async_nats::jetstream::{self, AckKind};
use async_trait::async_trait;
use diesel_outbox_core::{
    BoxError,
    consume::{Acknowledge, Incoming, Received, Undecodable, metrics::lag},
};
use tracing::Span;

use super::dead_letter::{Copy, DeadLetter};
use crate::decode;

/// A delivery and what answering it needs.
pub(crate) struct Delivered {
    message: jetstream::Message,
    consumer: Arc<str>,
    dead_letter: Option<Arc<DeadLetter>>,
    stream_sequence: u64,
    delivered: i64,
}

impl Delivered {
    /// `message`, with what JetStream says of it (its sequence, its
    /// delivery count, and the consumer's lag, which is recorded).
    pub(crate) fn new(
        message: jetstream::Message,
        consumer: Arc<str>,
        dead_letter: Option<Arc<DeadLetter>>,
    ) -> Self {
        let (stream_sequence, delivered) = match message.info() {
            Ok(info) => {
                lag(&consumer, info.pending);
                (info.stream_sequence, info.delivered)
            }
            Err(_) => (0, 1),
        };
        Self {
            message,
            consumer,
            dead_letter,
            stream_sequence,
            delivered,
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
            subject = %self.message.subject,
            stream_sequence = self.stream_sequence,
            delivered = self.delivered,
        )
    }

    fn decode(&self) -> Result<Incoming, Undecodable> {
        let message_id = self
            .message
            .headers
            .as_ref()
            .and_then(|headers| headers.get(async_nats::header::NATS_MESSAGE_ID))
            .map(|value| value.as_str().to_owned());
        let received = decode(&self.message).map_err(|error| Undecodable {
            reason: error.to_string(),
            message_id: message_id.clone(),
        })?;
        let Some(message_id) = message_id else {
            return Err(Undecodable {
                reason: "header `Nats-Msg-Id` is missing".to_owned(),
                message_id: None,
            });
        };
        Ok(Incoming::new(
            message_id,
            received.id,
            received.kind,
            received.version,
            received.attempt,
            received.payload,
        )
        .with_headers(received.headers)
        .with_outbox(received.outbox)
        .with_source(self.message.subject.to_string(), Some(self.stream_sequence))
        .with_delivered(self.delivered))
    }
}

#[async_trait]
impl Acknowledge for Delivered {
    async fn ack(&self) -> Result<(), BoxError> {
        self.message.ack().await
    }

    async fn nak(&self, delay: Duration) -> Result<(), BoxError> {
        self.message.ack_with(AckKind::Nak(Some(delay))).await
    }

    /// Copies the message to the dead-letter subject, if any, then
    /// terminates it (`+TERM`, which JetStream announces with a
    /// `MSG_TERMINATED` advisory).
    async fn give_up(&self, reason: &str, message_id: Option<&str>) -> Result<(), BoxError> {
        if let Some(dead_letter) = &self.dead_letter {
            let copy = Copy {
                consumer: &self.consumer,
                reason,
                message_id,
                stream_sequence: self.stream_sequence,
                delivered: self.delivered,
            };
            dead_letter
                .publish(&self.message.message, copy)
                .await
                .map_err(BoxError::from)?;
        }
        if let Err(error) = self.message.ack_with(AckKind::Term).await {
            tracing::warn!(%error, "+TERM failed; the message comes back and is given up again");
        }
        Ok(())
    }
}
