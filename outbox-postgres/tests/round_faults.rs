//! A `retry_pending` round claims its next batch while it writes the last
//! one's results; when that write fails, the batch claimed beside it is
//! given back instead of waiting out its lease.

use diesel_outbox_postgres::outbox::{Registry, Status, Store, Task, Worker, WorkerConfig};
use diesel_outbox_testkit::{
    TestBackend, conformance::support::enqueue_committed, handler, postgres::PgTestDb,
};

const KIND: &str = "order.created";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_claimed_beside_a_failed_write_is_given_back() {
    let db = PgTestDb::create("round_write_fault")
        .await
        .expect("test database");
    let tasks = (0..10)
        .map(|n| Task::new(KIND, 1, format!("{n}")))
        .collect();
    let ids = enqueue_committed(&db, tasks).await.expect("enqueue");
    // Every success the round writes fails as a serialization failure would
    // (retryable); claims and give-backs write other statuses and pass.
    db.execute_sql(
        "CREATE FUNCTION refuse_success() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN RAISE EXCEPTION 'refused by the test' USING ERRCODE = '40001'; END $$; \
         CREATE TRIGGER refuse_success BEFORE UPDATE ON outbox_tasks FOR EACH ROW \
         WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION refuse_success()",
    )
    .await
    .expect("trigger");
    let (mock, handle) = handler::recording();
    let registry = Registry::builder()
        .handler(KIND, 1, mock)
        .build()
        .expect("registry");
    let worker = Worker::with_config(
        db.store().clone(),
        registry,
        WorkerConfig::default().owner("faulted"),
    )
    .expect("worker");

    let error = worker
        .retry_pending(5)
        .await
        .expect_err("the write of the first batch fails");
    assert!(error.is_retryable(), "{error:?}");

    // The first batch ran; its results were never written, so its tasks stay
    // leased until the lease lapses and run again then.
    assert_eq!(handle.calls(), 5);
    for id in &ids[..5] {
        let record = db.store().get(*id).await.expect("get");
        assert_eq!(record.status, Status::Running, "task {id}");
        assert_eq!(record.runs(), 1);
    }
    // The second batch was claimed beside that write and never started: it
    // is claimable again at once, and the claim is not counted as a run.
    for id in &ids[5..] {
        let record = db.store().get(*id).await.expect("get");
        assert_eq!(record.status, Status::Available, "task {id}");
        assert_eq!((record.attempts, record.released), (1, 1), "task {id}");
        assert_eq!(record.runs(), 0);
        assert!(record.lease.is_none());
    }
}
