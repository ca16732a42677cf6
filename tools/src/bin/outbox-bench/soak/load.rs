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
use diesel_outbox_sql::{SqlBacked as _, WriteTurnGuard};
use tokio::{sync::Semaphore, time::MissedTickBehavior};
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
    /// With a bound: a permit per task enqueued and not yet handled that
    /// the producers may still add.
    room: Option<Semaphore>,
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
    /// A book whose producers running flat out stop adding tasks while
    /// `limit` of theirs wait for a handler, so that the backlog stays
    /// bounded and the rate measured is the one the relays keep up with.
    pub(crate) fn bounded(limit: usize) -> Self {
        Self {
            room: Some(Semaphore::new(limit)),
            ..Self::default()
        }
    }

    /// Waits until `count` more tasks fit under the bound, if there is one.
    async fn make_room(&self, count: u32) -> anyhow::Result<()> {
        if let Some(room) = &self.room {
            room.acquire_many(count).await?.forget();
        }
        Ok(())
    }

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
        if let Some(room) = &self.room {
            room.add_permits(1);
        }
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

/// Tasks per transaction when producing flat out.
const FLAT_OUT: u64 = 100;

/// Enqueues on `conn` until `stop`: about `rate` tasks per second, in one
/// transaction every 20 ms holding what the rate asks for since the last
/// (a tick missed, for a slow commit, is made up at once, so the offered
/// load stays what was asked while the database keeps up); or, without a
/// rate, transactions of 100 tasks back to back, as fast as the database
/// takes them and the book's bound lets them. Each transaction runs in the
/// store's turn to write, as the `transaction` helpers' do (on SQLite it
/// queues with the relays' claims and results; elsewhere there is none).
pub(crate) async fn produce<B: Raw>(
    store: B::Store,
    mut conn: B::Conn,
    book: Arc<Book>,
    rate: Option<f64>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let (mut owed, mut serial) = (0.0_f64, 0_u64);
    loop {
        let count = match rate {
            Some(rate) => {
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    _ = ticks.tick() => {}
                }
                owed += rate * TICK.as_secs_f64();
                let whole = owed.floor();
                owed -= whole;
                // Bounded only against a nonsense rate: a measured one
                // gives hundreds a tick.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let count = whole.clamp(0.0, 1e6) as u64;
                count
            }
            None if stop.is_cancelled() => return Ok(()),
            None => FLAT_OUT,
        };
        if count == 0 {
            continue;
        }
        if rate.is_none() {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                made = book.make_room(u32::try_from(count)?) => made?,
            }
        }
        let tasks: Vec<Task> = (0..count)
            .map(|n| Task::new(KIND, 1, format!("{{\"n\":{}}}", serial + n)))
            .collect();
        serial += count;
        let turn = WriteTurnGuard::take(store.turn()).await?;
        let ids = conn
            .transaction::<_, anyhow::Error, _>(async |tx| {
                Ok(store.enqueue_many(tx, tasks).await?)
            })
            .await?;
        drop(turn);
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
