//! Scenario 5: publishing through the relay vs raw async-nats with PubAck.

use std::{sync::Arc, time::Instant};

use async_nats::{HeaderMap, jetstream::message::PublishMessage};
use diesel_outbox_core::{
    Delivery, Handler, Registry, Relay, RelayConfig, Worker, WorkerConfig, handler_fn,
};
use diesel_outbox_nats::JetStreamPublisher;
use diesel_outbox_testkit::nats::TestStream;
use futures_util::{StreamExt, stream::FuturesUnordered};
use tokio_util::sync::CancellationToken;

use super::{
    Plan,
    counting::Counting,
    raw::Raw,
    stats::{Figure, median},
};

const KIND: &str = "bench.nats";
/// Acknowledgements a publisher waits for at once, on both sides: the
/// relay runs this many handlers and claims up to this many tasks at a time
/// (what a publish-only handler should be given, since each one spends its
/// time waiting for a PubAck), and the raw loop keeps as many PubAcks
/// outstanding. With the worker's default of 32 handlers, the relay waits on
/// its claims' round trips with most handler slots idle.
const IN_FLIGHT: usize = 256;

/// Tasks/s of one relay publishing `count` pending tasks, [`IN_FLIGHT`]
/// handlers at once.
async fn through_relay<B: Raw>(db: &B, count: u64) -> anyhow::Result<f64> {
    db.reset().await?;
    db.fill_pending(count, KIND).await?;
    let stream = TestStream::create("bench_relay").await?;
    let publisher = Arc::new(
        JetStreamPublisher::builder(stream.jetstream().clone())
            .subject_prefix(stream.prefix())
            .route(KIND, 1)
            .build()?,
    );
    let counting = Counting::default();
    let handler = {
        let counting = counting.clone();
        handler_fn(move |delivery: Delivery| {
            let (publisher, counting) = (Arc::clone(&publisher), counting.clone());
            async move {
                publisher.publish(&delivery).await?;
                counting.handle(delivery).await
            }
        })
    };
    let registry = Registry::builder().handler(KIND, 1, handler).build()?;
    let relay = Relay::new(
        Worker::with_config(
            db.store().clone(),
            registry,
            WorkerConfig::default().concurrency(IN_FLIGHT),
        )?,
        RelayConfig::default().batch_size(IN_FLIGHT).retention(None),
    )?;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    });
    counting.wait_for(usize::try_from(count)?).await;
    shutdown.cancel();
    running.await?;
    let rate = count as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(
        stream.count().await? == count,
        "the stream is missing messages"
    );
    Ok(rate)
}

/// Tasks/s of async-nats publishing the same messages, [`IN_FLIGHT`] acks
/// outstanding.
async fn raw(count: u64) -> anyhow::Result<f64> {
    let stream = TestStream::create("bench_raw").await?;
    let subject = format!("{}.{KIND}.v1", stream.prefix());
    let jetstream = stream.jetstream().clone();
    let started = Instant::now();
    let mut acks = FuturesUnordered::new();
    for id in 1..=count {
        if acks.len() >= IN_FLIGHT
            && let Some(ack) = acks.next().await
        {
            ack?;
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            diesel_outbox_nats::headers::TASK_ID,
            id.to_string().as_str(),
        );
        headers.insert(diesel_outbox_nats::headers::KIND, KIND);
        headers.insert(diesel_outbox_nats::headers::VERSION, "1");
        headers.insert(diesel_outbox_nats::headers::ATTEMPT, "1");
        let message = PublishMessage::build()
            .payload(format!("{{\"order\":{id}}}").into_bytes().into())
            .headers(headers)
            .message_id(format!("outbox:{id}"));
        let ack = jetstream.send_publish(subject.clone(), message).await?;
        acks.push(ack.into_future());
    }
    while let Some(ack) = acks.next().await {
        ack?;
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(
        stream.count().await? == count,
        "the stream is missing messages"
    );
    Ok(rate)
}

/// The relay with the JetStream publisher vs raw publishing, interleaved.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Figure> {
    let count = plan.nats_tasks;
    let (mut library, mut baseline) = (Vec::new(), Vec::new());
    for _ in 0..plan.runs {
        library.push(through_relay(db, count).await?);
        baseline.push(raw(count).await?);
    }
    let (library, baseline) = (median(&library), median(&baseline));
    Ok(Figure {
        backend: B::NAME,
        scenario: format!("publish {count} to JetStream through the relay"),
        unit: "tasks/s",
        library,
        baseline,
        ratio: library / baseline,
        higher_is_better: true,
        runs: plan.runs,
        target: None,
        baseline_name: "async-nats, 256 PubAcks in flight",
    })
}
