//! Scenario 5: publishing through the relay vs raw async-nats with PubAck.

use std::time::Instant;

use async_nats::{HeaderMap, HeaderName, HeaderValue, Subject, jetstream::message::PublishMessage};
use diesel_outbox_nats::JetStreamPublisher;
use diesel_outbox_testkit::nats::TestStream;
use futures_util::{StreamExt, stream::FuturesUnordered};

use super::{
    Plan,
    drain::{Shape, raw_loop, timed},
    figure::{CPU_UNIT, Cpu, Figure, Plot},
    publishing::{
        IN_FLIGHT, KIND, Sink, hand_written, hand_written_overlapping, pending, through_relay,
    },
    raw::{Claimed, Prepare, Raw},
    stats::median,
};

/// Tasks/s of one relay publishing `count` pending tasks through the
/// JetStream publisher, [`IN_FLIGHT`] handler slots.
async fn relay<B: Raw>(db: &B, count: u64) -> anyhow::Result<f64> {
    let sink = Stream::create("bench_relay").await?;
    let publisher = JetStreamPublisher::builder(sink.stream.jetstream().clone())
        .subject_prefix(sink.stream.prefix())
        .route(KIND, 1)
        .build()?;
    through_relay(db, &sink, publisher, count).await
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

/// A JetStream stream of one run and the subject the relay's publisher
/// sends the bench's kind to there.
struct Stream {
    stream: TestStream,
    subject: Subject,
}

impl Stream {
    async fn create(name: &str) -> anyhow::Result<Self> {
        let stream = TestStream::create(name).await?;
        let subject = subject(&stream);
        Ok(Self { stream, subject })
    }
}

impl Sink for Stream {
    /// Publishes `claimed` with all their PubAcks in flight together.
    async fn publish_batch(&self, claimed: Vec<Claimed>) -> anyhow::Result<Vec<i64>> {
        let mut acks = FuturesUnordered::new();
        let mut ids = Vec::with_capacity(claimed.len());
        for row in claimed {
            let message = message(u64::try_from(row.id)?, row.payload);
            let ack = self
                .stream
                .jetstream()
                .send_publish(self.subject.clone(), message)
                .await?;
            acks.push(ack.into_future());
            ids.push(row.id);
        }
        while let Some(ack) = acks.next().await {
            ack?;
        }
        Ok(ids)
    }

    async fn count(&self) -> anyhow::Result<u64> {
        self.stream.count().await
    }
}

/// Tasks/s of the hand-written claim + complete loop over `count` pending
/// tasks, on two connections, claims of [`IN_FLIGHT`], publishing nothing:
/// what the hand-written statements give a drain of this size alone, a
/// reference rather than a bound (the library's own drains beat the raw
/// loop on MariaDB). A relay claims and completes every task too, and
/// publishes it besides.
async fn reference_drain<B: Raw>(db: &B, count: u64) -> anyhow::Result<f64> {
    let shape = Shape {
        workers: 2,
        batch: IN_FLIGHT,
    };
    raw_loop(db, count, shape, Prepare::Once).await
}

/// The relay with the JetStream publisher vs raw publishing, vs the
/// publisher a user writes by hand (plain, and overlapping its round
/// trips), and the raw drain loop alone beside them as a reference,
/// interleaved; and this process's CPU per task for the relay and the
/// hand-written publishers.
///
/// The targets are against the overlapping hand-written publisher, the
/// best a user writes by hand: at least 0.95x its rate, at most 1.3x its
/// CPU per task. The reference row shows what the hand-written statements
/// alone, publishing nothing, give; the ratio to raw publishing is shown
/// without a target (no program on two cores came near it, the
/// hand-written ones included). The CPU figures count from a loop's start
/// (its stream's creation included) to its last check, not the table's
/// fill.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Figure>> {
    let count = plan.nats_tasks;
    let (mut library, mut baseline) = (Vec::new(), Vec::new());
    let (mut database, mut by_hand, mut overlapping) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpu_relay, mut cpu_by_hand, mut cpu_overlapping) =
        (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..plan.runs {
        pending(db, count).await?;
        timed(count, relay(db, count), &mut library, &mut cpu_relay).await?;
        baseline.push(raw(count).await?);
        pending(db, count).await?;
        database.push(reference_drain(db, count).await?);
        pending(db, count).await?;
        let plain = async {
            let sink = Stream::create("bench_hand").await?;
            hand_written(db, &sink, count).await
        };
        timed(count, plain, &mut by_hand, &mut cpu_by_hand).await?;
        pending(db, count).await?;
        let overlap = async {
            let sink = Stream::create("bench_overlap").await?;
            hand_written_overlapping(db, &sink, count).await
        };
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
        unit: CPU_UNIT,
        library,
        baseline,
        ratio: library / baseline,
        higher_is_better: false,
        runs: plan.runs,
        target: None,
        baseline_name,
        cpu: None,
        plot: Plot::None,
    };
    // The relay's CPU per task, beside its baseline's where it was measured.
    let relay_cpu = |baseline: Option<f64>| {
        Some(Cpu {
            library: cpu_relay,
            baseline,
        })
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
        cpu: None,
        plot: Plot::None,
    };
    Ok(vec![
        Figure {
            cpu: relay_cpu(None),
            plot: Plot::Throughput("JetStream: the relay, against raw async-nats"),
            ..figure(
                format!("publish {count} to JetStream through the relay"),
                library,
                baseline,
                None,
                "async-nats, 256 PubAcks in flight",
            )
        },
        figure(
            format!(
                "publish {count}: reference, the raw claim + complete loop alone (batch 256, 2 connections, publishing nothing)"
            ),
            database,
            baseline,
            None,
            "async-nats, 256 PubAcks in flight",
        ),
        Figure {
            cpu: relay_cpu(Some(cpu_by_hand)),
            plot: Plot::Throughput("JetStream: the relay, against a hand-written publisher"),
            ..figure(
                format!(
                    "publish {count} to JetStream through the relay, against a hand-written publisher"
                ),
                library,
                by_hand,
                None,
                "hand-written publisher: claim 256, publish, complete",
            )
        },
        Figure {
            cpu: relay_cpu(Some(cpu_overlapping)),
            ..figure(
                format!(
                    "publish {count} to JetStream through the relay, against a hand-written publisher overlapping its round trips"
                ),
                library,
                overlapping,
                Some(0.95),
                "hand-written publisher, 2 connections: claim next, publish, complete previous at once",
            )
        },
        Figure {
            cpu: relay_cpu(None),
            ..figure(
                format!("publish {count} to JetStream through the relay, against that reference"),
                library,
                database,
                None,
                "raw claim + complete loop, batch 256, publishing nothing",
            )
        },
        cpu(
            format!("publish {count}: this process's CPU per task, relay"),
            cpu_relay,
            cpu_by_hand,
            "hand-written publisher",
        ),
        Figure {
            target: Some(1.3),
            ..cpu(
                format!(
                    "publish {count}: this process's CPU per task, relay against the hand-written publisher overlapping its round trips"
                ),
                cpu_relay,
                cpu_overlapping,
                "hand-written publisher overlapping its round trips",
            )
        },
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
