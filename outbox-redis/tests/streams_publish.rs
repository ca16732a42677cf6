//! Publishing to Streams: the entry's fields, a replay inside the window,
//! a foreign id, a batch, trimming, an unreachable server, settings refused;
//! and the same without a dedup window.

use diesel_outbox_postgres::outbox::BatchHandler as _;
use diesel_outbox_postgres::outbox::{
    Delivery, HandlerError, OutboxId, Status, Store, Task, TaskId,
};
use diesel_outbox_redis::{MESSAGE_ID, PAYLOAD, RedisError, StreamPublisher, dedup_key};
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb, redis::TestRedis};

use crate::support::{closed_url, enqueue, worker};

fn field<'a>(fields: &'a [(Vec<u8>, Vec<u8>)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n.as_slice() == name.as_bytes())
        .and_then(|(_, v)| std::str::from_utf8(v).ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_task_lands_once_with_its_fields() {
    let db = PgTestDb::create("redis_publish").await.expect("database");
    let redis = TestRedis::create("redis_publish").await.expect("redis");
    let stream = redis.name("orders");
    let publisher = StreamPublisher::builder(redis.url())
        .route("order.created", 1, &stream)
        .build()
        .expect("publisher");
    let worker = worker(&db, |r| publisher.register(r));
    let id = enqueue(
        &db,
        Task::new("order.created", 1, "{\"order\":42}")
            .header("correlation-id", "req-7f3a")
            .header(
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
    )
    .await;
    worker.send(id).await.expect("send");
    let entries = redis.entries(&stream).await.expect("entries");
    assert_eq!(entries.len(), 1);
    let fields = &entries[0].1;
    let outbox = worker.outbox_id().await.expect("outbox id");
    let message_id = format!("{outbox}:{id}");
    assert_eq!(field(fields, MESSAGE_ID), Some(message_id.as_str()));
    assert_eq!(
        field(fields, "Outbox-Task-Id"),
        Some(id.to_string().as_str())
    );
    assert_eq!(field(fields, "Outbox-Kind"), Some("order.created"));
    assert_eq!(field(fields, "Outbox-Version"), Some("1"));
    assert_eq!(field(fields, "Outbox-Attempt"), Some("1"));
    assert_eq!(field(fields, "Outbox-Source"), Some(outbox.as_str()));
    assert_eq!(field(fields, "correlation-id"), Some("req-7f3a"));
    assert!(field(fields, "traceparent").is_some_and(|t| t.starts_with("00-0af7")));
    assert_eq!(
        fields.last().map(|(n, v)| (n.as_slice(), v.as_slice())),
        Some((PAYLOAD.as_bytes(), &b"{\"order\":42}"[..]))
    );
    assert_eq!(
        db.store().get(id).await.expect("get").status,
        Status::Succeeded
    );
    // The message id is remembered for the window, in the stream's slot.
    let mut connection = redis.connection().await.expect("connection");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(dedup_key(&stream, &message_id))
        .query_async(&mut connection)
        .await
        .expect("pttl");
    assert!(ttl > 590_000 && ttl <= 600_000, "{ttl}");
}

fn delivery(outbox: &str, id: i64, payload: &str) -> Delivery {
    Delivery::new(
        TaskId::new(id),
        1,
        Task::new("order.created", 1, payload.to_owned()),
    )
    .in_outbox(OutboxId::new(outbox))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_inside_the_window_adds_nothing_and_a_foreign_id_fails_for_good() {
    let redis = TestRedis::create("redis_replay").await.expect("redis");
    let stream = redis.name("orders");
    let publisher = StreamPublisher::builder(redis.url())
        .route("order.created", 1, &stream)
        .build()
        .expect("publisher");
    let first = publisher
        .publish(&delivery("a1", 1, "{}"))
        .await
        .expect("first");
    assert!(!first.replay);
    // The same task again (a relay that crashed before its completion
    // write), a later attempt: nothing added, the first entry named.
    let mut again = delivery("a1", 1, "{}");
    again.attempt = 2;
    let replay = publisher.publish(&again).await.expect("replay");
    assert!(replay.replay);
    assert_eq!(replay.entry_id, first.entry_id);
    assert_eq!(redis.stream_len(&stream).await.expect("len"), 1);

    // Two publishers sharing an explicit prefix: the second service's task
    // 1 must not vanish as a "replay" of the first's.
    let shared = |url: &str| {
        StreamPublisher::builder(url)
            .route("order.created", 1, &stream)
            .message_id_prefix("orders")
            .build()
            .expect("publisher")
    };
    shared(redis.url())
        .publish(&delivery("a1", 1, "{}"))
        .await
        .expect("service a");
    let error = shared(redis.url())
        .publish(&delivery("b2", 1, "{}"))
        .await
        .expect_err("a foreign id must fail");
    assert!(error.is_permanent(), "{error}");
    assert!(
        error.to_string().contains("orders:1") && error.to_string().contains("another task"),
        "{error}"
    );
    assert_eq!(redis.stream_len(&stream).await.expect("len"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_lands_in_order_and_an_unrouted_delivery_fails_alone() {
    let db = PgTestDb::create("redis_batch").await.expect("database");
    let redis = TestRedis::create("redis_batch").await.expect("redis");
    let stream = redis.name("orders");
    let publisher = StreamPublisher::builder(redis.url())
        .route("order.created", 1, &stream)
        .max_len(1000)
        .build()
        .expect("publisher");
    let worker = worker(&db, |r| publisher.register(r));
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(
            enqueue(
                &db,
                Task::new("order.created", 1, format!("{{\"order\":{n}}}")),
            )
            .await,
        );
    }
    let report = worker.retry_pending(64).await.expect("round");
    assert_eq!(report.succeeded, 20, "{report:?}");
    let entries = redis.entries(&stream).await.expect("entries");
    let order: Vec<&str> = entries
        .iter()
        .map(|(_, f)| field(f, "Outbox-Task-Id").unwrap_or(""))
        .collect();
    let expected: Vec<String> = ids.iter().map(ToString::to_string).collect();
    assert_eq!(
        order,
        expected.iter().map(String::as_str).collect::<Vec<_>>()
    );

    an_unrouted_delivery_fails_alone(&publisher, 101).await;
    assert_eq!(redis.stream_len(&stream).await.expect("len"), 22);
}

/// One batch of three from task `first` on, the middle one of a kind with
/// no route: it alone fails, for good; the others are answered `Ok`.
async fn an_unrouted_delivery_fails_alone(publisher: &StreamPublisher, first: i64) {
    let mut unrouted = delivery("a1", first + 1, "{}");
    unrouted.task.kind = "order.paid".into();
    let answers = publisher
        .handle_batch(vec![
            delivery("a1", first, "{}"),
            unrouted,
            delivery("a1", first + 2, "{}"),
        ])
        .await;
    assert!(answers[0].is_ok() && answers[2].is_ok(), "{answers:?}");
    fails_for_want_of_a_route(&answers[1]);
}

/// Asserts `answer` is the permanent failure of a delivery whose kind has
/// no stream.
fn fails_for_want_of_a_route(answer: &Result<(), HandlerError>) {
    let error = answer.as_ref().expect_err("no route");
    assert!(
        error.is_permanent() && error.to_string().contains("no stream is routed"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_len_trims_the_stream_as_it_adds_with_a_window_or_without() {
    let redis = TestRedis::create("redis_trim").await.expect("redis");
    for (stream, windowed) in [("orders", true), ("plain", false)] {
        let stream = redis.name(stream);
        let builder = StreamPublisher::builder(redis.url())
            .route("order.created", 1, &stream)
            .max_len(10);
        let publisher = if windowed {
            builder
        } else {
            builder.without_dedup_window()
        }
        .build()
        .expect("publisher");
        for id in 1..=500 {
            publisher
                .publish(&delivery("a1", id, "{}"))
                .await
                .expect("publish");
        }
        let len = redis.stream_len(&stream).await.expect("len");
        // `~` trims whole macro nodes (100 entries by default), never below 10.
        assert!((10..=200).contains(&len), "{windowed}: {len}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_the_send_retryably_and_nothing_counts_as_sent() {
    let db = PgTestDb::create("redis_unreachable")
        .await
        .expect("database");
    let publisher = StreamPublisher::builder(closed_url())
        .route("order.created", 1, "orders")
        .build()
        .expect("publisher");
    let worker = worker(&db, |r| publisher.register(r));
    let id = enqueue(&db, Task::new("order.created", 1, "{}")).await;
    let started = std::time::Instant::now();
    let report = worker.retry_pending(8).await.expect("round");
    assert_eq!((report.succeeded, report.retried), (0, 1), "{report:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let record = db.store().get(id).await.expect("get");
    assert_ne!(record.status, Status::Succeeded);
    assert!(record.last_error.contains("Redis"), "{}", record.last_error);
}

#[test]
fn settings_that_cannot_work_are_refused_by_name() {
    let field = |result: Result<StreamPublisher, RedisError>| match result {
        Err(RedisError::Config { field, .. }) => field,
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let url = "redis://127.0.0.1:6379";
    assert_eq!(field(StreamPublisher::builder(url).build()), "routes");
    assert_eq!(
        field(
            StreamPublisher::builder("http://nowhere")
                .route("a", 1, "s")
                .build()
        ),
        "url"
    );
    assert_eq!(
        field(
            StreamPublisher::builder(url)
                .route("a", 1, "s")
                .dedup_window(std::time::Duration::from_millis(10))
                .build()
        ),
        "dedup_window"
    );
    // No window at all is a choice, not a window too short.
    assert!(
        StreamPublisher::builder(url)
            .route("a", 1, "s")
            .without_dedup_window()
            .build()
            .is_ok()
    );
    assert_eq!(
        field(
            StreamPublisher::builder(url)
                .route("a", 1, "s")
                .message_id_prefix("a b")
                .build()
        ),
        "message_id_prefix"
    );
    assert_eq!(
        field(
            StreamPublisher::builder(url)
                .route("a", 1, "s")
                .route("a", 1, "t")
                .build()
        ),
        "routes"
    );
    assert_eq!(
        field(
            StreamPublisher::builder(url)
                .route("a", 1, "s")
                .max_len(0)
                .build()
        ),
        "max_len"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_with_a_reserved_name_fails_for_good() {
    let redis = TestRedis::create("redis_reserved").await.expect("redis");
    let publisher = StreamPublisher::builder(redis.url())
        .route("order.created", 1, redis.name("orders"))
        .build()
        .expect("publisher");
    for name in ["payload", "Message_Id", "outbox-kind"] {
        let mut d = delivery("a1", 3, "{}");
        d.task.headers.insert(name.into(), "x".into());
        let error = publisher.publish(&d).await.expect_err("reserved");
        assert!(
            error.is_permanent() && error.to_string().contains(name),
            "{error}"
        );
    }
    assert_eq!(
        redis.stream_len(&redis.name("orders")).await.unwrap_or(0),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_redis_refuses_for_good_fails_the_task_for_good() {
    let redis = TestRedis::create("redis_wrongtype").await.expect("redis");
    let stream = redis.name("orders");
    let mut connection = redis.connection().await.expect("connection");
    let _: () = redis::cmd("SET")
        .arg(&stream)
        .arg("not a stream")
        .query_async(&mut connection)
        .await
        .expect("set");
    let publisher = StreamPublisher::builder(redis.url())
        .route("order.created", 1, &stream)
        .build()
        .expect("publisher");
    let error = publisher
        .publish(&delivery("a1", 1, "{}"))
        .await
        .expect_err("the key holds a string");
    assert!(
        error.is_permanent() && error.to_string().contains("WRONGTYPE"),
        "{error}"
    );
    // Nothing was remembered: once the key is fixed, the task goes out.
    let _: i64 = redis::cmd("DEL")
        .arg(&stream)
        .query_async(&mut connection)
        .await
        .expect("del");
    let added = publisher
        .publish(&delivery("a1", 1, "{}"))
        .await
        .expect("publish");
    assert!(!added.replay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_dedup_window_each_delivery_is_a_plain_add_and_a_replay_adds_again() {
    let redis = TestRedis::create("redis_plain").await.expect("redis");
    let stream = redis.name("orders");
    let publisher = StreamPublisher::builder(redis.url())
        .route("order.created", 1, &stream)
        .without_dedup_window()
        .build()
        .expect("publisher");
    let first = publisher
        .publish(&delivery("a1", 1, "{\"order\":1}"))
        .await
        .expect("first");
    let mut again = delivery("a1", 1, "{\"order\":1}");
    again.attempt = 2;
    let second = publisher.publish(&again).await.expect("replay");
    // The replay is a second entry with the same message id; nothing is
    // remembered for a window.
    assert!(!first.replay && !second.replay);
    assert_ne!(first.entry_id, second.entry_id);
    let entries = redis.entries(&stream).await.expect("entries");
    assert_eq!(entries.len(), 2);
    for (n, (id, fields)) in entries.iter().enumerate() {
        assert_eq!(
            id,
            if n == 0 {
                &first.entry_id
            } else {
                &second.entry_id
            }
        );
        assert_eq!(field(fields, MESSAGE_ID), Some("a1:1"));
        assert_eq!(field(fields, "Outbox-Kind"), Some("order.created"));
        assert_eq!(
            fields.last().map(|(n, v)| (n.as_slice(), v.as_slice())),
            Some((PAYLOAD.as_bytes(), &b"{\"order\":1}"[..]))
        );
    }
    assert_eq!(
        field(&entries[1].1, "Outbox-Attempt"),
        Some("2"),
        "the replay's own attempt"
    );
    let mut connection = redis.connection().await.expect("connection");
    let remembered: i64 = redis::cmd("EXISTS")
        .arg(dedup_key(&stream, "a1:1"))
        .query_async(&mut connection)
        .await
        .expect("exists");
    assert_eq!(remembered, 0);

    // A batch lands in order.
    an_unrouted_delivery_fails_alone(&publisher, 11).await;
    let entries = redis.entries(&stream).await.expect("entries");
    let ids: Vec<&str> = entries
        .iter()
        .map(|(_, f)| field(f, MESSAGE_ID).unwrap_or(""))
        .collect();
    assert_eq!(ids, ["a1:1", "a1:1", "a1:11", "a1:13"]);

    // A key of another type fails its add for good, behind a delivery that
    // failed before it was sent: each answer is its own delivery's.
    let wrong = redis.name("wrong");
    let _: () = redis::cmd("SET")
        .arg(&wrong)
        .arg("not a stream")
        .query_async(&mut connection)
        .await
        .expect("set");
    let mixed = StreamPublisher::builder(redis.url())
        .route("order.created", 1, &stream)
        .route("order.paid", 1, &wrong)
        .without_dedup_window()
        .build()
        .expect("publisher");
    let mut unrouted = delivery("a1", 21, "{}");
    unrouted.task.kind = "order.refunded".into();
    let mut paid = delivery("a1", 22, "{}");
    paid.task.kind = "order.paid".into();
    let answers = mixed
        .handle_batch(vec![unrouted, paid, delivery("a1", 23, "{}")])
        .await;
    fails_for_want_of_a_route(&answers[0]);
    let error = answers[1].as_ref().expect_err("the key holds a string");
    assert!(
        error.is_permanent() && error.to_string().contains("WRONGTYPE"),
        "{error}"
    );
    assert!(answers[2].is_ok(), "{answers:?}");
    assert_eq!(redis.stream_len(&stream).await.expect("len"), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_retryably_saying_so_once_with_a_window_or_without() {
    let with_window = StreamPublisher::builder(closed_url()).route("order.created", 1, "orders");
    let without = StreamPublisher::builder(closed_url())
        .route("order.created", 1, "orders")
        .without_dedup_window();
    for builder in [with_window, without] {
        let unreachable = builder.build().expect("publisher");
        let error = unreachable
            .publish(&delivery("a1", 1, "{}"))
            .await
            .expect_err("nothing listens");
        let text = error.to_string();
        assert!(!error.is_permanent(), "{text}");
        assert_eq!(text.matches("could not reach Redis").count(), 1, "{text}");
        // In a batch, a delivery that could not be prepared keeps its own
        // failure; the routed one fails as the connection did.
        let mut unrouted = delivery("a1", 2, "{}");
        unrouted.task.kind = "order.refunded".into();
        let answers = unreachable
            .handle_batch(vec![unrouted, delivery("a1", 3, "{}")])
            .await;
        fails_for_want_of_a_route(&answers[0]);
        let error = answers[1].as_ref().expect_err("nothing listens");
        assert!(
            !error.is_permanent() && error.to_string().contains("could not reach Redis"),
            "{error}"
        );
    }
}
