//! A key column holds raw bytes (`VARBINARY`), so another program can store a
//! key that is not UTF-8: that row fails on its own, naming the column, and
//! every other task is delivered.

use diesel_outbox_mysql::outbox::{
    Delivery, Error, HandlerError, Registry, Status, Store, Worker, handler_fn,
};
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_is_not_utf8_fails_its_row_alone() {
    let db = MysqlTestDb::create("unreadable_key")
        .await
        .expect("test database");
    db.execute_sql(
        "INSERT INTO outbox_tasks (kind, version, payload, headers, ordering_key, \
         next_attempt_at, last_error, created_at, updated_at) VALUES \
         ('order.created', 1, '{}', '{}', NULL, UTC_TIMESTAMP(6), '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)), \
         ('order.created', 1, '{}', '{}', X'FF00', UTC_TIMESTAMP(6), '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)), \
         ('order.created', 1, '{}', '{}', 'k', UTC_TIMESTAMP(6), '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
    )
    .await
    .expect("rows written by another program");
    let registry = Registry::builder()
        .handler(
            "order.created",
            1,
            handler_fn(|_: Delivery| async { Ok::<(), HandlerError>(()) }),
        )
        .build()
        .expect("registry");
    let worker = Worker::new(db.store().clone(), registry).expect("worker");
    let round = worker
        .retry_pending(10)
        .await
        .expect("the round is not stopped");
    assert_eq!(round.succeeded, 2, "{round:?}");

    let ids: Vec<_> = (1..=3)
        .map(diesel_outbox_mysql::outbox::TaskId::new)
        .collect();
    assert_eq!(
        db.store().get(ids[0]).await.expect("good row").status,
        Status::Succeeded
    );
    assert_eq!(
        db.store().get(ids[2]).await.expect("good row").status,
        Status::Succeeded
    );
    match db.store().get(ids[1]).await {
        Err(Error::Corrupt { field, .. }) => assert_eq!(field, "ordering_key"),
        other => panic!("reading the bad row gave {other:?}"),
    }
    let failed = db
        .count(
            "outbox_tasks WHERE id = 2 AND status = 'failed' \
             AND last_error LIKE 'stored row is unreadable: %ordering_key%'",
        )
        .await
        .expect("count");
    assert_eq!(failed, 1, "the bad row is failed with the reason");
}
