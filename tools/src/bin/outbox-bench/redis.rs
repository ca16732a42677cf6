//! Redis Streams: publishing through the relay against pipelined raw
//! `XADD`s, and against the publisher a user writes by hand.

use std::time::Instant;

use diesel_outbox_core::wire;
use diesel_outbox_redis::StreamPublisher;
use diesel_outbox_testkit::redis::TestRedis;
use redis::aio::MultiplexedConnection;

use super::{
    Plan,
    drain::timed,
    figure::{CPU_UNIT, Cpu, Figure, Plot},
    publishing::{IN_FLIGHT, KIND, Sink, hand_written_overlapping, pending, through_relay},
    raw::{Claimed, Raw},
    stats::median,
};

/// A stream of one run and a connection to add to it by hand.
struct Stream {
    redis: TestRedis,
    stream: String,
    connection: MultiplexedConnection,
}

impl Stream {
    async fn create(name: &str) -> anyhow::Result<Self> {
        let redis = TestRedis::create(name).await?;
        let stream = redis.name("stream");
        let connection = redis.connection().await?;
        Ok(Self {
            redis,
            stream,
            connection,
        })
    }

    /// The `XADD` of the entry the relay's publisher adds for the first
    /// attempt of task `id` (its message id, the outbox fields, the
    /// payload last).
    fn add(&self, id: i64, payload: &[u8]) -> redis::Cmd {
        let mut add = redis::cmd("XADD");
        add.arg(&self.stream)
            .arg("*")
            .arg("message_id")
            .arg(format!("outbox:{id}"))
            .arg(wire::TASK_ID)
            .arg(id)
            .arg(wire::KIND)
            .arg(KIND)
            .arg(wire::VERSION)
            .arg(1)
            .arg(wire::ATTEMPT)
            .arg(1)
            .arg(wire::SOURCE)
            .arg("outbox")
            .arg("payload")
            .arg(payload);
        add
    }

    /// Sends `entries` in one pipeline and checks every reply is an id.
    async fn pipelined(&self, entries: impl Iterator<Item = redis::Cmd>) -> anyhow::Result<usize> {
        let mut pipe = redis::pipe();
        for add in entries {
            pipe.add_command(add);
        }
        let ids: Vec<String> = pipe.query_async(&mut self.connection.clone()).await?;
        Ok(ids.len())
    }
}

impl Sink for Stream {
    async fn publish_batch(&self, claimed: Vec<Claimed>) -> anyhow::Result<Vec<i64>> {
        let ids: Vec<i64> = claimed.iter().map(|row| row.id).collect();
        let added = self
            .pipelined(claimed.iter().map(|row| self.add(row.id, &row.payload)))
            .await?;
        anyhow::ensure!(added == ids.len(), "Redis added {added} of {}", ids.len());
        Ok(ids)
    }

    async fn count(&self) -> anyhow::Result<u64> {
        Ok(u64::try_from(self.redis.stream_len(&self.stream).await?)?)
    }
}

/// Tasks/s of one relay publishing `count` pending tasks through the
/// Streams publisher, [`IN_FLIGHT`] handler slots.
async fn relay<B: Raw>(db: &B, count: u64) -> anyhow::Result<f64> {
    let sink = Stream::create("bench_redis_relay").await?;
    let publisher = StreamPublisher::builder(sink.redis.url())
        .route(KIND, 1, &sink.stream)
        .build()?;
    through_relay(db, &sink, publisher, count).await
}

/// Tasks/s of pipelined `XADD`s of the relay's entries, [`IN_FLIGHT`] per
/// pipeline, reading no database.
async fn raw(count: u64) -> anyhow::Result<f64> {
    let stream = Stream::create("bench_redis_raw").await?;
    let started = Instant::now();
    let ids: Vec<i64> = (1..=i64::try_from(count)?).collect();
    for chunk in ids.chunks(IN_FLIGHT) {
        let added = stream
            .pipelined(
                chunk
                    .iter()
                    .map(|id| stream.add(*id, format!("{{\"order\":{id}}}").as_bytes())),
            )
            .await?;
        anyhow::ensure!(
            added == chunk.len(),
            "Redis added {added} of {}",
            chunk.len()
        );
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(
        stream.count().await? == count,
        "the stream is missing entries"
    );
    Ok(rate)
}

/// The relay with the Streams publisher against the overlapping
/// hand-written publisher (target 0.90x) and raw pipelined `XADD`s,
/// interleaved; and this process's CPU per task for the relay and the
/// hand-written publisher.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Figure>> {
    let count = plan.nats_tasks;
    let (mut library, mut baseline, mut overlapping) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpu_relay, mut cpu_overlapping) = (Vec::new(), Vec::new());
    for _ in 0..plan.runs {
        pending(db, count).await?;
        timed(count, relay(db, count), &mut library, &mut cpu_relay).await?;
        baseline.push(raw(count).await?);
        pending(db, count).await?;
        let overlap = async {
            let sink = Stream::create("bench_redis_overlap").await?;
            hand_written_overlapping(db, &sink, count).await
        };
        timed(count, overlap, &mut overlapping, &mut cpu_overlapping).await?;
    }
    let (library, baseline, overlapping) =
        (median(&library), median(&baseline), median(&overlapping));
    let (cpu_relay, cpu_overlapping) = (median(&cpu_relay), median(&cpu_overlapping));
    let figure = |scenario: String, baseline: f64, target, baseline_name| Figure {
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
            cpu: Some(Cpu {
                library: cpu_relay,
                baseline: Some(cpu_overlapping),
            }),
            plot: Plot::Throughput("Redis Streams: the relay, against a hand-written publisher"),
            ..figure(
                format!(
                    "publish {count} to Redis Streams through the relay, against a hand-written publisher overlapping its round trips"
                ),
                overlapping,
                Some(0.90),
                "hand-written publisher, 2 connections: claim next, pipeline XADDs, complete previous at once",
            )
        },
        figure(
            format!("publish {count} to Redis Streams through the relay"),
            baseline,
            None,
            "raw XADD, 256 per pipeline",
        ),
        Figure {
            backend: B::NAME,
            scenario: format!(
                "publish {count} to Redis Streams: this process's CPU per task, relay"
            ),
            unit: CPU_UNIT,
            library: cpu_relay,
            baseline: cpu_overlapping,
            ratio: cpu_relay / cpu_overlapping,
            higher_is_better: false,
            runs: plan.runs,
            target: None,
            baseline_name: "hand-written publisher overlapping its round trips",
            cpu: None,
            plot: Plot::None,
        },
    ])
}
