//! Enqueue-then-send transactions: business rows and tasks commit together,
//! and tasks are sent only after the commit.

use anyhow::Context as _;
use diesel_async::SimpleAsyncConnection;
use diesel_outbox_core::{Status, Store, Task, TaskId, Worker};
use diesel_outbox_sql::transaction;
use tokio::task::JoinHandle;

use super::support::{KIND, config, registry, worker};
use crate::{TestBackend, handler};

const ORDERS: &str = "CREATE TABLE orders (id BIGINT PRIMARY KEY)";

/// A committed body's tasks are handled after the commit; its rows are there.
pub async fn transaction_sends_after_commit<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    db.execute_sql(ORDERS).await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let mut conn = db.connect().await?;
    let id = transaction(&worker, &mut conn, async |mut tx| {
        tx.conn()
            .batch_execute("INSERT INTO orders (id) VALUES (42)")
            .await?;
        let id = tx.enqueue(Task::new(KIND, 1, "{\"order\":42}")).await?;
        anyhow::Ok(id)
    })
    .await?;
    assert_eq!(db.count("orders").await?, 1);
    worker.wait_idle().await;
    assert_eq!(handle.succeeded_ids(), [id]);
    assert_eq!(db.store().get(id).await?.status, Status::Succeeded);
    Ok(())
}

/// A failing body rolls back its business rows and its tasks, and nothing is
/// sent.
pub async fn transaction_failure_writes_and_sends_nothing<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    db.execute_sql(ORDERS).await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let mut conn = db.connect().await?;
    let result: anyhow::Result<()> = transaction(&worker, &mut conn, async |mut tx| {
        tx.conn()
            .batch_execute("INSERT INTO orders (id) VALUES (7)")
            .await?;
        tx.enqueue(Task::new(KIND, 1, "{}")).await?;
        anyhow::bail!("payment declined")
    })
    .await;
    assert_eq!(
        result.err().map(|e| e.to_string()).as_deref(),
        Some("payment declined")
    );
    assert_eq!(db.count("orders").await?, 0);
    assert_eq!(db.count_tasks().await?, 0);
    // Nothing was handed to the worker, and a round finds nothing either.
    assert_eq!(worker.retry_pending(10).await?.claimed, 0);
    assert_eq!(handle.calls(), 0);
    Ok(())
}

/// Inserts order 5 and enqueues its task through the helper, on a worker and
/// a connection of its own: a future `tokio::spawn` accepts, as a web
/// framework's handler must be.
pub async fn place_order_in_a_task<B: TestBackend>(
    worker: Worker<B::Store>,
    mut conn: B::Conn,
) -> anyhow::Result<TaskId> {
    transaction(&worker, &mut conn, async |mut tx| {
        tx.conn()
            .batch_execute("INSERT INTO orders (id) VALUES (5)")
            .await?;
        let id = tx.enqueue(Task::new(KIND, 1, "{\"order\":5}")).await?;
        anyhow::Ok(id)
    })
    .await
}

/// The helper runs inside a spawned task: `spawn` hands
/// [`place_order_in_a_task`] to `tokio::spawn`. `conformance_tests!` writes
/// that call at the backend's own types, where the compiler checks that the
/// future is `Send` (a generic caller would not show the problem).
pub async fn transaction_runs_inside_a_spawned_task<B, F>(db: &B, spawn: F) -> anyhow::Result<()>
where
    B: TestBackend,
    F: FnOnce(Worker<B::Store>, B::Conn) -> JoinHandle<anyhow::Result<TaskId>>,
{
    db.execute_sql(ORDERS).await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = spawn(worker.clone(), db.connect().await?).await??;
    assert_eq!(db.count("orders").await?, 1);
    worker.wait_idle().await;
    assert_eq!(handle.succeeded_ids(), [id]);
    Ok(())
}

/// Enqueues one task of [`KIND`] through the helper, with nothing else in
/// its transaction, on a worker and a connection of its own: the future
/// [`the_transaction_helper_runs_in_a_spawned_task`] hands to `tokio::spawn`.
pub async fn enqueue_in_a_task<B: TestBackend>(
    worker: Worker<B::Store>,
    mut conn: B::Conn,
) -> anyhow::Result<TaskId> {
    transaction(&worker, &mut conn, async |mut tx| {
        let id = tx.enqueue(Task::new(KIND, 1, "{}")).await?;
        anyhow::Ok(id)
    })
    .await
}

/// The helper each backend crate exports as its own `transaction` runs
/// inside a spawned task, on a worker of default settings (`Worker::new`),
/// and its task is delivered: `spawn` hands [`enqueue_in_a_task`] to
/// `tokio::spawn`, which `conformance_tests!` writes at the backend's own
/// types, as for [`transaction_runs_inside_a_spawned_task`].
pub async fn the_transaction_helper_runs_in_a_spawned_task<B, F>(
    db: &B,
    spawn: F,
) -> anyhow::Result<()>
where
    B: TestBackend,
    F: FnOnce(Worker<B::Store>, B::Conn) -> JoinHandle<anyhow::Result<TaskId>>,
{
    let (mock, handle) = handler::recording();
    let worker = Worker::new(db.store().clone(), registry(mock)?)?;
    let id = spawn(worker.clone(), db.connect().await?)
        .await
        .context("the spawned task")?
        .context("the transaction")?;
    worker.wait_idle().await;
    assert_eq!(handle.succeeded_ids(), [id]);
    Ok(())
}
