//! A private Redis (append-only, every write on disk before its reply)
//! killed (SIGKILL) and restarted while three relays publish every task
//! through the Redis Streams batch publisher and the service's Streams
//! inbox consumer applies each entry to the database.
//!
//! Invariants: every committed order has exactly one entry in the stream
//! (a publish whose reply was lost is retried, and the dedup window, on
//! disk with the stream, absorbs the retry of one that was added), each
//! order is applied exactly once through the inbox, and the consumer came
//! back after Redis did.

use std::{collections::HashMap, sync::Arc, time::Duration};

use anyhow::Context as _;
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use diesel_outbox_core::{CancellationToken, HandlerError, RetryPolicy};
use diesel_outbox_redis::{ConsumeHandler, Incoming, StreamConsumer};

use super::{Ctx, pause, settle, setup, then_stop};
use crate::{
    clock,
    db::ChaosDb,
    effect::REDIS_STREAM,
    producer::{self, Commit, Tally},
    records::Event,
    relays::RelaySpec,
    report::Report,
};

/// The service's effect: a shipment row per order, in the inbox's
/// transaction.
struct Ship;

#[async_trait::async_trait]
impl<C> ConsumeHandler<C> for Ship
where
    C: AsyncConnection + SimpleAsyncConnection + Send + 'static,
{
    async fn handle(&self, conn: &mut C, incoming: &Incoming) -> Result<(), HandlerError> {
        let payload: crate::db::Payload = incoming.json()?;
        conn.batch_execute(&format!(
            "INSERT INTO shipments (order_id) VALUES ({})",
            payload.order
        ))
        .await?;
        Ok(())
    }
}

/// How many entries of the stream carry each order.
async fn entries_per_order(url: &str) -> anyhow::Result<HashMap<i64, usize>> {
    let client = redis::Client::open(url)?;
    let mut connection = client.get_multiplexed_async_connection().await?;
    let entries: Vec<diesel_outbox_testkit::redis::Entry> = redis::cmd("XRANGE")
        .arg(REDIS_STREAM)
        .arg("-")
        .arg("+")
        .query_async(&mut connection)
        .await?;
    let mut orders = HashMap::new();
    for (id, fields) in entries {
        let payload = fields
            .iter()
            .find(|(name, _)| name.as_slice() == diesel_outbox_redis::PAYLOAD.as_bytes())
            .with_context(|| format!("entry {id} has no payload"))?;
        let payload: crate::db::Payload = serde_json::from_slice(&payload.1)?;
        *orders.entry(payload.order).or_insert(0) += 1;
    }
    Ok(orders)
}

