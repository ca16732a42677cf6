//! This crate's own `transaction` helper runs inside `tokio::spawn`, as a
//! web framework's handler needs: its future is `Send` at the backend's
//! concrete types.

use diesel_outbox_postgres::{
    outbox::{Registry, Task, Worker},
    transaction,
};
use diesel_outbox_testkit::{TestBackend, handler, postgres::PgTestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_helper_runs_in_a_spawned_task() {
    let db = PgTestDb::create("spawned_transaction")
        .await
        .expect("test database");
    let (mock, handle) = handler::recording();
    let registry = Registry::builder()
        .handler("order.created", 1, mock)
        .build()
        .expect("registry");
    let worker = Worker::new(db.store().clone(), registry).expect("worker");
    let mut conn = db.connect().await.expect("connect");
    let spawned = tokio::spawn({
        let worker = worker.clone();
        async move {
            transaction(&worker, &mut conn, async |mut tx| {
                let id = tx.enqueue(Task::new("order.created", 1, "{}")).await?;
                anyhow::Ok(id)
            })
            .await
        }
    });
    let id = spawned
        .await
        .expect("the spawned task")
        .expect("the transaction");
    worker.wait_idle().await;
    assert_eq!(handle.succeeded_ids(), [id]);
}
