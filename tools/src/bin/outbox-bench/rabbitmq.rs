//! RabbitMQ: publishing through the relay against raw lapin with confirms
//! in flight, and against the publisher a user writes by hand.

use std::time::Instant;

use diesel_outbox_rabbitmq::RabbitPublisher;
use diesel_outbox_testkit::rabbitmq::{TestQueue, broker_url};
use futures_util::{StreamExt, stream::FuturesUnordered};
use lapin::{
    BasicProperties, Channel, Confirmation,
    options::{BasicPublishOptions, ConfirmSelectOptions},
    types::{AMQPValue, FieldTable, LongString},
};

use super::{
    Plan,
    figure::Figure,
    publishing::{IN_FLIGHT, KIND, Names, Sink, against_hand_written, through_relay},
    raw::{Claimed, Raw},
};

/// A queue of one run, bound to its exchange, and a confirming channel to
/// publish there by hand.
struct Queue {
    queue: TestQueue,
    channel: Channel,
}

impl Queue {
    async fn create(name: &str) -> anyhow::Result<Self> {
        let queue = TestQueue::create(name).await?;
        let channel = queue.connection().create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Self { queue, channel })
    }

    /// Sends the message the relay's publisher sends for the first attempt
    /// of task `id` (persistent, mandatory, its id and the outbox headers);
    /// returns its confirm.
    async fn send(&self, id: i64, payload: &[u8]) -> anyhow::Result<lapin::PublisherConfirm> {
        let mut headers = FieldTable::default();
        headers.insert(
            diesel_outbox_core::wire::TASK_ID.into(),
            AMQPValue::LongLongInt(id),
        );
        headers.insert(
            diesel_outbox_core::wire::KIND.into(),
            AMQPValue::LongString(LongString::from(KIND)),
        );
        headers.insert(
            diesel_outbox_core::wire::VERSION.into(),
            AMQPValue::LongInt(1),
        );
        headers.insert(
            diesel_outbox_core::wire::ATTEMPT.into(),
            AMQPValue::LongLongInt(1),
        );
        let properties = BasicProperties::default()
            .with_message_id(format!("outbox:{id}").into())
            .with_type(KIND.into())
            .with_delivery_mode(2)
            .with_headers(headers);
        Ok(self
            .channel
            .basic_publish(
                self.queue.exchange().into(),
                self.queue.routing_key().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                payload,
                properties,
            )
            .await?)
    }
}

/// What a confirm must be for a message to count as stored.
fn stored(confirm: Confirmation) -> anyhow::Result<()> {
    match confirm {
        Confirmation::Ack(None) => Ok(()),
        other => anyhow::bail!("the broker did not store a message: {other:?}"),
    }
}

impl Sink for Queue {
    async fn publish_batch(&self, claimed: Vec<Claimed>) -> anyhow::Result<Vec<i64>> {
        let mut confirms = FuturesUnordered::new();
        let mut ids = Vec::with_capacity(claimed.len());
        for row in claimed {
            confirms.push(self.send(row.id, &row.payload).await?);
            ids.push(row.id);
        }
        while let Some(confirm) = confirms.next().await {
            stored(confirm?)?;
        }
        Ok(ids)
    }

    async fn count(&self) -> anyhow::Result<u64> {
        Ok(u64::from(self.queue.ready(self.queue.queue()).await?))
    }
}

/// Tasks/s of one relay publishing `count` pending tasks through the
/// RabbitMQ publisher, [`IN_FLIGHT`] handler slots.
async fn relay<B: Raw>(db: &B, count: u64) -> anyhow::Result<f64> {
    let sink = Queue::create("bench_amqp_relay").await?;
    let publisher = RabbitPublisher::builder(broker_url())
        .route(KIND, 1, sink.queue.exchange(), sink.queue.routing_key())
        .build()?;
    through_relay(db, &sink, publisher, count).await
}

/// Tasks/s of lapin publishing the relay's messages, [`IN_FLIGHT`] confirms
/// outstanding, reading no database.
async fn raw(count: u64) -> anyhow::Result<f64> {
    let queue = Queue::create("bench_amqp_raw").await?;
    let started = Instant::now();
    let mut confirms = FuturesUnordered::new();
    for id in 1..=i64::try_from(count)? {
        if confirms.len() >= IN_FLIGHT
            && let Some(confirm) = confirms.next().await
        {
            stored(confirm?)?;
        }
        let payload = format!("{{\"order\":{id}}}").into_bytes();
        confirms.push(queue.send(id, &payload).await?);
    }
    while let Some(confirm) = confirms.next().await {
        stored(confirm?)?;
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(
        queue.count().await? == count,
        "the queue is missing messages"
    );
    Ok(rate)
}

/// The relay with the RabbitMQ publisher against the overlapping
/// hand-written publisher (target 0.90x) and raw lapin publishing, with
/// [`IN_FLIGHT`] confirms in flight everywhere.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Figure>> {
    let names = Names {
        broker: "RabbitMQ",
        plot: "RabbitMQ: the relay, against a hand-written publisher",
        raw: "lapin, 256 confirms in flight",
        hand_written: "hand-written publisher, 2 connections: claim next, publish with confirms, complete previous at once",
    };
    against_hand_written(
        db,
        plan,
        &names,
        0.90,
        |count| relay(db, count),
        raw,
        || Queue::create("bench_amqp_overlap"),
    )
    .await
}
