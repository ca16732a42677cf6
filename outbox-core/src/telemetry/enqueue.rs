//! What every backend's enqueue runs its insert in: the `outbox.enqueue`
//! span, the trace context written into the tasks' headers, and the count.

use std::future::Future;

use tracing::Instrument;

use super::{
    context::Capture,
    instruments::enqueued,
    spans::{enqueue_many_span, enqueue_span},
};
use crate::{Result, Task, TaskId};

/// Runs a backend's insert of `task` inside an `outbox.enqueue` span, after
/// writing the trace context into the task's headers (with the
/// `opentelemetry` feature and a propagator configured), and counts the task
/// in `outbox_enqueued_total` once the insert succeeded.
///
/// Every [`Store::enqueue`](crate::Store::enqueue) of this workspace's
/// backends is this call around its insert; a backend of your own should do
/// the same, so its tasks carry trace context too.
///
/// ```
/// use diesel_outbox_core::{Task, TaskId, telemetry::traced_enqueue};
///
/// # async fn demo() -> diesel_outbox_core::Result<()> {
/// let id = traced_enqueue(Task::new("order.created", 1, "{}"), async |task: Task| {
///     task.validate()?;
///     // ... insert it on the caller's connection ...
///     Ok(TaskId::new(1))
/// })
/// .await?;
/// assert_eq!(id, TaskId::new(1));
/// # Ok(())
/// # }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(demo()).unwrap();
/// ```
pub async fn traced_enqueue<F, Fut>(mut task: Task, insert: F) -> Result<TaskId>
where
    F: FnOnce(Task) -> Fut,
    Fut: Future<Output = Result<TaskId>>,
{
    let span = enqueue_span(&task);
    Capture::of(&span).inject(&mut task);
    let id = insert(task).instrument(span.clone()).await?;
    span.record("messaging.message.id", id.get());
    enqueued(1);
    Ok(id)
}

/// [`traced_enqueue`] for a batch: one `outbox.enqueue` span for the
/// statement, the same trace context written into every task, and the
/// tasks inserted counted.
pub async fn traced_enqueue_many<F, Fut>(mut tasks: Vec<Task>, insert: F) -> Result<Vec<TaskId>>
where
    F: FnOnce(Vec<Task>) -> Fut,
    Fut: Future<Output = Result<Vec<TaskId>>>,
{
    let span = enqueue_many_span(&tasks);
    let capture = Capture::of(&span);
    for task in &mut tasks {
        capture.inject(task);
    }
    let ids = insert(tasks).instrument(span).await?;
    enqueued(ids.len());
    Ok(ids)
}
