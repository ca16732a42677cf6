//! RabbitMQ killed (SIGKILL) and restarted while three relays publish every
//! task through the RabbitMQ batch publisher and the service's inbox
//! consumer applies each message to the database.
//!
//! Invariants: no committed order is lost (every task's message was
//! confirmed into the queue), each order is applied exactly once through
//! the inbox, the consumer came back after the broker did, and the copies
//! the inbox suppressed are no more than the publishes whose confirm never
//! came plus the messages the consumer held when the broker went away.

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use diesel_outbox_core::{CancellationToken, HandlerError, RetryPolicy};
use diesel_outbox_rabbitmq::{ConsumeHandler, InboxConsumer, Incoming};
use lapin::{
    Connection, ConnectionProperties, ExchangeKind,
    options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions},
    types::FieldTable,
};

use super::{Ctx, pause, settle, setup, then_stop};
use crate::{
    clock,
    db::ChaosDb,
    effect::{AMQP_EXCHANGE, AMQP_QUEUE, AMQP_ROUTING_KEY},
    producer::{self, Commit, Tally},
    records::Event,
    relays::RelaySpec,
    report::Report,
};

/// Messages the consumer holds at once.
const PREFETCH: u16 = 16;

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

/// Declares the scenario's exchange and a fresh durable queue bound to it.
async fn declare(url: &str) -> anyhow::Result<()> {
    let connection = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel
        .exchange_declare(
            AMQP_EXCHANGE.into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    // Task ids start again on each backend's database.
    for queue in [AMQP_QUEUE.to_owned(), format!("{AMQP_QUEUE}.retry")] {
        channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await?;
    }
    channel
        .queue_declare(
            AMQP_QUEUE.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    channel
        .queue_bind(
            AMQP_QUEUE.into(),
            AMQP_EXCHANGE.into(),
            AMQP_ROUTING_KEY.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    connection.close(200, "declared".into()).await?;
    Ok(())
}

pub(crate) async fn run<B: ChaosDb>(
    ctx: &mut Ctx<'_, B>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut setup = setup(ctx, "rabbitmq").await?;
    let down = ctx.pick(Duration::from_secs(3), Duration::from_secs(15));
    let load = ctx.pick(Duration::from_secs(3), Duration::from_secs(10));
    let broker = ctx
        .rabbitmq
        .as_deref_mut()
        .context("the RabbitMQ scenario runs without a broker")?;
    let url = broker.url();
    declare(&url).await?;
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
        amqp_url: Some(url.clone()),
        ..RelaySpec::default()
    };
    let mut relays = Vec::new();
    for slot in ["r1", "r2", "r3"] {
        relays.push(setup.relays.start(slot, &spec, ctx.run)?);
    }
    let retry = Duration::from_millis(200);
    let consumer = Arc::new(
        InboxConsumer::builder(setup.db.store().clone(), url.clone(), AMQP_QUEUE, Ship)
            .name("shipping")
            .prefetch(PREFETCH)
            .retry(RetryPolicy::new(retry, retry, 0.0)?)
            .max_deliveries(u32::MAX)
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
        "a producer, 3 relays publishing to RabbitMQ, a consumer; RabbitMQ killed for {} s",
        down.as_secs()
    ));
    let producing = producer::run(&setup.db, Commit::Plain, 1, 100.0, &tally, &stop);
    let progress = &ctx.progress;
    let (dir, run, db) = (setup.dir.clone(), ctx.run, &setup.db);
    let outage = then_stop(&stop, async {
        pause(progress, load, "publishing", committed, &dir).await;
        let before_kill = db.count("shipments").await?;
        progress.phase("RabbitMQ killed (SIGKILL)");
        let killed = clock::now_us();
        broker.kill().await?;
        pause(progress, down, "RabbitMQ down", committed, &dir).await;
        broker.restart(run).await?;
        let back = clock::now_us();
        progress.phase("RabbitMQ back");
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

    // Every confirmed message reaches the consumer: wait for the last ones.
    let orders = setup.db.order_ids().await?;
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
        "the consumer came back after the broker",
        consumed.receive_errors > 0 && applied > before_kill,
        format!(
            "{} connection losses seen, {before_kill} applied before the kill, {applied} at the end",
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
    let unconfirmed = begun.saturating_sub(done);
    let bound = unconfirmed as u64 + u64::from(PREFETCH);
    report.check(
        "copies suppressed by the inbox only where a confirm or an ack was lost",
        consumed.duplicates <= bound,
        format!(
            "{} duplicates; {unconfirmed} publishes without a confirm, {PREFETCH} messages in hand at most",
            consumed.duplicates
        ),
    );
    report.millis("RabbitMQ down", clock::between(killed, back));
    report.figure(
        "attempts that did not publish (no confirm, retried)",
        unconfirmed,
        "",
    );
    report.figure("copies the inbox suppressed", consumed.duplicates, "");
    drop(relays);
    Ok(())
}
