//! One record on the shared consumer flow: decoded into an [`Incoming`],
//! and answered. Kafka keeps no answer per record: an acknowledgement or a
//! dead-letter copy lets the partition's offset move past the record, a
//! hand-back retries it in place after the delay (its partition waits, so
//! its key's order holds).

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use confluent_kafka::{
    common::header::{Headers as _, RecordHeader, RecordHeaders},
    consumer::ConsumerRecord,
};
use diesel_outbox_core::{
    BoxError,
    consume::{Acknowledge, Incoming, Undecodable},
};

use super::Shared;
use crate::{headers, producer::Outgoing};

/// Header naming the consumer that gave the record up.
pub const DEAD_CONSUMER: &str = "Outbox-Dead-Consumer";
/// Header with the reason (the last error, cut to 1 KiB).
pub const DEAD_REASON: &str = "Outbox-Dead-Reason";
/// Header naming where the record was given up from:
/// `<topic>/<partition>@<offset>`.
pub const DEAD_SOURCE: &str = "Outbox-Dead-Source";
/// Header with how many deliveries were tried.
pub const DEAD_DELIVERED: &str = "Outbox-Dead-Delivered";

/// The longest reason carried, in bytes.
const MAX_REASON: usize = 1024;

/// What the flow answered for one delivery of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Acknowledged, or copied to the dead-letter topic: the offset may
    /// move past it.
    Done,
    /// Handed back: try it again after the delay.
    Again(Duration),
}

/// A record and what answering it needs.
pub(crate) struct Answering<'a> {
    record: &'a ConsumerRecord<Vec<u8>, Vec<u8>>,
    shared: &'a Arc<Shared>,
    delivered: i64,
    answer: Mutex<Option<Answer>>,
}

impl<'a> Answering<'a> {
    pub(crate) fn new(
        record: &'a ConsumerRecord<Vec<u8>, Vec<u8>>,
        shared: &'a Arc<Shared>,
        delivered: i64,
    ) -> Self {
        Self {
            record,
            shared,
            delivered,
            answer: Mutex::new(None),
        }
    }

    /// Where the record is: `<topic>/<partition>@<offset>`.
    pub(crate) fn position(&self) -> String {
        position(self.record)
    }

    /// The answer given; a delivery the flow left unanswered is tried again.
    pub(crate) fn answer(&self) -> Answer {
        self.answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unwrap_or(Answer::Again(Duration::ZERO))
    }

    fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
    }

    /// The record decoded, or why it cannot be.
    pub(crate) fn decode(&self) -> Result<Incoming, Undecodable> {
        let record = self.record;
        let received = headers::decode(record.headers()).map_err(|error| Undecodable {
            reason: error.to_string(),
            message_id: headers::message_id(record.headers()),
        })?;
        let offset = u64::try_from(record.offset()).ok();
        Ok(Incoming::new(
            received.message_id,
            received.id,
            received.kind,
            received.version,
            received.attempt,
            record.value().cloned().unwrap_or_default(),
        )
        .with_headers(received.headers)
        .with_outbox(received.outbox)
        .with_source(format!("{}/{}", record.topic(), record.partition()), offset)
        .with_delivered(self.delivered))
    }
}

/// Where `record` is: `<topic>/<partition>@<offset>`.
pub(crate) fn position(record: &ConsumerRecord<Vec<u8>, Vec<u8>>) -> String {
    format!(
        "{}/{}@{}",
        record.topic(),
        record.partition(),
        record.offset()
    )
}

#[async_trait]
impl Acknowledge for Answering<'_> {
    /// Lets the offset move past the record; the commit follows within the
    /// consumer's commit interval.
    async fn ack(&self) -> Result<(), BoxError> {
        self.set(Answer::Done);
        Ok(())
    }

    /// Tries the record again after `delay`, in place.
    async fn nak(&self, delay: Duration) -> Result<(), BoxError> {
        self.set(Answer::Again(delay));
        Ok(())
    }

    /// Copies the record, with the reason, to the dead-letter topic and
    /// waits for every in-sync replica to have it; only then may the offset
    /// move past it.
    async fn give_up(&self, reason: &str, _message_id: Option<&str>) -> Result<(), BoxError> {
        let mut cut = reason.len().min(MAX_REASON);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        let text = |name: &str, value: &str| {
            RecordHeader::new(name.to_owned(), Some(value.as_bytes().to_vec()))
        };
        let original = self.record.headers().iter().cloned();
        let dead = [
            text(DEAD_CONSUMER, self.shared.flow_name()),
            text(DEAD_REASON, &reason[..cut]),
            text(DEAD_SOURCE, &self.position()),
            text(DEAD_DELIVERED, &self.delivered.to_string()),
        ];
        let copy = Outgoing {
            topic: &self.shared.dead_letter,
            key: self.record.key().map(Vec::as_slice),
            value: self.record.value().map(Vec::as_slice).unwrap_or_default(),
            headers: RecordHeaders::with_header_iter(original.chain(dead)),
        };
        let sent = self.shared.producer.send_all(vec![Ok(copy)]).await;
        match sent.into_iter().next() {
            Some(Ok(_)) => {
                self.set(Answer::Done);
                Ok(())
            }
            Some(Err(error)) => Err(error.to_string().into()),
            None => Err("the dead-letter copy was not sent".into()),
        }
    }
}
