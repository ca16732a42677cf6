//! The soak's traffic: producers enqueueing at a steady rate, and the
//! handler the relays deliver to, which times each task from its commit
//! to its handler's start.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use diesel_async::AsyncConnection as _;
use diesel_outbox_core::{Delivery, Handler, HandlerError, Store as _, Task, TaskId};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::raw::Raw;

/// The kind the soak enqueues.
pub(crate) const KIND: &str = "bench.soak";

/// How often each producer commits.
const TICK: Duration = Duration::from_millis(20);

/// Commits and handler starts, matched by task id whichever comes first
/// (a relay may start a task before its producer noted the commit), and
/// the latencies and counts since they were last taken.
#[derive(Default)]
pub(crate) struct Book {
    inner: Mutex<Ledger>,
    enqueued: AtomicU64,
}

#[derive(Default)]
struct Ledger {
    committed: HashMap<TaskId, Instant>,
    started: HashMap<TaskId, Instant>,
    latencies: Vec<Duration>,
    handled: u64,
}

/// What a [`Book`] saw since it was last read.
pub(crate) struct Taken {
    pub(crate) enqueued: u64,
    pub(crate) handled: u64,
    pub(crate) latencies: Vec<Duration>,
}

impl Book {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `ids` committed at `at`.
    fn committed(&self, ids: &[TaskId], at: Instant) {
        self.enqueued.fetch_add(ids.len() as u64, Ordering::Relaxed);
        let mut ledger = self.ledger();
        for &id in ids {
            match ledger.started.remove(&id) {
                Some(_) => ledger.latencies.push(Duration::ZERO),
                None => {
                    ledger.committed.insert(id, at);
                }
            }
        }
    }

    /// The handler of `id` started at `at`.
    fn started(&self, id: TaskId, at: Instant) {
        let mut ledger = self.ledger();
        ledger.handled += 1;
        match ledger.committed.remove(&id) {
            Some(committed) => ledger
                .latencies
                .push(at.saturating_duration_since(committed)),
            None => {
                ledger.started.insert(id, at);
            }
        }
    }

    /// What happened since the last call.
    pub(crate) fn take(&self) -> Taken {
        let enqueued = self.enqueued.swap(0, Ordering::Relaxed);
        let mut ledger = self.ledger();
        Taken {
            enqueued,
            handled: std::mem::take(&mut ledger.handled),
            latencies: std::mem::take(&mut ledger.latencies),
        }
    }
}

/// The soak's handler: notes when each delivery starts, and does nothing
/// else.
#[derive(Clone)]
pub(crate) struct Noting(pub(crate) Arc<Book>);

#[async_trait]
impl Handler for Noting {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        self.0.started(delivery.id, Instant::now());
        Ok(())
    }
}

/// Enqueues about `rate` tasks per second on `conn` until `stop`: one transaction
/// every 20 ms, holding what the rate asks for since the last, so the rate
/// holds without a commit per task. A tick missed (a slow commit) is made
/// up at once, so the offered load stays what was asked while the
/// database keeps up.
pub(crate) async fn produce<B: Raw>(
    store: B::Store,
    mut conn: B::Conn,
    book: Arc<Book>,
    rate: f64,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let per_tick = rate * TICK.as_secs_f64();
    let (mut owed, mut serial) = (0.0_f64, 0_u64);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = ticks.tick() => {}
        }
        owed += per_tick;
        let whole = owed.floor();
        owed -= whole;
        // Bounded only against a nonsense rate: a drain rate gives hundreds.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let count = whole.clamp(0.0, 1e6) as u64;
        if count == 0 {
            continue;
        }
        let tasks: Vec<Task> = (0..count)
            .map(|n| Task::new(KIND, 1, format!("{{\"n\":{}}}", serial + n)))
            .collect();
        serial += count;
        let ids = conn
            .transaction::<_, anyhow::Error, _>(async |tx| {
                Ok(store.enqueue_many(tx, tasks).await?)
            })
            .await?;
        book.committed(&ids, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_seen_before_its_commit_still_counts_once() {
        let book = Book::default();
        let t0 = Instant::now();
        let (early, late) = (TaskId::new(1), TaskId::new(2));
        book.started(early, t0);
        book.committed(&[early, late], t0);
        book.started(late, t0 + Duration::from_millis(7));
        let taken = book.take();
        assert_eq!((taken.enqueued, taken.handled), (2, 2));
        let mut latencies = taken.latencies;
        latencies.sort();
        assert_eq!(latencies, [Duration::ZERO, Duration::from_millis(7)]);
        let again = book.take();
        assert_eq!(
            (again.enqueued, again.handled, again.latencies.len()),
            (0, 0, 0)
        );
    }
}
