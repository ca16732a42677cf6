//! The identifiers: a task's, and its outbox's.

use std::{fmt, sync::Arc};

/// Identity of a task: the database-generated id of its row.
///
/// Ids increase with insertion order on both backends, which is what ordering
/// keys and the fencing of completion writes rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(i64);

impl TaskId {
    /// Wraps a raw id read from the database.
    pub const fn new(id: i64) -> Self {
        Self(id)
    }

    /// The raw id, as stored in the `id` column.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<TaskId> for i64 {
    fn from(id: TaskId) -> Self {
        id.0
    }
}

/// Names one outbox apart from every other: the random id its migration
/// wrote once into the database (`outbox_meta`). With the task's id it makes
/// the message id a task carries to brokers and inboxes
/// ([`Delivery::message_id`](crate::Delivery::message_id)), so two services
/// never give two different tasks one message id.
///
/// ```
/// use diesel_outbox_core::OutboxId;
///
/// let outbox = OutboxId::new("4f0c9a1e6b2d4c7f8e9a0b1c2d3e4f50");
/// assert_eq!(outbox.as_str().len(), 32);
/// assert_eq!(outbox.to_string(), "4f0c9a1e6b2d4c7f8e9a0b1c2d3e4f50");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutboxId(Arc<str>);

impl OutboxId {
    /// The name that deliveries built by hand ([`Delivery::new`](crate::Delivery::new))
    /// carry: `outbox`, the message id prefix of earlier releases.
    pub const UNNAMED: &'static str = "outbox";

    /// Wraps an id read from the database.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OutboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
