//! The Asynq publisher: what it writes is dequeued exactly as an Asynq
//! server does it, and every field and key checked.

use std::time::Duration;

use diesel_outbox_postgres::outbox::{Delivery, OutboxId, Status, Store, Task, TaskId};
use diesel_outbox_redis::{
    AsynqPublisher, Payload,
    asynq::{Envelope, TaskMessage, layout},
};
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb, redis::TestRedis};
use prost::Message as _;
use redis::aio::MultiplexedConnection;

use crate::support::{enqueue, worker};

/// Asynq's dequeue, step by step as its server runs it for one queue: if
/// the queue is not paused, move the rightmost pending id to `active`, mark
/// its hash `active`, drop `pending_since`, lease it, and read `msg`.
async fn dequeue(
    connection: &mut MultiplexedConnection,
    queue: &str,
) -> anyhow::Result<Option<TaskMessage>> {
    let script = redis::Script::new(
        r"
        if redis.call('EXISTS', KEYS[2]) == 0 then
          local id = redis.call('RPOPLPUSH', KEYS[1], KEYS[3])
          if id then
            local key = ARGV[2] .. id
            redis.call('HSET', key, 'state', 'active')
            redis.call('HDEL', key, 'pending_since')
            redis.call('ZADD', KEYS[4], ARGV[1], id)
            return redis.call('HGET', key, 'msg')
          end
        end
        return nil",
    );
    let lease = chrono::Utc::now().timestamp() + 30;
    let msg: Option<Vec<u8>> = script
        .key(layout::pending_key(queue))
        .key(layout::paused_key(queue))
        .key(layout::active_key(queue))
        .key(layout::lease_key(queue))
        .arg(lease)
        .arg(layout::task_key_prefix(queue))
        .invoke_async(connection)
        .await?;
    Ok(match msg {
        Some(bytes) => Some(TaskMessage::decode(bytes.as_slice())?),
        None => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_written_in_asynqs_layout_and_dequeued_as_its_server_does() -> anyhow::Result<()>
{
    let db = PgTestDb::create("asynq_layout").await?;
    let redis = TestRedis::create("asynq_layout").await?;
    let queue = redis.name("critical");
    let publisher = AsynqPublisher::builder(redis.url(), &queue)
        .task_type("order.created", 1, "outbox:deliver")
        .timeout(Duration::from_secs(120))
        .build()?;
    let worker = worker(&db, |r| publisher.register(r));
    let expires = chrono::Utc::now() + chrono::Duration::hours(1);
    let id = enqueue(
        &db,
        Task::new("order.created", 1, "{\"order\":42}")
            .header(
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            )
            .ordering_key("customer-7")
            .max_attempts(4)
            .expires_at(expires),
    )
    .await;
    let before = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0);
    worker.send(id).await?;
    assert_eq!(db.store().get(id).await?.status, Status::Succeeded);
    let outbox = worker.outbox_id().await?;
    let task_id = format!("{outbox}:{id}");

    let mut connection = redis.connection().await?;
    // Before the dequeue: the hash, the pending list and the queue set.
    let key = layout::task_key(&queue, &task_id);
    assert_eq!(key, format!("asynq:{{{queue}}}:t:{task_id}"));
    let (state, since): (String, i64) = redis::cmd("HMGET")
        .arg(&key)
        .arg("state")
        .arg("pending_since")
        .query_async::<(String, i64)>(&mut connection)
        .await?;
    assert_eq!(state, "pending");
    assert!(
        since >= before && since <= chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX),
        "{since}"
    );
    let pending: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("asynq:{{{queue}}}:pending"))
        .arg(0)
        .arg(-1)
        .query_async(&mut connection)
        .await?;
    assert_eq!(pending, vec![task_id.clone()]);
    let queues: bool = redis::cmd("SISMEMBER")
        .arg("asynq:queues")
        .arg(&queue)
        .query_async(&mut connection)
        .await?;
    assert!(queues, "the queue is listed in asynq:queues");

    let message = dequeue(&mut connection, &queue)
        .await?
        .expect("a task to dequeue");
    assert_eq!(message.r#type, "outbox:deliver");
    assert_eq!(message.id, task_id);
    assert_eq!(message.queue, queue);
    assert_eq!(
        message.retry, 3,
        "max_attempts 4 is the first run and three retries"
    );
    assert_eq!((message.retried, message.error_msg.as_str()), (0, ""));
    assert_eq!(message.timeout, 120);
    assert_eq!(message.deadline, expires.timestamp());
    assert_eq!(
        message.headers.get("traceparent").map(String::as_str),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
    assert_eq!(
        message.headers.get("Outbox-Attempt").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        message.headers.get("Outbox-Source").map(String::as_str),
        Some(outbox.as_str())
    );
    let envelope: Envelope = serde_json::from_slice(&message.payload)?;
    assert_eq!(envelope.event_id, task_id);
    assert_eq!(envelope.event_type, "order.created");
    assert_eq!(envelope.payload_version, 1);
    assert_eq!(envelope.task_id, id.get());
    assert_eq!(envelope.outbox, outbox.as_str());
    assert_eq!(envelope.ordering_key.as_deref(), Some("customer-7"));
    assert_eq!(envelope.payload.get(), "{\"order\":42}");
    // After the dequeue, as Asynq leaves it.
    let state: String = redis::cmd("HGET")
        .arg(&key)
        .arg("state")
        .query_async(&mut connection)
        .await?;
    assert_eq!(state, "active");
    let active: Vec<String> = redis::cmd("LRANGE")
        .arg(layout::active_key(&queue))
        .arg(0)
        .arg(-1)
        .query_async(&mut connection)
        .await?;
    assert_eq!(active, vec![task_id]);
    assert!(
        dequeue(&mut connection, &queue).await?.is_none(),
        "one task, dequeued once"
    );
    Ok(())
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
async fn a_replay_while_asynq_holds_the_task_adds_nothing_and_a_foreign_id_fails()
-> anyhow::Result<()> {
    let redis = TestRedis::create("asynq_replay").await?;
    let queue = redis.name("default");
    let publisher = AsynqPublisher::builder(redis.url(), &queue)
        .kind("order.created", 1)
        .payload(Payload::Raw)
        .build()?;
    publisher
        .publish(&delivery("a1", 1, "raw bytes"))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut again = delivery("a1", 1, "raw bytes");
    again.attempt = 2;
    publisher
        .publish(&again)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut connection = redis.connection().await?;
    let len: i64 = redis::cmd("LLEN")
        .arg(layout::pending_key(&queue))
        .query_async(&mut connection)
        .await?;
    assert_eq!(len, 1, "the replay added nothing");
    let message = dequeue(&mut connection, &queue).await?.expect("the task");
    assert_eq!(
        (message.r#type.as_str(), message.payload.as_slice()),
        ("order.created", &b"raw bytes"[..])
    );
    assert_eq!(message.retry, 25, "Asynq's default without max_attempts");

    // Another service with the same explicit prefix: its task 1 is not
    // this one, and must not vanish as a replay.
    let shared = || {
        AsynqPublisher::builder(redis.url(), &queue)
            .kind("order.created", 1)
            .payload(Payload::Raw)
            .message_id_prefix("orders")
            .build()
    };
    shared()?
        .publish(&delivery("a1", 1, "{\"a\":1}"))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let error = shared()?
        .publish(&delivery("b2", 1, "{\"a\":1}"))
        .await
        .expect_err("another service's task 1, the same payload");
    assert!(
        error.is_permanent() && error.to_string().contains("orders:1"),
        "{error}"
    );

    // Once Asynq has run a task and deleted it, a replay enqueues it again:
    // only the worker's idempotence covers that (the guide says so).
    let _: i64 = redis::cmd("DEL")
        .arg(layout::task_key(&queue, "a1:1"))
        .query_async(&mut connection)
        .await?;
    publisher
        .publish(&delivery("a1", 1, "raw bytes"))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert!(dequeue(&mut connection, &queue).await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_is_not_json_cannot_travel_in_an_envelope() -> anyhow::Result<()> {
    let redis = TestRedis::create("asynq_not_json").await?;
    let publisher = AsynqPublisher::builder(redis.url(), redis.name("default"))
        .kind("order.created", 1)
        .build()?;
    let error = publisher
        .publish(&delivery("a1", 1, "not json"))
        .await
        .expect_err("not JSON");
    assert!(
        error.is_permanent() && error.to_string().contains("Payload::Raw"),
        "{error}"
    );
    let built = AsynqPublisher::builder(redis.url(), "a{b}")
        .kind("k", 1)
        .build();
    assert!(matches!(
        built,
        Err(diesel_outbox_redis::RedisError::Config { field: "queue", .. })
    ));
    Ok(())
}
