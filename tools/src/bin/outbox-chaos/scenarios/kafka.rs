//! A private Kafka-protocol broker (tansu, its log in a SQLite file) killed
//! (SIGKILL) and restarted while three relays publish every task through
//! the Kafka publisher (idempotent, `acks=all`) and the service's inbox
//! consumer applies each record to the database.
//!
//! While the broker is down, new batches fail once the producer has waited
//! for the topic's metadata, and are retried; a record already in flight
//! at the kill is sent again by the producer itself once the broker is
//! back, with its sequence number (see
//! [`KAFKA_DELIVERY_TIMEOUT`]).
//!
//! Invariants: no committed order is lost (every task's record was
//! acknowledged), each order is applied exactly once through the inbox,
//! the consumer came back after the broker did, no record was given up to
//! the dead-letter topic, every extra copy of an order in the topic comes
//! from a publish whose acknowledgement never came, and the copies the
//! inbox suppressed are no more than those plus what the consumer may have
//! applied without committing its offset.

use std::{collections::HashMap, time::Duration};

use anyhow::Context as _;
use confluent_kafka::consumer::Consumer as _;
use diesel_outbox_core::{CancellationToken, RetryPolicy};
use diesel_outbox_kafka::InboxConsumer;
use diesel_outbox_testkit::kafka::{self, CLIENT_PROPERTIES, create_topic};

use super::{
    Ctx,
    broker_outage::{self, ORDERS_PER_SECOND, Plan, Ship},
    setup,
};
use crate::{
    db::ChaosDb,
    effect::{KAFKA_DELIVERY_TIMEOUT, kafka_topic},
    relays::RelaySpec,
    report::Report,
};

/// The topic's partitions.
const PARTITIONS: i32 = 3;
/// Transactions the consumer runs at once.
const CONCURRENCY: usize = 16;
/// How often the consumer commits the offsets of what it applied.
const COMMIT_INTERVAL: Duration = Duration::from_millis(250);

/// How long reading a topic back waits for more once it has what it
/// expects (its fetches answer within `fetch.max.wait.ms`, 500 ms).
const QUIET: Duration = Duration::from_secs(1);

/// How many records of `topic` carry each order, read back from the start
/// of every partition until every order of `expected` has been seen and
/// nothing more came for [`QUIET`] (at most 30 s). The broker's end
/// offsets are not used: tansu reports them short of batched records.
async fn records_per_order(
    bootstrap: &str,
    topic: &str,
    expected: &[i64],
) -> anyhow::Result<HashMap<i64, usize>> {
    let mut consumer = kafka::reader(bootstrap, topic, &[]).await?;
    // Where each partition starts, asked now: the quiet time counts from a
    // reader that knows where to fetch.
    for partition in &consumer.assignment() {
        consumer.position(partition).await?;
    }
    let mut orders = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut quiet_since = tokio::time::Instant::now();
    loop {
        let seen_all = expected.iter().all(|order| orders.contains_key(order));
        let now = tokio::time::Instant::now();
        if (seen_all && now.duration_since(quiet_since) >= QUIET) || now >= deadline {
            break;
        }
        for record in consumer.poll(Duration::from_millis(200)).await? {
            quiet_since = tokio::time::Instant::now();
            let at = format!("{topic}/{}@{}", record.partition(), record.offset());
            let value = record
                .value()
                .with_context(|| format!("record {at} has no value"))?;
            let payload: crate::db::Payload = serde_json::from_slice(value)
                .with_context(|| format!("record {at} is not an order"))?;
            *orders.entry(payload.order).or_insert(0) += 1;
        }
    }
    consumer.close().await?;
    Ok(orders)
}

