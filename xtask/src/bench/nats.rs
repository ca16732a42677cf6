//! Scenario 5: publishing through the relay vs raw async-nats with PubAck.

use std::{sync::Arc, time::Instant};

use async_nats::{HeaderMap, HeaderName, HeaderValue, Subject, jetstream::message::PublishMessage};
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
    drain::{raw_loop, timed},
    raw::{Claimed, Prepare, Raw},
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

/// Empties the table and fills it with `count` pending tasks, before a
/// loop that drains them starts its clock and its CPU count.
async fn pending<B: Raw>(db: &B, count: u64) -> anyhow::Result<()> {
    db.reset().await?;
    db.fill_pending(count, KIND).await
}

/// The rate of a hand-written publisher that started at `started`, once its
/// work checks out: `count` tasks published, in the stream, and marked
/// succeeded.
async fn checked_rate<B: Raw>(
    db: &B,
    stream: &TestStream,
    started: Instant,
    published: u64,
    count: u64,
    publisher: &str,
) -> anyhow::Result<f64> {
    let rate = count as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(
        published == count && stream.count().await? == count,
        "the {publisher} published {published} of {count}"
    );
    let succeeded = db.count("outbox_tasks WHERE status = 'succeeded'").await?;
    anyhow::ensure!(
        u64::try_from(succeeded)? == count,
        "the {publisher} marked {succeeded} of {count} tasks succeeded"
    );
    Ok(rate)
}

