//! `outbox_postgres::transaction`: business rows and tasks commit together,
//! and tasks are sent only after the commit.

use diesel::{QueryableByName, sql_types::BigInt};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use outbox_postgres::{
    outbox::{Registry, Status, Store, Task, Worker},
    transaction,
};
use outbox_testkit::{TestBackend, handler, postgres::PgTestDb};

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn orders(db: &PgTestDb) -> i64 {
    let mut conn = db.connect().await.expect("connect");
    diesel::sql_query("SELECT COUNT(*) AS n FROM orders")
        .get_result::<Count>(&mut conn)
        .await
        .expect("count orders")
        .n
}

async fn setup(
    test: &str,
) -> (
    PgTestDb,
    Worker<outbox_postgres::PgStore>,
    handler::HandlerHandle,
) {
    let db = PgTestDb::create(test).await.expect("test database");
    let mut conn = db.connect().await.expect("connect");
    conn.batch_execute("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
        .await
        .expect("create orders");
    let (mock, handle) = handler::recording();
    let registry = Registry::builder()
        .handler("order.created", 1, mock)
        .build()
        .expect("registry");
    let worker = Worker::new(db.store().clone(), registry).expect("worker");
    (db, worker, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_tasks_are_sent_after_commit() {
    let (db, worker, handle) = setup("tx_commit").await;
    let mut conn = db.connect().await.expect("connect");
    let id = transaction(&worker, &mut conn, async |mut tx| {
        diesel::sql_query("INSERT INTO orders (id) VALUES (42)")
            .execute(tx.conn())
            .await?;
        let id = tx
            .enqueue(Task::new("order.created", 1, "{\"order\":42}"))
            .await?;
        anyhow::Ok(id)
    })
    .await
    .expect("transaction");
    handle.wait_for_successes(1).await;
    assert_eq!(handle.succeeded_ids(), [id]);
    assert_eq!(orders(&db).await, 1);
    assert_eq!(
        db.store().get(id).await.expect("get").status,
        Status::Succeeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_body_writes_and_sends_nothing() {
    let (db, worker, handle) = setup("tx_rollback").await;
    let mut conn = db.connect().await.expect("connect");
    let result = transaction(&worker, &mut conn, async |mut tx| {
        diesel::sql_query("INSERT INTO orders (id) VALUES (7)")
            .execute(tx.conn())
            .await?;
        tx.enqueue(Task::new("order.created", 1, "{}")).await?;
        anyhow::bail!("payment declined")
    })
    .await;
    let error: anyhow::Result<()> = result;
    assert_eq!(
        error.expect_err("the body failed").to_string(),
        "payment declined"
    );
    assert_eq!(orders(&db).await, 0);
    assert_eq!(db.count_tasks().await.expect("count"), 0);
    // Nothing was handed to the worker: a round finds nothing either.
    assert_eq!(worker.retry_pending(10).await.expect("round").claimed, 0);
    assert_eq!(handle.calls(), 0);
}
