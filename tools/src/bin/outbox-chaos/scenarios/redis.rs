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

use std::{collections::HashMap, time::Duration};

use anyhow::Context as _;
use diesel_outbox_core::{CancellationToken, RetryPolicy};
use diesel_outbox_redis::StreamConsumer;

use super::{
    Ctx,
    broker_outage::{self, Plan, Ship},
    setup,
};
use crate::{db::ChaosDb, effect::REDIS_STREAM, relays::RelaySpec, report::Report};

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
    let (down, load) = (
        ctx.pick(Duration::from_secs(3), Duration::from_secs(15)),
        ctx.pick(Duration::from_secs(3), Duration::from_secs(10)),
    );
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
    let retry = Duration::from_millis(200);
    let consumer = StreamConsumer::builder(
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
    .build()?;
    let stop = CancellationToken::new();
    let consuming = tokio::spawn({
        let stop = stop.clone();
        async move { Ok(consumer.run(stop).await?) }
    });
    let plan = Plan {
        label: "Redis",
        load,
        down,
        spec,
        counts_losses: true,
        consumer: consuming,
        stop_consuming: stop,
    };
    let outage =
        broker_outage::run(&mut setup, ctx.run, &ctx.progress, server, plan, report).await?;
    let in_stream = entries_per_order(&url).await?;
    let orders = &outage.orders;
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
    Ok(())
}
