//! The task identifier.

use std::fmt;

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
