//! What a handler receives: [`Delivery`].

use serde::de::DeserializeOwned;

use crate::{Error, HandlerError, HandlerKey, Headers, OutboxId, Task, TaskId};

/// One attempt to deliver a task, as handed to a [`Handler`](crate::Handler).
///
/// Delivery is at least once: after a crash or a lost completion write the same
/// task may arrive again with a higher `attempt`. Consumers deduplicate by
/// [`message_id`](Delivery::message_id), which names the task in its outbox
/// and so stays unique when several services publish to one place.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The task's id, stable across attempts.
    pub id: TaskId,
    /// This attempt's number, starting at 1.
    pub attempt: i64,
    /// The task as enqueued.
    pub task: Task,
    /// The outbox the task is stored in.
    pub outbox: OutboxId,
}

impl Delivery {
    /// A delivery of `task` (stored as `id`) for attempt `attempt`, in no
    /// outbox in particular ([`OutboxId::UNNAMED`]): for tests of a
    /// handler. The worker's deliveries name their outbox.
    pub fn new(id: TaskId, attempt: i64, task: Task) -> Self {
        Self::of_outbox(id, attempt, task, OutboxId::new(OutboxId::UNNAMED))
    }

    /// A delivery of `task` (stored as `id` in `outbox`) for attempt
    /// `attempt`: what the worker hands a handler, built without naming
    /// an outbox first.
    pub(crate) fn of_outbox(id: TaskId, attempt: i64, task: Task, outbox: OutboxId) -> Self {
        Self {
            id,
            attempt,
            task,
            outbox,
        }
    }

    /// The same delivery, of a task stored in `outbox`.
    pub fn in_outbox(mut self, outbox: OutboxId) -> Self {
        self.outbox = outbox;
        self
    }

    /// The task's message id, `<outbox id>:<task id>`: stable across
    /// attempts and replays, and unique across outboxes, so a broker's
    /// duplicate detection (JetStream's `Nats-Msg-Id`, say) or a consumer's
    /// inbox can key on it. At most 52 bytes.
    ///
    /// ```
    /// use diesel_outbox_core::{Delivery, OutboxId, Task, TaskId};
    ///
    /// let delivery = Delivery::new(TaskId::new(42), 1, Task::new("order.created", 1, "{}"))
    ///     .in_outbox(OutboxId::new("4f0c9a1e6b2d4c7f8e9a0b1c2d3e4f50"));
    /// assert_eq!(delivery.message_id(), "4f0c9a1e6b2d4c7f8e9a0b1c2d3e4f50:42");
    /// ```
    pub fn message_id(&self) -> String {
        format!("{}:{}", self.outbox, self.id)
    }

    /// The message id a publisher gives this delivery: its own
    /// [message id](Self::message_id), or `<prefix>:<task id>` with an
    /// explicit prefix (which the publisher checked with
    /// [`check_message_id_prefix`](crate::wire::check_message_id_prefix)).
    pub fn message_id_with(&self, prefix: Option<&str>) -> String {
        match prefix {
            Some(prefix) => format!("{prefix}:{}", self.id),
            None => self.message_id(),
        }
    }

    /// The kind and version that selected the handler.
    pub fn key(&self) -> HandlerKey {
        HandlerKey::new(self.task.kind.clone(), self.task.version)
    }

    /// The headers enqueued with the task.
    pub fn headers(&self) -> &Headers {
        &self.task.headers
    }

    /// The raw payload.
    pub fn payload(&self) -> &[u8] {
        &self.task.payload
    }

    /// Decodes a JSON payload (the counterpart of [`Task::json`]).
    ///
    /// A payload that does not decode is a permanent failure: no retry can
    /// change it. So `delivery.json()?` in a handler fails the task for good.
    ///
    /// ```
    /// use diesel_outbox_core::{Delivery, Task, TaskId};
    ///
    /// let task = Task::json("order.created", 1, &serde_json::json!({ "order": 42 }))?;
    /// let delivery = Delivery::new(TaskId::new(7), 1, task);
    /// let value: serde_json::Value = delivery.json().expect("valid JSON");
    /// assert_eq!(value["order"], 42);
    ///
    /// let garbage = Delivery::new(TaskId::new(8), 1, Task::new("order.created", 1, "{"));
    /// let error = garbage.json::<serde_json::Value>().unwrap_err();
    /// assert!(error.is_permanent());
    /// # Ok::<(), diesel_outbox_core::Error>(())
    /// ```
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        serde_json::from_slice(&self.task.payload).map_err(|e| {
            HandlerError::permanent(Error::Corrupt {
                id: self.id,
                field: "payload",
                reason: e.to_string(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_replaces_the_outbox_id_in_the_message_id() {
        let delivery = Delivery::new(TaskId::new(42), 1, Task::new("k", 1, "{}"))
            .in_outbox(OutboxId::new("3f9c"));
        assert_eq!(delivery.message_id_with(None), "3f9c:42");
        assert_eq!(delivery.message_id_with(Some("orders")), "orders:42");
    }
}
