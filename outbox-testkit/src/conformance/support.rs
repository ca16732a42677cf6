//! Small helpers the scenarios share.

use std::time::Duration;

use anyhow::Context as _;
use diesel_async::AsyncConnection;
use diesel_outbox_core::{
    Handler, Record, Registry, RetryPolicy, Store, Task, TaskId, Worker, WorkerConfig,
};

use crate::TestBackend;

/// The kind the scenarios use unless they say otherwise.
pub const KIND: &str = "order.created";

/// A JSON task of [`KIND`], version 1.
pub fn task(n: usize) -> Task {
    Task::new(KIND, 1, format!("{{\"order\":{n}}}"))
}

/// Enqueues `tasks` in one committed transaction of their own, on a new
/// connection.
pub async fn enqueue_committed<B: TestBackend>(
    db: &B,
    tasks: Vec<Task>,
) -> anyhow::Result<Vec<TaskId>> {
    enqueue_committed_on(db, &mut db.connect().await?, tasks).await
}

/// Enqueues `tasks` in one committed transaction of their own, on `conn`.
pub async fn enqueue_committed_on<B: TestBackend>(
    db: &B,
    conn: &mut B::Conn,
    tasks: Vec<Task>,
) -> anyhow::Result<Vec<TaskId>> {
    let store = db.store();
    conn.transaction::<_, anyhow::Error, _>(async |tx| {
        let mut ids = Vec::with_capacity(tasks.len());
        for task in tasks {
            ids.push(store.enqueue(tx, task).await?);
        }
        Ok(ids)
    })
    .await
}

/// Enqueues one task in a committed transaction of its own, on a new
/// connection.
pub async fn enqueue_one<B: TestBackend>(db: &B, task: Task) -> anyhow::Result<TaskId> {
    enqueue_one_on(db, &mut db.connect().await?, task).await
}

/// Enqueues one task in a committed transaction of its own, on `conn`.
pub async fn enqueue_one_on<B: TestBackend>(
    db: &B,
    conn: &mut B::Conn,
    task: Task,
) -> anyhow::Result<TaskId> {
    enqueue_committed_on(db, conn, vec![task])
        .await?
        .pop()
        .context("enqueue returned no id")
}

/// A registry with `handler` for [`KIND`] version 1.
pub fn registry(handler: impl Handler) -> anyhow::Result<Registry> {
    Ok(Registry::builder().handler(KIND, 1, handler).build()?)
}

/// Settings for tests: a named owner, retries due at once, default timeouts.
pub fn config(owner: &str) -> WorkerConfig {
    WorkerConfig::default()
        .owner(owner)
        .retry(immediate_retry())
}

/// A retry policy whose retries are due at once, so a test can attempt again
/// without waiting.
pub fn immediate_retry() -> RetryPolicy {
    // Infallible for these constants; fall back to the default otherwise.
    RetryPolicy::new(Duration::ZERO, Duration::ZERO, 0.0).unwrap_or_default()
}

/// A worker over the test database's store.
pub fn worker<B: TestBackend>(
    db: &B,
    registry: Registry,
    config: WorkerConfig,
) -> anyhow::Result<Worker<B::Store>> {
    Ok(Worker::with_config(db.store().clone(), registry, config)?)
}

/// Reads task `id` back from the database.
pub async fn get<B: TestBackend>(db: &B, id: TaskId) -> anyhow::Result<Record> {
    Ok(db.store().get(id).await?)
}

/// Enqueues `tasks` with one `enqueue_many` in a committed transaction.
pub async fn enqueue_batch<B: TestBackend>(
    db: &B,
    tasks: Vec<Task>,
) -> anyhow::Result<Vec<TaskId>> {
    let store = db.store();
    let mut conn = db.connect().await?;
    conn.transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue_many(tx, tasks).await?))
        .await
}
