//! What a handler receives: [`Delivery`].

use serde::de::DeserializeOwned;

use crate::{Error, HandlerError, HandlerKey, Headers, Task, TaskId};

/// One attempt to deliver a task, as handed to a [`Handler`](crate::Handler).
///
/// Delivery is at least once: after a crash or a lost completion write the same
/// task may arrive again with a higher `attempt`. Consumers deduplicate by `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The task's id, stable across attempts.
    pub id: TaskId,
    /// This attempt's number, starting at 1.
    pub attempt: i64,
    /// The task as enqueued.
    pub task: Task,
}

impl Delivery {
    /// A delivery of `task` (stored as `id`) for attempt `attempt`.
    pub fn new(id: TaskId, attempt: i64, task: Task) -> Self {
        Self { id, attempt, task }
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