pub(crate) async fn run<B: ChaosDb>(
    ctx: &mut Ctx<'_, B>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut setup = setup(ctx, "kafka").await?;
    let (down, load) = (
        ctx.pick(Duration::from_secs(3), Duration::from_secs(15)),
        ctx.pick(Duration::from_secs(3), Duration::from_secs(10)),
    );
    let broker = ctx
        .kafka
        .as_deref_mut()
        .context("the Kafka scenario runs without a broker")?;
    let bootstrap = broker.bootstrap();
    // A topic per backend: task ids start again on each backend's database.
    let topic = kafka_topic(ctx.backend);
    let dead_letter = format!("{topic}.dead");
    create_topic(&bootstrap, &topic, PARTITIONS).await?;
    create_topic(&bootstrap, &dead_letter, 1).await?;
    setup.db.migrate_inbox().await?;
    setup
        .db
        .execute_sql("CREATE TABLE shipments (order_id BIGINT NOT NULL)")
        .await?;
    // A record in flight at the kill must still be the producer's when the
    // broker is back (see KAFKA_DELIVERY_TIMEOUT): the outage, the restart
    // and the client's reconnect backoff (at most 1 s) fit in it.
    anyhow::ensure!(
        down + Duration::from_secs(2) < KAFKA_DELIVERY_TIMEOUT,
        "the delivery timeout must outlast the outage"
    );
    // A batch is answered within KAFKA_DELIVERY_TIMEOUT and 1 s more (its
    // acknowledgements, then asking whether a topic exists; a topic whose
    // metadata the producer lacks fails sooner, after `max.block.ms`, 3 s,
    // and that 1 s): the handler timeout is above it, so a batch is never
    // cut, and the lease is three times the timeout, as in the RabbitMQ
    // scenario.
    let timeout = KAFKA_DELIVERY_TIMEOUT + Duration::from_secs(5);
    let spec = RelaySpec {
        work_ms: 0,
        timeout_ms: u64::try_from(timeout.as_millis())?,
        lease_ms: u64::try_from(timeout.as_millis())? * 3,
        retry_ms: 500,
        kafka_bootstrap: Some(bootstrap.clone()),
        ..RelaySpec::default()
    };
    let retry = Duration::from_millis(200);
    let builder = InboxConsumer::builder(
        setup.db.store().clone(),
        bootstrap.clone(),
        topic.clone(),
        Ship,
    )
    .name("shipping")
    .dead_letter(dead_letter.clone())
    .concurrency(CONCURRENCY)
    .commit_interval(COMMIT_INTERVAL)
    .retry(RetryPolicy::new(retry, retry, 0.0)?);
    let consumer = CLIENT_PROPERTIES
        .iter()
        .fold(builder, |builder, (name, value)| {
            builder.property(*name, *value)
        })
        .build()?;
    let stop = CancellationToken::new();
    let consuming = tokio::spawn({
        let stop = stop.clone();
        async move { Ok(consumer.run(stop).await?) }
    });
    let plan = Plan {
        label: "Kafka",
        load,
        down,
        spec,
        // Kafka's client reconnects inside its poll: while the broker is
        // gone a poll returns no records rather than an error, so the
        // consumer counts no receive error; its return shows in the records
        // it applies once the broker is back.
        counts_losses: false,
        consumer: consuming,
        stop_consuming: stop,
    };
    let outage =
        broker_outage::run(&mut setup, ctx.run, &ctx.progress, broker, plan, report).await?;
    let failures = broker.failures()?;
    report.check(
        "the broker itself did not fail (no panic in its log)",
        failures.is_empty(),
        match failures.first() {
            None => "none".to_owned(),
            Some(first) => format!("{} panics, the first: {first}", failures.len()),
        },
    );

    let orders = &outage.orders;
    let in_topic = records_per_order(&bootstrap, &topic, orders).await?;
    let missing = orders
        .iter()
        .filter(|order| !in_topic.contains_key(*order))
        .count();
    let copies: usize = in_topic.values().map(|n| n.saturating_sub(1)).sum();
    report.check(
        "extra copies in the topic only where an acknowledgement was lost",
        missing == 0 && in_topic.len() == orders.len() && copies <= outage.unanswered,
        format!(
            "{} committed orders, {} in the topic, {missing} missing, {copies} extra copies; \
             {} publishes without an acknowledgement",
            orders.len(),
            in_topic.len(),
            outage.unanswered
        ),
    );
    let dead: usize = records_per_order(&bootstrap, &dead_letter, &[])
        .await?
        .values()
        .sum();
    report.check(
        "nothing given up to the dead-letter topic",
        dead == 0 && outage.consumed.dead_lettered == 0,
        format!(
            "{dead} records in {dead_letter}, {} given up",
            outage.consumed.dead_lettered
        ),
    );
    // Besides the extra copies (each delivered once more), a record comes
    // again only if the consumer falls back to its committed offset: then
    // what it applied since the last commit that went through comes again.
    // Offsets are committed every COMMIT_INTERVAL while the broker
    // answers, checked after each poll (100 ms), and before the kill the
    // consumer keeps up with the producer's ORDERS_PER_SECOND: at most one
    // interval and one poll's worth of records were applied uncommitted,
    // beside at most CONCURRENCY transactions in flight. A consumer that
    // fell back to the start of its partitions (the hundreds of records
    // applied before the kill) fails the check.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a small count
    let uncommitted = (ORDERS_PER_SECOND * (COMMIT_INTERVAL.as_secs_f64() + 0.1)).ceil() as u64
        + CONCURRENCY as u64;
    let bound = copies as u64 + uncommitted;
    report.check(
        "copies suppressed by the inbox only where an acknowledgement or a commit was lost",
        outage.consumed.duplicates <= bound,
        format!(
            "{} duplicates; {copies} extra copies in the topic (of {} publishes without an \
             acknowledgement), {uncommitted} records applied and not yet committed at most",
            outage.consumed.duplicates, outage.unanswered
        ),
    );
    report.figure("extra copies in the topic", copies, "");
    Ok(())
}