pub(crate) async fn run<B: ChaosDb>(
    ctx: &mut Ctx<'_, B>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut setup = setup(ctx, "redis").await?;
    let down = ctx.pick(Duration::from_secs(3), Duration::from_secs(15));
    let load = ctx.pick(Duration::from_secs(3), Duration::from_secs(10));
    let server = ctx
        .redis
        .as_deref_mut()
        .context("the Redis scenario runs without a server")?;
    let url = server.url();
    // Task ids start again on each backend's database.
    {
        let client = redis::Client::open(url.as_str())?;
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut connection)
            .await?;
    }
    setup.db.migrate_inbox().await?;
    setup
        .db
        .execute_sql("CREATE TABLE shipments (order_id BIGINT NOT NULL)")
        .await?;

    let spec = RelaySpec {
        work_ms: 0,
        timeout_ms: 2000,
        lease_ms: 6000,
        retry_ms: 500,
        redis_url: Some(url.clone()),
        ..RelaySpec::default()
    };
    let mut relays = Vec::new();
    for slot in ["r1", "r2", "r3"] {
        relays.push(setup.relays.start(slot, &spec, ctx.run)?);
    }
    let retry = Duration::from_millis(200);
    let consumer = Arc::new(
        StreamConsumer::builder(
            setup.db.store().clone(),
            url.clone(),
            REDIS_STREAM,
            "shipping",
            Ship,
        )
        .concurrency(16)
        .retry(RetryPolicy::new(retry, retry, 0.0)?)
        .max_deliveries(u32::MAX)
        .handler_timeout(Duration::from_secs(2))
        .claim_idle(Duration::from_secs(5))
        .build()?,
    );
    let stop_consuming = CancellationToken::new();
    let consuming = tokio::spawn({
        let (consumer, stop) = (Arc::clone(&consumer), stop_consuming.clone());
        async move { consumer.run(stop).await }
    });

    let tally = Tally::default();
    let stop = CancellationToken::new();
    let committed = || tally.committed().len();
    ctx.progress.phase(&format!(
        "a producer, 3 relays publishing to Redis Streams, a consumer; Redis killed for {} s",
        down.as_secs()
    ));
    let producing = producer::run(&setup.db, Commit::Plain, 1, 100.0, &tally, &stop);
    let progress = &ctx.progress;
    let (dir, run, db) = (setup.dir.clone(), ctx.run, &setup.db);
    let outage = then_stop(&stop, async {
        pause(progress, load, "publishing", committed, &dir).await;
        let before_kill = db.count("shipments").await?;
        progress.phase("Redis killed (SIGKILL)");
        let killed = clock::now_us();
        server.kill().await?;
        pause(progress, down, "Redis down", committed, &dir).await;
        server.restart(run).await?;
        let back = clock::now_us();
        progress.phase("Redis back");
        pause(progress, load, "publishing", committed, &dir).await;
        anyhow::Ok((killed, back, before_kill))
    });
    let ((), outage) = tokio::join!(producing, outage);
    let (killed, back, before_kill) = outage?;
    let delivered = settle(
        &setup.db,
        &setup.dir,
        Duration::from_secs(90),
        &ctx.progress,
        report,
    )
    .await?;

    let orders = setup.db.order_ids().await?;
    let in_stream = entries_per_order(&url).await?;
    let missing = orders
        .iter()
        .filter(|order| !in_stream.contains_key(*order))
        .count();
    let doubled = in_stream.values().filter(|n| **n > 1).count();
    report.check(
        "every committed order has exactly one entry in the stream",
        missing == 0 && doubled == 0 && in_stream.len() == orders.len(),
        format!(
            "{} committed orders, {} in the stream, {missing} missing, {doubled} added twice",
            orders.len(),
            in_stream.len()
        ),
    );

    // Every added entry reaches the consumer: wait for the last ones.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut applied = setup.db.count("shipments").await?;
    while usize::try_from(applied)? < orders.len() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        applied = setup.db.count("shipments").await?;
    }
    stop_consuming.cancel();
    let consumed = consuming.await??;
    let distinct = setup
        .db
        .count("(SELECT DISTINCT order_id FROM shipments) AS shipped")
        .await?;
    report.check(
        "every order applied once through the inbox",
        usize::try_from(applied)? == orders.len() && applied == distinct,
        format!(
            "{applied} shipments, {distinct} distinct, {} committed orders",
            orders.len()
        ),
    );
    report.check(
        "the consumer came back after Redis",
        consumed.receive_errors > 0 && applied > before_kill,
        format!(
            "{} read failures seen, {before_kill} applied before the kill, {applied} at the end",
            consumed.receive_errors
        ),
    );
    let (mut begun, mut done) = (0usize, 0usize);
    for log in &delivered.logs {
        for (_, event) in &log.events {
            match event {
                Event::Begin { .. } => begun += 1,
                Event::Done { .. } => done += 1,
                _ => {}
            }
        }
    }
    report.millis("Redis down", clock::between(killed, back));
    report.figure(
        "attempts that did not publish (no reply, retried)",
        begun.saturating_sub(done),
        "",
    );
    report.figure("copies the inbox suppressed", consumed.duplicates, "");
    drop(relays);
    Ok(())
}
