//! Producers: connections of their own committing orders and their tasks
//! at a steady pace, reconnecting after any error, and counting what the
//! commits answered.

use std::{
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use diesel_outbox_core::{CancellationToken, TaskId, Worker};
use tokio::time::MissedTickBehavior;

use super::{
    clock,
    db::{self, ChaosDb},
};

/// What the producers' commits answered.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    next_order: AtomicI64,
    /// `(order, task, µs)` of every commit that returned `Ok`.
    committed: Mutex<Vec<(i64, TaskId, u64)>>,
    /// `(order, error)` of every commit that returned an error.
    errors: Mutex<Vec<(i64, String)>>,
}

impl Tally {
    /// A tally whose first order is `after + 1`, so that producers counting
    /// apart never pick the same order id.
    pub(crate) fn starting_after(after: i64) -> Self {
        Self {
            next_order: AtomicI64::new(after),
            ..Self::default()
        }
    }

    /// The next order id.
    pub(crate) fn next_order(&self) -> i64 {
        self.next_order.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Commits that returned `Ok`: `(order, task, µs)`.
    pub(crate) fn committed(&self) -> Vec<(i64, TaskId, u64)> {
        self.committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Orders whose commit returned an error, with the first such error.
    pub(crate) fn errors(&self) -> Vec<(i64, String)> {
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn ok(&self, order: i64, task: TaskId) {
        self.committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((order, task, clock::now_us()));
    }

    fn error(&self, order: i64, error: &anyhow::Error) {
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((order, format!("{error:#}")));
    }
}

/// How the producers commit.
#[derive(Debug)]
pub(crate) enum Commit<'w, S> {
    /// Through the backend's `transaction` helper on this worker, which
    /// sends each task right after its commit.
    Helper(&'w Worker<S>),
    /// A plain transaction; relays deliver.
    Plain,
}

impl<S> Clone for Commit<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Commit<'_, S> {}

/// Runs `producers` connections committing one order per transaction,
/// `per_second` in all, until `stop`.
pub(crate) async fn run<B: ChaosDb>(
    db: &B,
    commit: Commit<'_, B::Store>,
    producers: usize,
    per_second: f64,
    tally: &Tally,
    stop: &CancellationToken,
) {
    let period = Duration::from_secs_f64(producers as f64 / per_second.max(0.001));
    let one = |_| async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut conn: Option<B::Conn> = None;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let Some(open) = conn.as_mut() else {
                // The server may be down: try again at the next tick.
                conn = db.connect().await.ok();
                continue;
            };
            let order = tally.next_order();
            let placed = match commit {
                Commit::Helper(worker) => B::place_order(worker, open, order).await,
                Commit::Plain => db::enqueue_order::<B>(db.store(), open, order, false).await,
            };
            match placed {
                Ok(task) => tally.ok(order, task),
                Err(error) => {
                    tally.error(order, &error);
                    conn = None;
                }
            }
        }
    };
    futures_util::future::join_all((0..producers).map(one)).await;
}
