use diesel_async::RunQueryDsl;
use diesel_outbox_postgres::outbox::{Registry, Status, Store, Task, Worker};
use diesel_outbox_postgres::transaction;
use diesel_outbox_testkit::{TestBackend, handler, postgres::PgTestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placing_an_order_sends_order_created() {
    let db = PgTestDb::create("placing_an_order")
        .await
        .expect("database");
    db.execute_sql("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
        .await
        .expect("orders");
    let (mock, handle) = handler::recording();
    let registry = Registry::builder()
        .handler("order.created", 1, mock)
        .build()
        .expect("registry");
    let worker = Worker::new(db.store().clone(), registry).expect("worker");

    let mut conn = db.connect().await.expect("connect");
    let id = transaction(&worker, &mut conn, async |mut tx| {
        diesel::sql_query("INSERT INTO orders (id) VALUES (42)")
            .execute(tx.conn())
            .await?;
        let id = tx
            .enqueue(Task::new("order.created", 1, r#"{"order":42}"#))
            .await?;
        anyhow::Ok(id)
    })
    .await
    .expect("committed");
    worker.wait_idle().await;

    assert_eq!(db.count("orders").await.expect("count"), 1);
    assert_eq!(db.count_tasks().await.expect("count"), 1);
    assert_eq!(handle.succeeded_ids(), [id]);
    assert_eq!(handle.deliveries()[0].payload(), br#"{"order":42}"#);
    assert_eq!(
        db.store().get(id).await.expect("task").status,
        Status::Succeeded
    );
}
