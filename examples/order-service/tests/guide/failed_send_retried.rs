use diesel_outbox_postgres::outbox::{
    Registry, RetryPolicy, Status, Store, Task, Worker, WorkerConfig,
};
use diesel_outbox_postgres::transaction;
use diesel_outbox_testkit::{TestBackend, handler, postgres::PgTestDb};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_send_is_retried_by_the_next_round() {
    let db = PgTestDb::create("failed_send_is_retried")
        .await
        .expect("database");
    let (mock, handle) = handler::failing(1);
    let registry = Registry::builder()
        .handler("order.created", 1, mock)
        .build()
        .expect("registry");
    let config = WorkerConfig::default()
        .retry(RetryPolicy::new(Duration::ZERO, Duration::ZERO, 0.0).expect("policy"));
    let worker = Worker::with_config(db.store().clone(), registry, config).expect("worker");

    let mut conn = db.connect().await.expect("connect");
    let id = transaction(&worker, &mut conn, async |mut tx| {
        anyhow::Ok(tx.enqueue(Task::new("order.created", 1, "{}")).await?)
    })
    .await
    .expect("committed");
    worker.wait_idle().await;
    let failed_once = db.store().get(id).await.expect("task");
    assert_eq!(failed_once.status, Status::Available);
    assert!(failed_once.last_error.contains(handler::INJECTED_FAILURE));

    let round = worker.retry_pending(10).await.expect("round");
    assert_eq!((round.claimed, round.succeeded), (1, 1));
    assert_eq!(handle.succeeded_ids(), [id]);
}
