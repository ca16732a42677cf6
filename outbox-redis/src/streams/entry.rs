//! One stream entry in a consumer's hands: decoded for the flow, with its
//! three answers (`XACK`, hand back, dead-letter).

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use diesel_outbox_core::{
    BoxError,
    consume::{Acknowledge, Incoming, Received, Undecodable},
};
use redis::{Script, Value};
use tracing::Span;

use crate::{
    connection::Connection,
    fields::{self, Fields},
};

/// The dead-letter entry's field naming the consumer that gave it up.
pub const DEAD_CONSUMER: &str = "Outbox-Dead-Consumer";
/// The dead-letter entry's field saying why it was given up.
pub const DEAD_REASON: &str = "Outbox-Dead-Reason";
/// The dead-letter entry's field counting its deliveries.
pub const DEAD_DELIVERED: &str = "Outbox-Dead-Delivered";
/// The dead-letter entry's field saying how many of the entry's fields
/// were left out of the copy (only when some were).
pub const DEAD_FIELDS_LEFT_OUT: &str = "Outbox-Dead-Fields-Left-Out";

/// The most fields of an entry a dead-letter copy carries: a script takes
/// a bounded number of arguments, and an entry another program wrote may
/// have any number.
const MAX_COPIED_FIELDS: usize = 1000;

/// What every entry of one consumer shares.
pub(crate) struct Shared {
    pub(crate) commands: Connection,
    pub(crate) stream: String,
    pub(crate) group: String,
    pub(crate) consumer: String,
    pub(crate) dead_letter: String,
    pub(crate) claim_idle: Duration,
    pub(crate) name: String,
    pub(crate) dead_letter_script: Script,
}

/// One entry as the consumer read it.
pub(crate) struct Entry {
    pub(crate) shared: Arc<Shared>,
    pub(crate) id: String,
    pub(crate) fields: Fields,
    pub(crate) delivered: i64,
}

fn boxed(error: redis::RedisError) -> BoxError {
    Box::new(error)
}

#[async_trait]
impl Acknowledge for Entry {
    /// `XACK`: the group forgets the entry.
    async fn ack(&self) -> Result<(), BoxError> {
        let shared = &self.shared;
        let mut connection = shared.commands.get().await.map_err(boxed)?;
        redis::cmd("XACK")
            .arg(&shared.stream)
            .arg(&shared.group)
            .arg(&self.id)
            .query_async::<i64>(&mut connection)
            .await
            .map_err(boxed)?;
        Ok(())
    }

    /// Leaves the entry pending and marks it idle for `claim_idle - delay`,
    /// so that a claim takes it again after `delay` (at most `claim_idle`:
    /// a stream cannot hold an entry back longer). `JUSTID` leaves its
    /// delivery count alone; the claim that takes it again counts one.
    async fn nak(&self, delay: Duration) -> Result<(), BoxError> {
        let shared = &self.shared;
        let idle = shared.claim_idle.saturating_sub(delay);
        let mut connection = shared.commands.get().await.map_err(boxed)?;
        redis::cmd("XCLAIM")
            .arg(&shared.stream)
            .arg(&shared.group)
            .arg(&shared.consumer)
            .arg(0)
            .arg(&self.id)
            .arg("IDLE")
            .arg(u64::try_from(idle.as_millis()).unwrap_or(u64::MAX))
            .arg("JUSTID")
            .query_async::<Value>(&mut connection)
            .await
            .map_err(boxed)?;
        Ok(())
    }

    /// Adds a copy to the dead-letter stream with the reason, then acks
    /// the entry, in one script that stops before the ack if the copy
    /// fails: the entry is never acked without its copy.
    async fn give_up(&self, reason: &str, _message_id: Option<&str>) -> Result<(), BoxError> {
        let shared = &self.shared;
        let mut invocation = shared.dead_letter_script.key(&shared.dead_letter);
        invocation
            .key(&shared.stream)
            .arg(&shared.group)
            .arg(&self.id);
        for (name, value) in self.fields.iter().take(MAX_COPIED_FIELDS) {
            invocation.arg(name).arg(value);
        }
        if self.fields.len() > MAX_COPIED_FIELDS {
            invocation
                .arg(DEAD_FIELDS_LEFT_OUT)
                .arg(self.fields.len() - MAX_COPIED_FIELDS);
        }
        invocation
            .arg(DEAD_CONSUMER)
            .arg(&shared.name)
            .arg(DEAD_REASON)
            .arg(reason)
            .arg(DEAD_DELIVERED)
            .arg(self.delivered);
        let mut connection = shared.commands.get().await.map_err(boxed)?;
        invocation
            .invoke_async::<Value>(&mut connection)
            .await
            .map_err(boxed)?;
        Ok(())
    }
}

impl Received for Entry {
    fn delivered(&self) -> i64 {
        self.delivered
    }

    fn decode(&self) -> Result<Incoming, Undecodable> {
        fields::decode(&self.shared.stream, &self.id, &self.fields)
            .map(|incoming| incoming.with_delivered(self.delivered))
    }

    fn span(&self, consumer: &str) -> Span {
        tracing::info_span!("outbox.consume", consumer, stream = %self.shared.stream, entry = %self.id)
    }
}
