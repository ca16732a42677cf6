//! Placing orders on PostgreSQL.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::{
    QueryDsl, QueryableByName,
    result::{DatabaseErrorKind, Error as DieselError},
    sql_types::{BigInt, Timestamptz},
};
use diesel_async::{AsyncConnection, RunQueryDsl};
use diesel_outbox_postgres::outbox::{
    Delivery, Error, Handler, HandlerError, RetryPolicy, Status, Store, Task, Worker, WorkerConfig,
    handler_fn,
};
use diesel_outbox_testkit::{TestBackend, handler, postgres::PgTestDb};
use order_service::{
    ORDER_CREATED, Order, OrderCreated, OrderId, postgres, registry, schema::orders,
    shipping_handler,
};

fn order(id: i64) -> Order {
    Order {
        id,
        customer: "ada".into(),
        total_cents: 1999,
    }
}

async fn orders_db(test: &str) -> PgTestDb {
    let db = PgTestDb::create(test).await.expect("test database");
    db.execute_sql(postgres::CREATE_ORDERS)
        .await
        .expect("orders table");
    db
}

#[derive(QueryableByName)]
struct PlacedAt {
    #[diesel(sql_type = Timestamptz)]
    placed_at: DateTime<Utc>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placing_an_order_enqueues_one_order_created_in_its_transaction() {
    let db = orders_db("place_order_enqueues_once").await;
    let (mock, handle) = handler::recording();
    let worker =
        Worker::new(db.store().clone(), registry(mock).expect("registry")).expect("worker");
    let mut conn = db.connect().await.expect("connect");

    let placed = postgres::place_order(&worker, &mut conn, &order(42))
        .await
        .expect("order placed");
    worker.wait_idle().await;

    assert_eq!(placed, OrderId(42));
    assert_eq!(db.count("orders").await.expect("count"), 1);
    assert_eq!(db.count_tasks().await.expect("count"), 1);
    let deliveries = handle.deliveries();
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    let delivery = &deliveries[0];
    assert_eq!(
        (delivery.task.kind.as_str(), delivery.task.version),
        (ORDER_CREATED, 1)
    );
    assert_eq!(
        delivery.json::<OrderCreated>().expect("payload"),
        OrderCreated::of(&order(42))
    );
    assert_eq!(
        delivery.headers().get("order-id").map(String::as_str),
        Some("42")
    );

    // now() is the start of the transaction: the order and its task share it.
    let task = db.store().get(delivery.id).await.expect("task");
    let order_row: PlacedAt = diesel::sql_query("SELECT placed_at FROM orders WHERE id = $1")
        .bind::<BigInt, _>(42)
        .get_result(&mut conn)
        .await
        .expect("placed_at");
    assert_eq!(order_row.placed_at, task.created_at);
    assert_eq!((task.status, task.attempts), (Status::Succeeded, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_order_enqueues_nothing() {
    let db = orders_db("duplicate_order_enqueues_nothing").await;
    db.execute_sql("INSERT INTO orders VALUES (7, 'grace', 500, now())")
        .await
        .expect("existing order");
    let (mock, handle) = handler::recording();
    let worker =
        Worker::new(db.store().clone(), registry(mock).expect("registry")).expect("worker");
    let mut conn = db.connect().await.expect("connect");

    let error = postgres::place_order(&worker, &mut conn, &order(7))
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
    assert_eq!(db.count_tasks().await.expect("count"), 0);
    let customer: String = orders::table
        .find(7)
        .select(orders::customer)
        .first(&mut conn)
        .await
        .expect("order 7");
    assert_eq!(customer, "grace", "the existing order was overwritten");
    assert_eq!(worker.retry_pending(10).await.expect("round").claimed, 0);
    assert_eq!(handle.calls(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_sees_the_order_committed() {
    let db = orders_db("handler_runs_after_commit").await;
    let (mock, handle) = handler::recording();
    // Before recording the delivery, look for the order on a connection of
    // our own: it is there only if the transaction committed first.
    let pool = db.store().pool().clone();
    let checked = handler_fn(move |delivery: Delivery| {
        let (mock, pool) = (mock.clone(), pool.clone());
        async move {
            let created: OrderCreated = delivery.json()?;
            let mut conn = pool.get().await?;
            let visible: i64 = orders::table
                .find(created.order_id.0)
                .count()
                .get_result(&mut *conn)
                .await?;
            if visible != 1 {
                return Err(HandlerError::permanent(anyhow::anyhow!(
                    "sent before the order committed"
                )));
            }
            mock.handle(delivery).await
        }
    });
    let worker =
        Worker::new(db.store().clone(), registry(checked).expect("registry")).expect("worker");
    let mut conn = db.connect().await.expect("connect");

    postgres::place_order(&worker, &mut conn, &order(9))
        .await
        .expect("order placed");
    tokio::time::timeout(Duration::from_secs(10), handle.wait_for_successes(1))
        .await
        .expect("the order was never delivered");
    worker.wait_idle().await;

    let deliveries = handle.deliveries();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(
        deliveries[0]
            .json::<OrderCreated>()
            .expect("payload")
            .order_id,
        OrderId(9)
    );
    assert_eq!(handle.succeeded_ids(), [deliveries[0].id]);
    let task = db.store().get(deliveries[0].id).await.expect("task");
    assert_eq!(
        (task.status, task.last_error.as_str()),
        (Status::Succeeded, "")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_send_is_delivered_by_the_next_round() {
    let db = orders_db("failed_send_is_retried").await;
    let (mock, handle) = handler::failing(1);
    let config = WorkerConfig::default()
        .retry(RetryPolicy::new(Duration::ZERO, Duration::ZERO, 0.0).expect("policy"));
    let worker = Worker::with_config(
        db.store().clone(),
        registry(mock).expect("registry"),
        config,
    )
    .expect("worker");
    let mut conn = db.connect().await.expect("connect");

    postgres::place_order(&worker, &mut conn, &order(5))
        .await
        .expect("order placed");
    worker.wait_idle().await;
    let id = handle.deliveries()[0].id;
    let after_send = db.store().get(id).await.expect("task");
    assert_eq!(after_send.status, Status::Available);
    assert!(
        after_send.last_error.contains(handler::INJECTED_FAILURE),
        "{}",
        after_send.last_error
    );

    let round = worker.retry_pending(10).await.expect("round");
    assert_eq!((round.claimed, round.succeeded), (1, 1));
    assert_eq!(handle.succeeded_ids(), [id]);
    let delivered = db.store().get(id).await.expect("task");
    assert_eq!(
        (delivered.status, delivered.attempts),
        (Status::Succeeded, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipping_hears_of_each_order_and_refuses_garbage() {
    let db = orders_db("shipping_handler").await;
    let (to_shipping, mut shipping) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::new(
        db.store().clone(),
        registry(shipping_handler(to_shipping)).expect("registry"),
    )
    .expect("worker");
    let mut conn = db.connect().await.expect("connect");

    postgres::place_order(&worker, &mut conn, &order(11))
        .await
        .expect("order placed");
    assert_eq!(shipping.recv().await, Some(OrderCreated::of(&order(11))));

    // A payload that is not an order fails for good, without retries.
    let store = db.store().clone();
    let garbage = conn
        .transaction::<_, anyhow::Error, _>(async |tx| {
            Ok(store
                .enqueue(tx, Task::new(ORDER_CREATED, 1, "not json"))
                .await?)
        })
        .await
        .expect("enqueue");
    let refused = worker.send(garbage).await;
    assert!(
        matches!(
            refused,
            Err(Error::Handler {
                will_retry: false,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        db.store().get(garbage).await.expect("task").status,
        Status::Failed
    );
    worker.wait_idle().await;
    assert!(shipping.try_recv().is_err(), "garbage reached shipping");
}
