//! Placing orders over HTTP: the axum route served on a local port and
//! called with real requests, against PostgreSQL.

use diesel_outbox_postgres::outbox::{Status, Store, TaskId, Worker};
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb};
use order_service::{
    OrderCreated, OrderId,
    http::{App, router},
    postgres, registry, shipping_handler,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// Serves the routes on 127.0.0.1 at a port of the system's choosing; the
/// server stops with the test's runtime.
async fn serve(app: App) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, router(app)).await });
    addr
}

/// Sends `POST path` with a JSON body over a new connection and returns the
/// status code and the body of the answer.
async fn post(addr: std::net::SocketAddr, path: &str, json: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{json}",
        json.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .expect("read the answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_posted_over_http_is_stored_and_announced_once() {
    let db = PgTestDb::create("http_places_an_order")
        .await
        .expect("test database");
    db.execute_sql(postgres::CREATE_ORDERS)
        .await
        .expect("orders table");
    let (to_shipping, mut shipping) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::new(
        db.store().clone(),
        registry(shipping_handler(to_shipping)).expect("registry"),
    )
    .expect("worker");
    let addr = serve(App::new(db.url(), 2, worker.clone()).expect("the routes' state")).await;

    let order = r#"{"id":42,"customer":"ada","total_cents":1999}"#;
    let (status, body) = post(addr, "/orders", order).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        serde_json::from_str::<OrderId>(&body).expect("an order id"),
        OrderId(42)
    );

    // The row and the task committed together, and the task was sent after
    // the commit without anyone calling send.
    let created = shipping.recv().await.expect("shipping hears of the order");
    assert_eq!(
        created,
        OrderCreated {
            order_id: OrderId(42),
            customer: "ada".into(),
            total_cents: 1999,
        }
    );
    assert_eq!(db.count("orders").await.expect("count"), 1);
    assert_eq!(db.count_tasks().await.expect("count"), 1);

    // The same order again: its insert fails, so the transaction rolls back
    // and nothing more is enqueued or sent.
    let (status, body) = post(addr, "/orders", order).await;
    assert_eq!(status, 409, "{body}");
    worker.wait_idle().await;
    assert_eq!(db.count("orders").await.expect("count"), 1);
    assert_eq!(db.count_tasks().await.expect("count"), 1);
    assert!(
        shipping.try_recv().is_err(),
        "a second announcement was sent"
    );
    let task = worker
        .store()
        .get(first_task(&db).await)
        .await
        .expect("task");
    assert_eq!(task.status, Status::Succeeded);
}

/// The id of the only task in the table.
async fn first_task(db: &PgTestDb) -> TaskId {
    let mut conn = db.connect().await.expect("connect");
    let ids = PgTestDb::task_ids(&mut conn, None).await.expect("task ids");
    assert_eq!(ids.len(), 1, "{ids:?}");
    ids[0]
}

/// With the database out of reach, an order answers `503` within the pool's
/// timeout, and the answer says nothing of the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_without_a_database_answers_503_without_its_words() {
    let db = PgTestDb::create("http_without_a_database")
        .await
        .expect("test database");
    let worker = Worker::new(
        db.store().clone(),
        registry(shipping_handler(tokio::sync::mpsc::unbounded_channel().0)).expect("registry"),
    )
    .expect("worker");
    // A port nothing listens on: bound, then released.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{closed}/nowhere");
    let addr = serve(App::new(&url, 2, worker).expect("the routes' state")).await;

    let order = r#"{"id":7,"customer":"ada","total_cents":100}"#;
    let (status, body) = post(addr, "/orders", order).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body, "try again later");
    assert_eq!(db.count_tasks().await.expect("count"), 0);
}