/// Tasks/s of one relay publishing `count` pending tasks, [`IN_FLIGHT`]
/// handlers at once.
async fn through_relay<B: Raw>(db: &B, count: u64) -> anyhow::Result<f64> {
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
            // Through the publisher's own `Handler`, which `register` gives
            // the registry (it moves the payload into the message), then
            // counted.
            async move {
                let id = delivery.id;
                publisher.handle(delivery).await?;
                counting.count(id);
                Ok(())
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

/// The outbox's header names, built once from static strings, as the
/// publisher builds them.
const TASK_ID: HeaderName = HeaderName::from_static(diesel_outbox_nats::headers::TASK_ID);
const KIND_NAME: HeaderName = HeaderName::from_static(diesel_outbox_nats::headers::KIND);
const VERSION: HeaderName = HeaderName::from_static(diesel_outbox_nats::headers::VERSION);
const ATTEMPT: HeaderName = HeaderName::from_static(diesel_outbox_nats::headers::ATTEMPT);

/// The message the relay's publisher sends for the first attempt of task
/// `id` of the bench's kind (version 1, no headers of its own).
fn message(id: u64, payload: Vec<u8>) -> PublishMessage {
    let mut headers = HeaderMap::new();
    headers.insert(TASK_ID, HeaderValue::from(id));
    headers.insert(KIND_NAME, HeaderValue::from(KIND));
    headers.insert(VERSION, HeaderValue::from(1_i32));
    headers.insert(ATTEMPT, HeaderValue::from(1_i32));
    PublishMessage::build()
        .payload(payload.into())
        .headers(headers)
        .message_id(format!("outbox:{id}"))
}

/// The subject the relay's publisher sends the bench's kind to in `stream`,
/// built once: each message clones it by reference count.
fn subject(stream: &TestStream) -> Subject {
    Subject::from(format!("{}.{KIND}.v1", stream.prefix()))
}

/// Tasks/s of async-nats publishing messages with the relay's subject and
/// headers, [`IN_FLIGHT`] acks outstanding.
async fn raw(count: u64) -> anyhow::Result<f64> {
    let stream = TestStream::create("bench_raw").await?;
    let subject = subject(&stream);
    let jetstream = stream.jetstream().clone();
    let started = Instant::now();
    let mut acks = FuturesUnordered::new();
    for id in 1..=count {
        if acks.len() >= IN_FLIGHT
            && let Some(ack) = acks.next().await
        {
            ack?;
        }
        let payload = format!("{{\"order\":{id}}}").into_bytes();
        let ack = jetstream
            .send_publish(subject.clone(), message(id, payload))
            .await?;
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

/// Publishes `claimed` with all their PubAcks in flight together, and
/// returns their ids once every one is acknowledged.
async fn publish_batch(
    stream: &TestStream,
    subject: &Subject,
    claimed: Vec<Claimed>,
) -> anyhow::Result<Vec<i64>> {
    let mut acks = FuturesUnordered::new();
    let mut ids = Vec::with_capacity(claimed.len());
    for row in claimed {
        let message = message(u64::try_from(row.id)?, row.payload);
        let ack = stream
            .jetstream()
            .send_publish(subject.clone(), message)
            .await?;
        acks.push(ack.into_future());
        ids.push(row.id);
    }
    while let Some(ack) = acks.next().await {
        ack?;
    }
    Ok(ids)
}

/// Tasks/s of the publisher a careful user writes by hand over `count`
/// pending tasks, on one connection: claim [`IN_FLIGHT`] with the raw drain
/// loop's statement (prepared once), publish them all with their PubAcks in
/// flight together, mark them succeeded, and claim again. (Two such loops
/// of half as many each measured no faster.)
async fn hand_written<B: Raw>(db: &B, count: u64) -> anyhow::Result<f64> {
    let stream = TestStream::create("bench_hand").await?;
    let subject = subject(&stream);
    let mut conn = db.drain_connection().await?;
    let (mut published, mut after) = (0_u64, 0);
    let started = Instant::now();
    loop {
        let claimed = B::claim_batch(&mut conn, i64::try_from(IN_FLIGHT)?, after).await?;
        let Some(last) = claimed.last().map(|row| row.id) else {
            break;
        };
        let ids = publish_batch(&stream, &subject, claimed).await?;
        B::complete_batch(&mut conn, &ids).await?;
        published += ids.len() as u64;
        after = last;
    }
    checked_rate(
        db,
        &stream,
        started,
        published,
        count,
        "hand-written publisher",
    )
    .await
}

/// Tasks/s of the hand-written publisher with its round trips overlapped,
/// on two connections: while one batch of [`IN_FLIGHT`] is published, the
/// next is claimed on one connection and the batch before is marked
/// succeeded on the other, so the database's round trips hide behind the
/// PubAcks. What a user writes once the plain loop is too slow. Like the
/// relay, it looks from the lowest id again before it stops.
async fn hand_written_overlapping<B: Raw>(db: &B, count: u64) -> anyhow::Result<f64> {
    let stream = TestStream::create("bench_overlap").await?;
    let subject = subject(&stream);
    let mut claiming = db.drain_connection().await?;
    let mut completing = db.drain_connection().await?;
    let limit = i64::try_from(IN_FLIGHT)?;
    let started = Instant::now();
    let mut claimed = B::claim_batch(&mut claiming, limit, 0).await?;
    let (mut published, mut done) = (0_u64, Vec::new());
    loop {
        let Some(after) = claimed.last().map(|row| row.id) else {
            // Nothing past the cursor. `SKIP LOCKED` may have passed over
            // rows while the other connection's write was under way
            // (MariaDB was seen doing so, with no other claim running):
            // finish that write, then look from the lowest id once more
            // before stopping.
            B::complete_batch(&mut completing, &std::mem::take(&mut done)).await?;
            claimed = B::claim_batch(&mut claiming, limit, 0).await?;
            if claimed.is_empty() {
                break;
            }
            continue;
        };
        let (sent, next, completed) = tokio::join!(
            publish_batch(&stream, &subject, std::mem::take(&mut claimed)),
            B::claim_batch(&mut claiming, limit, after),
            B::complete_batch(&mut completing, &done),
        );
        completed?;
        done = sent?;
        published += done.len() as u64;
        claimed = next?;
    }
    checked_rate(
        db,
        &stream,
        started,
        published,
        count,
        "overlapping hand-written publisher",
    )
    .await
}

/// Tasks/s of the hand-written claim + complete loop over `count` pending
/// tasks, on two connections, claims of [`IN_FLIGHT`], publishing nothing:
/// what the hand-written statements give a drain of this size alone, a
/// reference rather than a bound (the library's own drains beat the raw
/// loop on MariaDB). A relay claims and completes every task too, and
/// publishes it besides.
async fn reference_drain<B: Raw>(db: &B, count: u64) -> anyhow::Result<f64> {
    raw_loop(db, count, IN_FLIGHT, Prepare::Once).await
}

/// The relay with the JetStream publisher vs raw publishing, vs the
/// publisher a user writes by hand (plain, and overlapping its round
/// trips), and the raw drain loop alone beside them as a reference,
/// interleaved; and this process's CPU per task for the relay and the
/// hand-written publishers.
///
/// The reference row shows how near the hand-written statements alone,
/// publishing nothing, come to the target (0.5x raw publishing); the
/// hand-written publishers show what the whole job costs without the
/// library. The CPU figures count from a loop's start (its stream's
/// creation included) to its last check, not the table's fill.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Figure>> {
    let count = plan.nats_tasks;
    let (mut library, mut baseline) = (Vec::new(), Vec::new());
    let (mut database, mut by_hand, mut overlapping) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpu_relay, mut cpu_by_hand, mut cpu_overlapping) =
        (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..plan.runs {
        pending(db, count).await?;
        let relay = through_relay(db, count);
        timed(count, relay, &mut library, &mut cpu_relay).await?;
        baseline.push(raw(count).await?);
        pending(db, count).await?;
        database.push(reference_drain(db, count).await?);
        pending(db, count).await?;
        let plain = hand_written(db, count);
        timed(count, plain, &mut by_hand, &mut cpu_by_hand).await?;
        pending(db, count).await?;
        let overlap = hand_written_overlapping(db, count);
        timed(count, overlap, &mut overlapping, &mut cpu_overlapping).await?;
    }
    let (library, baseline) = (median(&library), median(&baseline));
    let (database, by_hand) = (median(&database), median(&by_hand));
    let overlapping = median(&overlapping);
    let (cpu_relay, cpu_by_hand) = (median(&cpu_relay), median(&cpu_by_hand));
    let cpu_overlapping = median(&cpu_overlapping);
    let cpu = |scenario: String, library: f64, baseline: f64, baseline_name| Figure {
        backend: B::NAME,
        scenario,
        unit: "us CPU/task",
        library,
        baseline,
        ratio: library / baseline,
        higher_is_better: false,
        runs: plan.runs,
        target: None,
        baseline_name,
    };
    let figure = |scenario: String, library: f64, baseline: f64, target, baseline_name| Figure {
        backend: B::NAME,
        scenario,
        unit: "tasks/s",
        library,
        baseline,
        ratio: library / baseline,
        higher_is_better: true,
        runs: plan.runs,
        target,
        baseline_name,
    };
    Ok(vec![
        figure(
            format!("publish {count} to JetStream through the relay"),
            library,
            baseline,
            Some(0.5),
            "async-nats, 256 PubAcks in flight",
        ),
        figure(
            format!(
                "publish {count}: reference, the raw claim + complete loop alone (batch 256, 2 connections, publishing nothing)"
            ),
            database,
            baseline,
            None,
            "async-nats, 256 PubAcks in flight",
        ),
        figure(
            format!(
                "publish {count} to JetStream through the relay, against a hand-written publisher"
            ),
            library,
            by_hand,
            None,
            "hand-written publisher: claim 256, publish, complete",
        ),
        figure(
            format!(
                "publish {count} to JetStream through the relay, against a hand-written publisher overlapping its round trips"
            ),
            library,
            overlapping,
            None,
            "hand-written publisher, 2 connections: claim next, publish, complete previous at once",
        ),
        figure(
            format!("publish {count} to JetStream through the relay, against that reference"),
            library,
            database,
            None,
            "raw claim + complete loop, batch 256, publishing nothing",
        ),
        cpu(
            format!("publish {count}: this process's CPU per task, relay"),
            cpu_relay,
            cpu_by_hand,
            "hand-written publisher",
        ),
        cpu(
            format!(
                "publish {count}: this process's CPU per task, hand-written publisher overlapping its round trips"
            ),
            cpu_overlapping,
            cpu_by_hand,
            "hand-written publisher",
        ),
    ])
}
