//! Placing orders on MySQL/MariaDB.

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_outbox_mysql::outbox::{Status, Store, Worker};
use diesel_outbox_testkit::{TestBackend, handler, mysql::MysqlTestDb};
use order_service::{ORDER_CREATED, Order, OrderCreated, OrderId, mysql, registry};

fn order(id: i64) -> Order {
    Order {
        id,
        customer: "ada".into(),
        total_cents: 1999,
    }
}

async fn orders_db(test: &str) -> MysqlTestDb {
    let db = MysqlTestDb::create(test).await.expect("test database");
    db.execute_sql(mysql::CREATE_ORDERS)
        .await
        .expect("orders table");
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placing_an_order_enqueues_and_sends_one_order_created() {
    let db = orders_db("mysql_place_order").await;
    let (mock, handle) = handler::recording();
    let worker =
        Worker::new(db.store().clone(), registry(mock).expect("registry")).expect("worker");
    let mut conn = db.connect().await.expect("connect");

    let placed = mysql::place_order(&worker, &mut conn, &order(42))
        .await
        .expect("order placed");
    handle.wait_for_successes(1).await;
    worker.wait_idle().await;

    assert_eq!(placed, OrderId(42));
    assert_eq!(db.count("orders").await.expect("count"), 1);
    assert_eq!(db.count_tasks().await.expect("count"), 1);
    let deliveries = handle.deliveries();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].task.kind, ORDER_CREATED);
    assert_eq!(
        deliveries[0].json::<OrderCreated>().expect("payload"),
        OrderCreated::of(&order(42))
    );
    let task = db.store().get(deliveries[0].id).await.expect("task");
    assert_eq!(task.status, Status::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_order_enqueues_nothing() {
    let db = orders_db("mysql_duplicate_order").await;
    db.execute_sql("INSERT INTO orders (id, customer, total_cents) VALUES (7, 'grace', 500)")
        .await
        .expect("existing order");
    let (mock, handle) = handler::recording();
    let worker =
        Worker::new(db.store().clone(), registry(mock).expect("registry")).expect("worker");
    let mut conn = db.connect().await.expect("connect");

    let error = mysql::place_order(&worker, &mut conn, &order(7))
        .await
        .expect_err("the id is taken");
    worker.wait_idle().await;

    assert!(
        matches!(
            error.downcast_ref::<DieselError>(),
            Some(DieselError::DatabaseError(
                DatabaseErrorKind::UniqueViolation,
                _
            ))
        ),
        "{error:#}"
    );
    assert_eq!(db.count("orders").await.expect("count"), 1);
    assert_eq!(db.count_tasks().await.expect("count"), 0);
    assert_eq!(worker.retry_pending(10).await.expect("round").claimed, 0);
    assert_eq!(handle.calls(), 0);
}
