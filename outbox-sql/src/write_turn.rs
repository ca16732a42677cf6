//! [`WriteTurn`]: the queue a process's writes join, in arrival order, on a
//! database with one writer at a time (SQLite), and how long one waits in
//! it before giving up.

use std::{sync::Arc, time::Duration};

use diesel_outbox_core::{DatabaseErrorKind, Error, Result};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// A process's turn to write, shared by the clones of one store: writers
/// queue for it in the order they arrive and hold it while they write.
///
/// Without the queue, SQLite's writers meet only at the database's lock,
/// whose busy handler retries on a timer that grows to 100 ms: a writer
/// that keeps missing the lock waits far longer than the others, and the
/// polling sleeps hold everyone up. With it, one writer of the process at a
/// time asks for the lock, and waits for it only while a writer outside
/// the queue holds it (another process, or a transaction of this one that
/// did not take the turn).
///
/// A wait in the queue is bounded like a wait for the database's lock:
/// past [`wait`](Self::wait), [`take`](Self::take) fails with a retryable
/// [`LockTimeout`](DatabaseErrorKind::LockTimeout). So a write that can
/// never have its turn (a store write called inside a transaction that
/// holds it) fails instead of waiting for ever.
#[derive(Debug, Clone)]
pub struct WriteTurn {
    queue: Arc<Mutex<()>>,
    wait: Duration,
}

impl WriteTurn {
    /// A turn whose waits last at most `wait`.
    pub fn new(wait: Duration) -> Self {
        Self {
            queue: Arc::default(),
            wait,
        }
    }

    /// The longest a writer waits for its turn.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Waits for this process's turn to write and holds it until the guard
    /// is dropped; fails with a retryable [`Error::Database`] of kind
    /// [`LockTimeout`](DatabaseErrorKind::LockTimeout) when the turn did not
    /// come within [`wait`](Self::wait). Dropped while it waits, the future
    /// leaves the queue.
    ///
    /// ```
    /// use std::time::Duration;
    /// use diesel_outbox_core::DatabaseErrorKind;
    /// use diesel_outbox_sql::WriteTurn;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> diesel_outbox_core::Result<()> {
    /// let turn = WriteTurn::new(Duration::from_millis(20));
    /// let held = turn.take().await?;
    /// let error = turn.take().await.expect_err("the turn is held");
    /// assert_eq!(error.database_kind(), Some(DatabaseErrorKind::LockTimeout));
    /// assert!(error.is_retryable());
    /// drop(held);
    /// let _again = turn.take().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn take(&self) -> Result<WriteTurnGuard> {
        self.queue().await.map_err(|late| {
            Error::database_with(DatabaseErrorKind::LockTimeout, None, late.to_string())
        })
    }

    /// [`take`](Self::take) for a transaction whose errors are diesel's
    /// (the `transaction` helpers): a turn that did not come fails as
    /// SQLite's lock does past its busy timeout, `database is locked`,
    /// which the backend's classification reads as a retryable
    /// `LockTimeout` (`SQLITE_BUSY`).
    pub(crate) async fn take_for_diesel(
        turn: Option<&Self>,
    ) -> std::result::Result<WriteTurnGuard, diesel::result::Error> {
        let Some(turn) = turn else {
            return Ok(WriteTurnGuard(None));
        };
        turn.queue().await.map_err(|late| {
            diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::Unknown,
                Box::new(format!("database is locked: {late}")),
            )
        })
    }

    async fn queue(&self) -> std::result::Result<WriteTurnGuard, Late> {
        tokio::time::timeout(self.wait, Arc::clone(&self.queue).lock_owned())
            .await
            .map(|guard| WriteTurnGuard(Some(guard)))
            .map_err(|_| Late(self.wait))
    }
}

/// A turn that did not come within its bound.
struct Late(Duration);

impl std::fmt::Display for Late {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "this process's turn to write did not come within {} ms \
             (other writes of the process held it that long)",
            self.0.as_millis()
        )
    }
}

/// This process's turn to write, held until dropped; holds nothing on a
/// backend whose writers need no turn (PostgreSQL, MySQL/MariaDB).
#[derive(Debug)]
#[must_use = "the turn ends when the guard is dropped"]
pub struct WriteTurnGuard(Option<OwnedMutexGuard<()>>);

impl WriteTurnGuard {
    /// The turn of `turn`, taken, or nothing when there is none to take.
    pub async fn take(turn: Option<&WriteTurn>) -> Result<Self> {
        match turn {
            Some(turn) => turn.take().await,
            None => Ok(Self(None)),
        }
    }

    /// Whether the guard holds a turn.
    pub fn holds(&self) -> bool {
        self.0.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn writers_have_their_turns_in_the_order_they_came() {
        let turn = WriteTurn::new(Duration::from_secs(5));
        let first = turn.take().await.expect("free");
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for n in 0..3 {
            let (turn, order) = (turn.clone(), Arc::clone(&order));
            waiting.push(tokio::spawn(async move {
                let _held = turn.take().await.expect("its turn");
                order.lock().expect("order").push(n);
            }));
            // Each writer joins the queue before the next one starts.
            tokio::task::yield_now().await;
        }
        drop(first);
        for writer in waiting {
            writer.await.expect("writer");
        }
        assert_eq!(*order.lock().expect("order"), [0, 1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_past_the_bound_is_a_retryable_lock_timeout() {
        let turn = WriteTurn::new(Duration::from_secs(5));
        let held = turn.take().await.expect("free");
        let started = tokio::time::Instant::now();
        let error = turn.take().await.expect_err("held");
        assert!(started.elapsed() >= Duration::from_secs(5));
        assert_eq!(error.database_kind(), Some(DatabaseErrorKind::LockTimeout));
        assert!(error.is_retryable());
        assert!(
            error.chain().contains("within 5000 ms"),
            "{}",
            error.chain()
        );
        drop(held);
        assert!(turn.take().await.expect("free again").holds());
    }

    #[tokio::test(start_paused = true)]
    async fn a_helper_waits_as_long_and_reads_as_sqlites_own_busy_lock() {
        let turn = WriteTurn::new(Duration::from_secs(5));
        let _held = turn.take().await.expect("free");
        let error = WriteTurn::take_for_diesel(Some(&turn))
            .await
            .expect_err("held");
        let classified = crate::sqlite_error(error);
        assert_eq!(
            classified.database_kind(),
            Some(DatabaseErrorKind::LockTimeout)
        );
        assert_eq!(classified.database_code(), Some("SQLITE_BUSY"));
        assert!(
            classified.chain().contains("turn to write did not come"),
            "{}",
            classified.chain()
        );
    }

    #[tokio::test]
    async fn no_turn_holds_nothing() {
        assert!(
            WriteTurn::take_for_diesel(None)
                .await
                .is_ok_and(|guard| !guard.holds())
        );
        assert!(!WriteTurnGuard::take(None).await.expect("nothing").holds());
    }
}
