//! The Streams inbox consumer on PostgreSQL: each entry applied once, a
//! replay acked without the handler, a failing entry claimed again until
//! it is given up, entries of other programs dead-lettered, entries a dead
//! member left behind claimed; and replays a publisher without a dedup
//! window added applied once.

use std::{collections::HashSet, time::Duration};

use anyhow::Context as _;
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use diesel_outbox_postgres::outbox::{
    CancellationToken, Delivery, HandlerError, Inbox, OutboxId, RetryPolicy, Task, TaskId,
};
use diesel_outbox_redis::{
    ConsumeHandler, ConsumerReport, DEAD_DELIVERED, DEAD_REASON, Incoming, RedisError,
    StreamConsumer, StreamPublisher,
};
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb, redis::TestRedis};

/// Applies an order by inserting its shipment row; orders in `retryable`
/// always fail retryably.
#[derive(Default)]
struct Ship {
    retryable: HashSet<i64>,
}

#[async_trait::async_trait]
impl<C> ConsumeHandler<C> for Ship
where
    C: AsyncConnection + SimpleAsyncConnection + Send + 'static,
{
    async fn handle(&self, conn: &mut C, incoming: &Incoming) -> Result<(), HandlerError> {
        let order: serde_json::Value = incoming.json()?;
        let order = order["order"]
            .as_i64()
            .ok_or_else(|| HandlerError::permanent(anyhow::anyhow!("order without a number")))?;
        if self.retryable.contains(&order) {
            return Err(HandlerError::retryable(anyhow::anyhow!(
                "order {order}: not yet"
            )));
        }
        conn.batch_execute(&format!(
            "INSERT INTO shipments (order_id) VALUES ({order})"
        ))
        .await?;
        Ok(())
    }
}

/// Publishes orders as the outbox would (task id = order number, message
/// ids `<outbox>:<n>`).
async fn publish(
    url: &str,
    stream: &str,
    orders: impl IntoIterator<Item = i64>,
) -> anyhow::Result<()> {
    let publisher = StreamPublisher::builder(url)
        .route("order.created", 1, stream)
        .build()?;
    publish_with(&publisher, orders).await
}

/// Publishes orders through `publisher` as [`publish`] does.
async fn publish_with(
    publisher: &StreamPublisher,
    orders: impl IntoIterator<Item = i64>,
) -> anyhow::Result<()> {
    for order in orders {
        let task = Task::json("order.created", 1, &serde_json::json!({ "order": order }))?;
        let delivery =
            Delivery::new(TaskId::new(order), 1, task).in_outbox(OutboxId::new("orders"));
        publisher
            .publish(&delivery)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// A database named after `name` with the inbox and a `shipments` table,
/// and a Redis prefix of the same name.
async fn shipping(name: &str) -> anyhow::Result<(PgTestDb, TestRedis)> {
    let db = PgTestDb::create(name).await?;
    db.migrate_inbox().await?;
    db.execute_sql("CREATE TABLE shipments (order_id BIGINT NOT NULL)")
        .await?;
    Ok((db, TestRedis::create(name).await?))
}

/// Runs `consumer` in a task of its own until the token is cancelled.
fn start<I, H>(
    consumer: StreamConsumer<I, H>,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<ConsumerReport, RedisError>>,
)
where
    I: Inbox + 'static,
    H: ConsumeHandler<I::Conn> + 'static,
{
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { consumer.run(shutdown).await }
    });
    (shutdown, running)
}

fn no_delay() -> RetryPolicy {
    RetryPolicy::new(Duration::ZERO, Duration::ZERO, 0.0).expect("policy")
}

