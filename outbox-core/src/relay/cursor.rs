//! Where a relay's next claim starts while a backlog lasts.

use std::time::Duration;

use tokio::time::Instant;

use crate::{ClaimedTask, TaskId};

/// A claim that came back full continues after the last id it took, so
/// under a backlog each claim reads a short range of the index of available
/// tasks instead of walking, from the lowest id, past the entries that the
/// claims before it left behind (on PostgreSQL they stay in the index until
/// vacuum). After a claim that came back short or failed, and once
/// `restart` has passed since the first claim of the pass, the next claim
/// starts again from the lowest id (the relay claims again at once after a
/// short claim that started from the cursor): a task made available below
/// the cursor meanwhile (a retry due, a lapsed lease rescued, a claim given
/// back, the next task of an ordering key) waits at most `restart` for it.
#[derive(Debug)]
pub(super) struct Cursor {
    after: Option<TaskId>,
    /// When the pass from the lowest id began.
    since: Option<Instant>,
    restart: Duration,
}

impl Cursor {
    /// A cursor that starts again from the lowest id at least every `restart`.
    pub(super) fn new(restart: Duration) -> Self {
        Self {
            after: None,
            since: None,
            restart,
        }
    }

    /// The id a claim starting at `now` takes tasks after; `None`: from the lowest.
    pub(super) fn next(&mut self, now: Instant) -> Option<TaskId> {
        let since = *self.since.get_or_insert(now);
        if now >= super::later(since, self.restart) {
            self.after = None;
            self.since = Some(now);
        }
        self.after
    }

    /// After a claim: continue after its last id when it came back `full`,
    /// else start again from the lowest.
    pub(super) fn claimed(&mut self, records: &[ClaimedTask], full: bool) {
        match records.iter().map(|record| record.id).max() {
            Some(last) if full => self.after = Some(last),
            _ => self.restart(),
        }
    }

    /// The next claim starts from the lowest id.
    pub(super) fn restart(&mut self) {
        self.after = None;
        self.since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_after_its_period_and_after_a_short_claim() {
        let t0 = Instant::now();
        let mut cursor = Cursor::new(Duration::from_secs(1));
        assert_eq!(cursor.next(t0), None);
        // A full claim: the next continues after its last id.
        cursor.claimed(&[record(40), record(100), record(70)], true);
        assert_eq!(
            cursor.next(t0 + Duration::from_millis(999)),
            Some(TaskId::new(100))
        );
        // Its period passed: from the lowest id, and a new period begins.
        assert_eq!(cursor.next(t0 + Duration::from_secs(1)), None);
        cursor.claimed(&[record(200)], true);
        assert_eq!(
            cursor.next(t0 + Duration::from_millis(1500)),
            Some(TaskId::new(200))
        );
        // A short claim: from the lowest id.
        cursor.claimed(&[record(250)], false);
        assert_eq!(cursor.next(t0 + Duration::from_millis(1600)), None);
        // An empty or failed claim: from the lowest id.
        cursor.claimed(&[record(300)], true);
        cursor.restart();
        assert_eq!(cursor.next(t0 + Duration::from_millis(1700)), None);
    }

    fn record(id: i64) -> ClaimedTask {
        let now = chrono::Utc::now();
        ClaimedTask {
            id: TaskId::new(id),
            task: crate::Task::new("k", 1, Vec::new()),
            status: crate::Status::Running,
            attempts: 1,
            released: 0,
            created_at: now,
            claimed_at: now,
        }
    }
}
