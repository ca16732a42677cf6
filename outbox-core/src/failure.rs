//! The failure hook: [`OnFailed`], called once for each task that fails for
//! good, and how a [`Worker`] runs it.

use std::{fmt, future::Future, panic::AssertUnwindSafe, pin::Pin, sync::Arc};

use futures_util::FutureExt;

use crate::{ClaimedTask, Record, Status, Store, TaskId, Worker, attempt::panic_text, telemetry};

type HookFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A callback run once for each task that fails for good (its status becomes
/// [`Status::Failed`](crate::Status::Failed)), with the task's record: to route dead letters
/// somewhere, or to alert. Register it with
/// [`RegistryBuilder::on_failed`](crate::RegistryBuilder::on_failed).
///
/// It runs in a tokio task of its own, after the write that failed the task
/// committed, and never for a write that rolled back or was fenced out. A
/// panic in it is caught and logged; delivery goes on either way, and the
/// call is not repeated. [semantics.md](https://github.com/outbox-rs/outbox/blob/main/docs/semantics.md) lists every way a task fails and
/// the few where the hook cannot be called.
#[derive(Clone)]
pub struct OnFailed(Arc<dyn Fn(Record) -> HookFuture + Send + Sync>);

impl OnFailed {
    /// Wraps an async closure taking the failed task's record.
    pub fn new<F, Fut>(hook: F) -> Self
    where
        F: Fn(Record) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self(Arc::new(move |record| Box::pin(hook(record))))
    }

    fn call(&self, record: Record) -> HookFuture {
        (self.0)(record)
    }
}

impl fmt::Debug for OnFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnFailed(..)")
    }
}

impl<S: Store> Worker<S> {
    /// Takes out of a claimed batch the tasks the claim found past their
    /// deadline (they come back already failed), counts them in
    /// `outbox_expired_total` and runs the failure hook for each, with its
    /// record read after the claim; returns how many. What stays in
    /// `records` is to be started or given back.
    pub(crate) fn set_aside_expired(&self, records: &mut Vec<ClaimedTask>) -> u64 {
        let expired: Vec<TaskId> = records
            .extract_if(.., |record| record.status == Status::Failed)
            .map(|record| record.id)
            .collect();
        if expired.is_empty() {
            return 0;
        }
        let count = expired.len() as u64;
        telemetry::expired(count);
        self.report_failed_ids(expired);
        count
    }

    /// Runs the failure hook, if any, for each of the tasks `ids` this
    /// worker has just failed, each in a task of its own, with its record
    /// read first.
    pub(crate) fn report_failed_ids(&self, ids: impl IntoIterator<Item = TaskId>) {
        let Some(hook) = self.registry().on_failed() else {
            return;
        };
        for id in ids {
            let hook = hook.clone();
            let store = self.store().clone();
            self.spawn_tracked(async move {
                match store.get(id).await {
                    Ok(record) => run_hook(&hook, record).await,
                    Err(error) => tracing::warn!(
                        task_id = id.get(),
                        error = %error.chain(),
                        "a task failed for good, but its record could not be read for the failure hook"
                    ),
                }
            });
        }
    }
}

/// Calls `hook`, catching a panic.
async fn run_hook(hook: &OnFailed, record: Record) {
    let id = record.id;
    if let Err(panic) = AssertUnwindSafe(hook.call(record)).catch_unwind().await {
        tracing::warn!(
            task_id = id.get(),
            panic = panic_text(&*panic),
            "the failure hook panicked"
        );
    }
}
