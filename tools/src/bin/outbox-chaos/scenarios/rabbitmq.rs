//! RabbitMQ killed (SIGKILL) and restarted while three relays publish every
//! task through the RabbitMQ batch publisher and the service's inbox
//! consumer applies each message to the database.
//!
//! Invariants: no committed order is lost (every task's message was
//! confirmed into the queue), each order is applied exactly once through
//! the inbox, the consumer came back after the broker did, and the copies
//! the inbox suppressed are no more than the publishes whose confirm never
//! came plus the messages the consumer held when the broker went away.

use std::time::Duration;

use anyhow::Context as _;
use diesel_outbox_core::{CancellationToken, RetryPolicy};
use diesel_outbox_rabbitmq::InboxConsumer;
use lapin::{
    Connection, ConnectionProperties, ExchangeKind,
    options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions},
    types::FieldTable,
};

use super::{
    Ctx,
    broker_outage::{self, Plan, Ship},
    setup,
};
use crate::{
    db::ChaosDb,
    effect::{AMQP_EXCHANGE, AMQP_QUEUE, AMQP_ROUTING_KEY},
    relays::RelaySpec,
    report::Report,
};

/// Messages the consumer holds at once.
const PREFETCH: u16 = 16;

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
    let (down, load) = (
        ctx.pick(Duration::from_secs(3), Duration::from_secs(15)),
        ctx.pick(Duration::from_secs(3), Duration::from_secs(10)),
    );
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
    let retry = Duration::from_millis(200);
    let consumer = InboxConsumer::builder(setup.db.store().clone(), url, AMQP_QUEUE, Ship)
        .name("shipping")
        .prefetch(PREFETCH)
        .retry(RetryPolicy::new(retry, retry, 0.0)?)
        .max_deliveries(u32::MAX)
        .build()?;
    let stop = CancellationToken::new();
    let consuming = tokio::spawn({
        let stop = stop.clone();
        async move { Ok(consumer.run(stop).await?) }
    });
    let plan = Plan {
        label: "RabbitMQ",
        load,
        down,
        spec,
        counts_losses: true,
        consumer: consuming,
        stop_consuming: stop,
    };
    let outage =
        broker_outage::run(&mut setup, ctx.run, &ctx.progress, broker, plan, report).await?;
    let bound = outage.unanswered as u64 + u64::from(PREFETCH);
    report.check(
        "copies suppressed by the inbox only where a confirm or an ack was lost",
        outage.consumed.duplicates <= bound,
        format!(
            "{} duplicates; {} publishes without a confirm, {PREFETCH} messages in hand at most",
            outage.consumed.duplicates, outage.unanswered
        ),
    );
    Ok(())
}
