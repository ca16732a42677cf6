//! A no-op handler that counts, and signals when a target is reached.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use async_trait::async_trait;
use diesel_outbox_core::{Delivery, Handler, HandlerError, TaskId};
use tokio::sync::Notify;

/// Counts deliveries; optionally records when each task's handler started.
#[derive(Clone, Default)]
pub(crate) struct Counting {
    count: Arc<AtomicUsize>,
    reached: Arc<Notify>,
    target: Arc<AtomicUsize>,
    starts: Option<Arc<Mutex<HashMap<TaskId, Instant>>>>,
}

impl Counting {
    /// A counter that also records handler start times.
    pub(crate) fn timing() -> Self {
        Self {
            starts: Some(Arc::default()),
            ..Self::default()
        }
    }

    /// Waits until `n` deliveries were counted.
    pub(crate) async fn wait_for(&self, n: usize) {
        self.target.store(n, Ordering::SeqCst);
        loop {
            let notified = self.reached.notified();
            if self.count.load(Ordering::SeqCst) >= n {
                return;
            }
            notified.await;
        }
    }

    /// Counts a delivery of task `id` (handled, or started when timing).
    pub(crate) fn count(&self, id: TaskId) {
        if let Some(starts) = &self.starts {
            starts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, Instant::now());
        }
        let count = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        if count >= self.target.load(Ordering::SeqCst) {
            self.reached.notify_waiters();
        }
    }

    /// When each task's handler started.
    pub(crate) fn starts(&self) -> HashMap<TaskId, Instant> {
        self.starts
            .as_ref()
            .map(|starts| {
                starts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
            })
            .unwrap_or_default()
    }
}

#[async_trait]
impl Handler for Counting {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        self.count(delivery.id);
        Ok(())
    }
}
