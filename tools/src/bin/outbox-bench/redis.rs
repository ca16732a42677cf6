//! Redis Streams: publishing through the relay against pipelined raw
//! `XADD`s, and against the publisher a user writes by hand.

use std::time::Instant;

use diesel_outbox_core::wire;
use diesel_outbox_redis::StreamPublisher;
use diesel_outbox_testkit::redis::TestRedis;
use redis::aio::MultiplexedConnection;

use super::{
    Plan,
    figure::Figure,
    publishing::{IN_FLIGHT, KIND, Names, Sink, against_hand_written, through_relay},
    raw::{Claimed, Raw},
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
/// hand-written publisher (target 0.90x) and raw pipelined `XADD`s.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Figure>> {
    let names = Names {
        broker: "Redis Streams",
        plot: "Redis Streams: the relay, against a hand-written publisher",
        raw: "raw XADD, 256 per pipeline",
        hand_written: "hand-written publisher, 2 connections: claim next, pipeline XADDs, complete previous at once",
    };
    against_hand_written(
        db,
        plan,
        &names,
        0.90,
        |count| relay(db, count),
        raw,
        || Stream::create("bench_redis_overlap"),
    )
    .await
}