/// Polls until `done` holds, for at most 30 s.
async fn until<F: AsyncFn() -> anyhow::Result<bool>>(what: &str, done: F) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done().await? {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn pending(redis: &TestRedis, stream: &str, group: &str) -> anyhow::Result<i64> {
    let mut connection = redis.connection().await?;
    let summary: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query_async(&mut connection)
        .await?;
    Ok(i64::try_from(summary.count())?)
}

fn field(fields: &[(Vec<u8>, Vec<u8>)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(n, _)| n.as_slice() == name.as_bytes())
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_entry_applies_once_and_what_cannot_apply_is_dead_lettered() -> anyhow::Result<()> {
    let (db, redis) = shipping("redis_consume").await?;
    let stream = redis.name("orders");
    publish(redis.url(), &stream, 1..=20).await?;
    // Entries other programs wrote: no outbox fields; a NUL and invalid
    // UTF-8 in a header's value; a field name that is not UTF-8.
    redis
        .add_raw(
            &stream,
            &[
                (b"message_id", b"stranger:1"),
                (b"payload", b"{\"order\":99}"),
            ],
        )
        .await?;
    let outbox_fields = |id: &'static [u8]| -> Vec<(&'static [u8], &'static [u8])> {
        vec![
            (b"message_id", id),
            (b"Outbox-Task-Id", b"2"),
            (b"Outbox-Kind", b"order.created"),
            (b"Outbox-Version", b"1"),
            (b"Outbox-Attempt", b"1"),
        ]
    };
    let mut second = outbox_fields(b"stranger:2");
    second.extend([
        (&b"note"[..], &b"\0\xff\xfe"[..]),
        (b"payload", b"{\"order\":98}"),
    ]);
    redis.add_raw(&stream, &second).await?;
    let mut third = outbox_fields(b"stranger:3");
    third.extend([
        (&b"\xc3\x28"[..], &b"x"[..]),
        (b"payload", b"{\"order\":97}"),
    ]);
    redis.add_raw(&stream, &third).await?;
    // As if a delivery of order 3 had committed and then crashed before its ack.
    let (store, group) = (db.store().clone(), "shipping".to_owned());
    let recorded = group.clone();
    db.store()
        .transaction(move |conn| {
            Box::pin(async move { store.record(conn, &recorded, "orders:3").await })
        })
        .await?;
    let consumer = StreamConsumer::builder(
        db.store().clone(),
        redis.url(),
        &stream,
        &group,
        Ship {
            retryable: HashSet::from([7]),
        },
    )
    .concurrency(4)
    .retry(no_delay())
    .claim_idle(Duration::from_millis(1500))
    .handler_timeout(Duration::from_millis(700))
    .max_deliveries(3)
    .build()?;
    let dead = consumer.dead_letter().to_owned();
    assert_eq!(dead, format!("{stream}:dead"));
    let (shutdown, running) = start(consumer);
    // 18 applied and the one recorded before; the strangers and order 7 dead.
    until("every entry to be answered", async || {
        Ok(
            db.count("outbox_inbox").await? == 19
                && redis.stream_len(&dead).await.unwrap_or(0) == 4,
        )
    })
    .await?;
    shutdown.cancel();
    let report = running.await?.context("consumer run")?;
    assert_eq!(
        (
            report.applied,
            report.duplicates,
            report.dead_lettered,
            report.failed
        ),
        (18, 1, 4, 2),
        "{report:?}"
    );
    assert_eq!(db.count("shipments").await?, 18);
    assert_eq!(
        pending(&redis, &stream, &group).await?,
        0,
        "every entry acked"
    );
    let copies = redis.entries(&dead).await?;
    let copy_of = |id: &str| {
        copies
            .iter()
            .find(|(_, f)| field(f, "message_id").as_deref() == Some(id))
            .map(|(_, f)| f.clone())
            .with_context(|| format!("the copy of {id}"))
    };
    let seventh = copy_of("orders:7")?;
    let reason = field(&seventh, DEAD_REASON).unwrap_or_default();
    assert!(reason.contains("gave up after 3 deliveries"), "{reason}");
    assert_eq!(field(&seventh, DEAD_DELIVERED).as_deref(), Some("3"));
    assert!(
        field(&copy_of("stranger:1")?, DEAD_REASON)
            .unwrap_or_default()
            .contains("missing")
    );
    let second = copy_of("stranger:2")?;
    assert!(
        field(&second, DEAD_REASON)
            .unwrap_or_default()
            .contains("`note`")
    );
    // The copy keeps the stranger's bytes as they were.
    assert_eq!(
        second
            .iter()
            .find(|(n, _)| n.as_slice() == b"note")
            .map(|(_, v)| v.as_slice()),
        Some(&b"\0\xff\xfe"[..])
    );
    let third = copy_of("stranger:3")?;
    assert!(
        field(&third, DEAD_REASON)
            .unwrap_or_default()
            .contains("field name is not UTF-8"),
        "{third:?}"
    );
    assert!(
        third.iter().any(|(n, _)| n.as_slice() == b"\xc3\x28"),
        "the name kept as it was"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_a_dead_member_left_pending_are_claimed_and_applied_once() -> anyhow::Result<()> {
    let (db, redis) = shipping("redis_claim").await?;
    let stream = redis.name("orders");
    let group = "shipping";
    let mut connection = redis.connection().await?;
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async::<()>(&mut connection)
        .await?;
    publish(redis.url(), &stream, 1..=10).await?;
    // A member reads five entries and dies before it acks any.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(group)
        .arg("dead-member")
        .arg("COUNT")
        .arg(5)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut connection)
        .await?;
    assert_eq!(pending(&redis, &stream, group).await?, 5);
    let consumer = StreamConsumer::builder(
        db.store().clone(),
        redis.url(),
        &stream,
        group,
        Ship::default(),
    )
    .consumer("survivor")
    .claim_idle(Duration::from_millis(1500))
    .handler_timeout(Duration::from_millis(700))
    .build()?;
    let (shutdown, running) = start(consumer);
    until("all ten to be applied", async || {
        Ok(db.count("shipments").await? == 10)
    })
    .await?;
    until("every entry to be acked", async || {
        Ok(pending(&redis, &stream, group).await? == 0)
    })
    .await?;
    shutdown.cancel();
    let report = running.await?.context("consumer run")?;
    assert_eq!((report.applied, report.duplicates), (10, 0), "{report:?}");
    Ok(())
}

/// A store whose pool connects on first use: nothing is reached.
fn unconnected_store() -> diesel_outbox_postgres::PgStore {
    diesel_outbox_postgres::PgStore::new(
        diesel_async::pooled_connection::deadpool::Pool::builder(
            diesel_async::pooled_connection::AsyncDieselConnectionManager::new(
                "postgres://postgres@127.0.0.1:5432/test",
            ),
        )
        .build()
        .expect("pool"),
    )
}

#[test]
fn a_claim_idle_within_twice_the_handler_timeout_is_refused() {
    let build = |idle: Duration| {
        StreamConsumer::builder(
            unconnected_store(),
            "redis://127.0.0.1:6379",
            "orders",
            "shipping",
            Ship::default(),
        )
        .claim_idle(idle)
        .build()
    };
    // The default handler timeout is 30 s: an entry read ahead may wait one
    // for a slot, then run for another.
    for refused in [Duration::from_secs(60), Duration::from_secs(86_401)] {
        match build(refused) {
            Err(diesel_outbox_redis::RedisError::Config { field, .. }) => {
                assert_eq!(field, "claim_idle")
            }
            other => panic!("expected {refused:?} to be refused, got {other:?}"),
        }
    }
    assert!(build(Duration::from_secs(61)).is_ok());
}

/// Counts the entries in hand at once, and holds each until released.
struct Gate {
    in_hand: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    release: tokio::sync::Semaphore,
}

/// The consumer's handle on a [`Gate`] the test keeps too.
struct Gated(std::sync::Arc<Gate>);

#[async_trait::async_trait]
impl<C> ConsumeHandler<C> for Gated
where
    C: AsyncConnection + SimpleAsyncConnection + Send + 'static,
{
    async fn handle(&self, conn: &mut C, incoming: &Incoming) -> Result<(), HandlerError> {
        use std::sync::atomic::Ordering::SeqCst;
        let gate = &self.0;
        let now = gate.in_hand.fetch_add(1, SeqCst) + 1;
        gate.most.fetch_max(now, SeqCst);
        let permit = gate.release.acquire().await;
        gate.in_hand.fetch_sub(1, SeqCst);
        permit
            .map_err(|e| HandlerError::retryable(anyhow::anyhow!("{e}")))?
            .forget();
        let order: serde_json::Value = incoming.json()?;
        conn.batch_execute(&format!(
            "INSERT INTO shipments (order_id) VALUES ({})",
            order["order"]
        ))
        .await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_concurrency_entries_are_in_hand_and_shutdown_finishes_them() -> anyhow::Result<()>
{
    let (db, redis) = shipping("redis_shutdown").await?;
    let stream = redis.name("orders");
    publish(redis.url(), &stream, 1..=30).await?;
    let gate = std::sync::Arc::new(Gate {
        in_hand: 0.into(),
        most: 0.into(),
        release: tokio::sync::Semaphore::new(0),
    });
    let consumer = StreamConsumer::builder(
        db.store().clone(),
        redis.url(),
        &stream,
        "shipping",
        Gated(gate.clone()),
    )
    .concurrency(3)
    .build()?;
    let (shutdown, running) = start(consumer);
    // Ten go through; then three are in hand when shutdown is asked for.
    gate.release.add_permits(10);
    until("ten applied and three more in hand", async || {
        Ok(db.count("shipments").await? == 10
            && gate.in_hand.load(std::sync::atomic::Ordering::SeqCst) == 3)
    })
    .await?;
    shutdown.cancel();
    gate.release.add_permits(3);
    let report = running.await?.context("consumer run")?;
    assert_eq!(report.applied, 13, "the three in hand finished: {report:?}");
    assert_eq!(
        gate.most.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "never more than 3 in hand"
    );
    assert_eq!(db.count("shipments").await?, 13);
    // Nothing applied is left pending; the rest was never acked.
    let mut connection = redis.connection().await?;
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(&stream)
        .query_async(&mut connection)
        .await?;
    let pending_now = pending(&redis, &stream, "shipping").await?;
    let entries_read = match groups.first().and_then(|g| g.get("entries-read")) {
        Some(redis::Value::Int(n)) => *n,
        other => anyhow::bail!("no entries-read: {other:?}"),
    };
    assert_eq!(
        entries_read - pending_now,
        13,
        "acked exactly the applied ones"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_found_gone_is_created_again_and_reading_goes_on() -> anyhow::Result<()> {
    let (db, redis) = shipping("redis_nogroup").await?;
    let stream = redis.name("orders");
    publish(redis.url(), &stream, 1..=5).await?;
    let consumer = StreamConsumer::builder(
        db.store().clone(),
        redis.url(),
        &stream,
        "shipping",
        Ship::default(),
    )
    .build()?;
    let (shutdown, running) = start(consumer);
    until("the first five", async || {
        Ok(db.count("shipments").await? == 5)
    })
    .await?;
    // The stream and its group vanish (a Redis without persistence
    // restarted); new entries come to a stream of the same name.
    let mut connection = redis.connection().await?;
    let _: i64 = redis::cmd("DEL")
        .arg(&stream)
        .query_async(&mut connection)
        .await?;
    publish(redis.url(), &stream, 6..=10).await?;
    until("the next five", async || {
        Ok(db.count("shipments").await? == 10)
    })
    .await?;
    shutdown.cancel();
    let report = running.await?.context("consumer run")?;
    assert_eq!(report.applied, 10, "{report:?}");
    assert!(
        report.receive_errors >= 1,
        "the missing group was seen: {report:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_whose_dead_letter_copy_fails_stays_pending_until_it_can_be_copied()
-> anyhow::Result<()> {
    let db = PgTestDb::create("redis_dead_fails").await?;
    db.migrate_inbox().await?;
    let redis = TestRedis::create("redis_dead_fails").await?;
    let stream = redis.name("orders");
    let dead = redis.name("dead");
    // The dead-letter key holds a string: XADD to it fails (WRONGTYPE).
    let mut connection = redis.connection().await?;
    let _: () = redis::cmd("SET")
        .arg(&dead)
        .arg("not a stream")
        .query_async(&mut connection)
        .await?;
    redis
        .add_raw(
            &stream,
            &[(b"message_id", b"stranger:1"), (b"payload", b"{}")],
        )
        .await?;
    // The group exists before the consumer starts, so that the test's own
    // reads of it never race the consumer's creating it.
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg("shipping")
        .arg("0")
        .query_async(&mut connection)
        .await?;
    let consumer = StreamConsumer::builder(
        db.store().clone(),
        redis.url(),
        &stream,
        "shipping",
        Ship::default(),
    )
    .dead_letter(&dead)
    .retry(no_delay())
    .claim_idle(Duration::from_millis(1500))
    .handler_timeout(Duration::from_millis(700))
    .build()?;
    let (shutdown, running) = start(consumer);
    let group_pending = async || pending(&redis, &stream, "shipping").await;
    // Given up, the copy fails, so it is handed back: still pending, and
    // tried again after a claim.
    until("a second delivery", async || {
        let detail: redis::streams::StreamPendingCountReply = redis::cmd("XPENDING")
            .arg(&stream)
            .arg("shipping")
            .arg("-")
            .arg("+")
            .arg(10)
            .query_async(&mut redis.connection().await?)
            .await?;
        Ok(detail.ids.first().is_some_and(|p| p.times_delivered >= 2))
    })
    .await?;
    assert_eq!(group_pending().await?, 1, "never acked without its copy");
    // Once the destination can take it, the copy is made and the entry acked.
    let _: i64 = redis::cmd("DEL")
        .arg(&dead)
        .query_async(&mut connection)
        .await?;
    until("the copy", async || {
        Ok(redis.stream_len(&dead).await.unwrap_or(0) == 1)
    })
    .await?;
    until("the ack", async || Ok(group_pending().await? == 0)).await?;
    shutdown.cancel();
    let report = running.await?.context("consumer run")?;
    assert!(
        report.failed >= 1 && report.dead_lettered == 1,
        "{report:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_a_publisher_without_a_dedup_window_added_apply_once() -> anyhow::Result<()> {
    let (db, redis) = shipping("redis_consume_plain").await?;
    let stream = redis.name("orders");
    let publisher = StreamPublisher::builder(redis.url())
        .route("order.created", 1, &stream)
        .without_dedup_window()
        .build()?;
    // Every order published twice, as relays that crashed before their
    // completion writes would: ten entries, five message ids.
    publish_with(&publisher, 1..=5).await?;
    publish_with(&publisher, 1..=5).await?;
    assert_eq!(redis.stream_len(&stream).await?, 10);
    let consumer = StreamConsumer::builder(
        db.store().clone(),
        redis.url(),
        &stream,
        "shipping",
        Ship::default(),
    )
    .build()?;
    let (shutdown, running) = start(consumer);
    until("every entry to be read and acked", async || {
        let mut connection = redis.connection().await?;
        let groups: redis::streams::StreamInfoGroupsReply = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&stream)
            .query_async(&mut connection)
            .await?;
        Ok(groups
            .groups
            .iter()
            .any(|group| group.entries_read == Some(10) && group.pending == 0))
    })
    .await?;
    shutdown.cancel();
    let report = running.await?.context("consumer run")?;
    assert_eq!((report.applied, report.duplicates), (5, 5), "{report:?}");
    assert_eq!(db.count("shipments").await?, 5);
    Ok(())
}
