//! Choosing tasks for operators: [`TaskFilter`], and keyset pages of them
//! ([`PageRequest`], [`Page`]).

use chrono::{DateTime, Utc};

use crate::{Error, Listed, Record, Result, Status, TaskId, UnreadableRow};

/// Which tasks an operator means. Every criterion set must hold (they are
/// combined with AND); an empty filter matches every task.
///
/// ```
/// use chrono::{TimeDelta, Utc};
/// use diesel_outbox_core::{Status, TaskFilter};
///
/// let filter = TaskFilter::new()
///     .status(Status::Failed)
///     .kind("order.created")
///     .since(Utc::now() - TimeDelta::hours(1));
/// assert_eq!(filter.status, Some(Status::Failed));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskFilter {
    /// Only tasks in this status.
    pub status: Option<Status>,
    /// Only tasks of this kind (compared byte for byte).
    pub kind: Option<String>,
    /// Only tasks with this ordering key (compared byte for byte).
    pub ordering_key: Option<String>,
    /// Only tasks created at or after this instant (database clock).
    pub since: Option<DateTime<Utc>>,
}

impl TaskFilter {
    /// A filter that matches every task.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only tasks in `status`.
    pub fn status(mut self, status: Status) -> Self {
        self.status = Some(status);
        self
    }

    /// Only tasks of `kind`.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only tasks with ordering key `key`.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Only tasks created at or after `at`.
    pub fn since(mut self, at: DateTime<Utc>) -> Self {
        self.since = Some(at);
        self
    }
}

/// In which order a listing walks the ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Highest id first: the most recently enqueued tasks lead.
    #[default]
    NewestFirst,
    /// Lowest id first: the order the tasks were enqueued in.
    OldestFirst,
}

/// One page of a listing: at most `limit` tasks, starting after a cursor.
///
/// Pages are keyed by task id, not by offset: the next page starts after
/// the last id of this one ([`Page::next`]), so rows inserted or changed
/// meanwhile never shift a page or repeat a task, and reading page 1,000
/// costs what reading page 1 does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    after: Option<TaskId>,
    limit: u32,
    order: Order,
    payloads: bool,
}

impl PageRequest {
    /// The most tasks one page may hold: a page carries every task's payload
    /// (unless read [without](Self::without_payloads) them).
    pub const MAX_LIMIT: u32 = 1_000;

    /// The first page, newest first, of at most `limit` tasks;
    /// [`Error::InvalidArgument`] naming `limit` unless it is between 1 and
    /// [`MAX_LIMIT`](Self::MAX_LIMIT).
    pub fn first(limit: u32) -> Result<Self> {
        if !(1..=Self::MAX_LIMIT).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be between 1 and {}", Self::MAX_LIMIT),
            ));
        }
        Ok(Self {
            after: None,
            limit,
            order: Order::NewestFirst,
            payloads: true,
        })
    }

    /// Starts after task `id`, in this page's order: below it newest first,
    /// above it oldest first.
    pub fn after(mut self, id: TaskId) -> Self {
        self.after = Some(id);
        self
    }

    /// Walks the ids in `order`.
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Reads the tasks without their payloads: every record's
    /// `task.payload` comes back empty, every other field as stored. For
    /// reads that look at everything but the payloads (grouping failures,
    /// say), whose cost then does not grow with what the payloads weigh.
    /// An empty payload read this way says nothing of the stored one: a
    /// task enqueued with no payload looks the same.
    pub fn without_payloads(mut self) -> Self {
        self.payloads = false;
        self
    }

    /// Whether the page carries the tasks' payloads (the default).
    pub fn payloads(&self) -> bool {
        self.payloads
    }

    /// The cursor: the last id of the previous page.
    pub fn cursor(&self) -> Option<TaskId> {
        self.after
    }

    /// The most tasks this page holds.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The order of the ids.
    pub fn ordering(&self) -> Order {
        self.order
    }
}

/// Tasks of one [`PageRequest`], in its order.
///
/// A row that cannot be read as a task (written by another program, say)
/// does not hide the others: it is in [`unreadable`](Page::unreadable),
/// and [`rows`](Page::rows) shows every row in the page's order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Page {
    /// The tasks, ordered by id as requested.
    pub records: Vec<Record>,
    /// The rows of the page that cannot be read as tasks, in the same order.
    pub unreadable: Vec<UnreadableRow>,
    /// The cursor of the next page when this one was full, `None` when it
    /// was the last: pass it to [`PageRequest::after`].
    pub next: Option<TaskId>,
    order: Order,
}

impl Page {
    /// A page of `rows`, decoded or not, read for `request` in its order;
    /// for backends.
    pub fn new(
        rows: Vec<std::result::Result<Record, UnreadableRow>>,
        request: &PageRequest,
    ) -> Self {
        let full = rows.len() >= usize::try_from(request.limit).unwrap_or(usize::MAX);
        let next = full
            .then(|| {
                rows.last()
                    .map(|row| row.as_ref().map_or_else(|row| row.id, |r| r.id))
            })
            .flatten();
        let (mut records, mut unreadable) = (Vec::new(), Vec::new());
        for row in rows {
            match row {
                Ok(record) => records.push(record),
                Err(row) => unreadable.push(row),
            }
        }
        Self {
            records,
            unreadable,
            next,
            order: request.order,
        }
    }

    /// Every row of the page, readable or not, in the page's order.
    pub fn rows(&self) -> Vec<Listed> {
        let mut rows: Vec<Listed> = self
            .records
            .iter()
            .cloned()
            .map(|record| Listed::Task(Box::new(record)))
            .chain(self.unreadable.iter().cloned().map(Listed::Unreadable))
            .collect();
        match self.order {
            Order::NewestFirst => rows.sort_by_key(|row| std::cmp::Reverse(row.id())),
            Order::OldestFirst => rows.sort_by_key(Listed::id),
        }
        rows
    }

    /// Whether the page holds no row at all.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.unreadable.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_limit_must_be_within_bounds() {
        for limit in [0, PageRequest::MAX_LIMIT + 1] {
            let refused = PageRequest::first(limit);
            assert!(
                matches!(refused, Err(Error::InvalidArgument { field: "limit", .. })),
                "{refused:?}"
            );
        }
        assert!(PageRequest::first(PageRequest::MAX_LIMIT).is_ok());
    }

    #[test]
    fn only_a_full_page_has_a_next_one() -> Result<()> {
        let request = PageRequest::first(2)?;
        assert_eq!(Page::new(Vec::new(), &request).next, None);
        Ok(())
    }
}
