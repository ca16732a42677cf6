//! Redis Streams: publishing through the relay against pipelined raw
//! `XADD`s, and against the publisher a user writes by hand; and Redis's
//! own processor time per message, the publisher's script against a plain
//! `XADD`.

use std::{ops::RangeInclusive, sync::Mutex, time::Instant};

use diesel_outbox_core::{Store as _, wire};
use diesel_outbox_redis::StreamPublisher;
use diesel_outbox_testkit::redis::TestRedis;
use redis::aio::MultiplexedConnection;

use super::{
    Plan,
    figure::{Figure, Plot},
    publishing::{
        IN_FLIGHT, KIND, Names, Sink, against_hand_written, hand_written_overlapping, pending,
        through_relay,
    },
    raw::{Claimed, Raw},
    stats::median,
};

/// A stream of one run and a connection to add to it by hand, with the
/// id of the outbox whose tasks it takes.
struct Stream {
    redis: TestRedis,
    stream: String,
    connection: MultiplexedConnection,
    outbox: String,
}

impl Stream {
    async fn create(name: &str, outbox: &str) -> anyhow::Result<Self> {
        let redis = TestRedis::create(name).await?;
        let stream = redis.name("stream");
        let connection = redis.connection().await?;
        Ok(Self {
            redis,
            stream,
            connection,
            outbox: outbox.to_owned(),
        })
    }

    /// The `XADD` of the entry the relay's publisher adds for the first
    /// attempt of task `id` (its message id, the outbox fields, the
    /// payload last).
    fn add(&self, id: i64, payload: &[u8]) -> redis::Cmd {
        let mut add = redis::cmd("XADD");
        add.arg(&self.stream).arg("*");
        entry(&mut add, &self.outbox, id, payload);
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

/// How many arguments [`entry`] appends.
const ENTRY_ARGS: usize = 14;

/// Appends the fields of the entry of task `id` of `outbox` to `command`,
/// as the relay's publisher writes them: its message id, the outbox
/// fields, the payload last.
fn entry(command: &mut redis::Cmd, outbox: &str, id: i64, payload: &[u8]) {
    command
        .arg("message_id")
        .arg(message_id(outbox, id))
        .arg(wire::TASK_ID)
        .arg(id)
        .arg(wire::KIND)
        .arg(KIND)
        .arg(wire::VERSION)
        .arg(1)
        .arg(wire::ATTEMPT)
        .arg(1)
        .arg(wire::SOURCE)
        .arg(outbox)
        .arg("payload")
        .arg(payload);
}

/// The message id of task `id` of `outbox`.
fn message_id(outbox: &str, id: i64) -> String {
    format!("{outbox}:{id}")
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

/// The script the Streams publisher runs: a careful user who wants the same
/// dedup window writes the same one.
const ADD_ONCE: &str = include_str!("../../../../outbox-redis/src/streams/add_once.lua");

/// How long the hand-written script remembers a message id: the
/// publisher's default window, in milliseconds.
const WINDOW_MS: u128 = diesel_outbox_redis::DEFAULT_DEDUP_WINDOW.as_millis();

/// A stream a hand-written publisher adds to through the Streams
/// publisher's own script, loaded once: the same work on Redis's side,
/// written by hand.
struct OnceStream {
    stream: Stream,
    sha: String,
}

impl OnceStream {
    async fn create(name: &str, outbox: &str) -> anyhow::Result<Self> {
        let stream = Stream::create(name, outbox).await?;
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(ADD_ONCE)
            .query_async(&mut stream.connection.clone())
            .await?;
        Ok(Self { stream, sha })
    }
}

impl Sink for OnceStream {
    async fn publish_batch(&self, claimed: Vec<Claimed>) -> anyhow::Result<Vec<i64>> {
        let (stream, outbox) = (&self.stream.stream, &self.stream.outbox);
        let mut call = redis::cmd("EVALSHA");
        call.arg(&self.sha).arg(2 * claimed.len());
        for row in &claimed {
            call.arg(diesel_outbox_redis::dedup_key(
                stream,
                &message_id(outbox, row.id),
            ))
            .arg(stream);
        }
        call.arg(WINDOW_MS).arg(0);
        for row in &claimed {
            call.arg(format!("{outbox} {} {KIND}", row.id))
                .arg(ENTRY_ARGS);
            entry(&mut call, outbox, row.id, &row.payload);
        }
        // One reply per message: {added, entry id, same task}.
        let replies: Vec<(i64, String, i64)> = call
            .query_async(&mut self.stream.connection.clone())
            .await?;
        let added = replies.iter().filter(|(added, _, _)| *added == 1).count();
        anyhow::ensure!(
            added == claimed.len(),
            "Redis added {added} of {}",
            claimed.len()
        );
        Ok(claimed.iter().map(|row| row.id).collect())
    }

    async fn count(&self) -> anyhow::Result<u64> {
        self.stream.count().await
    }
}

/// What Redis has done since it started: its main thread's processor
/// time in microseconds (`INFO cpu`), and how many times it ran `command`
/// (`INFO commandstats`), for every client.
async fn server_work(
    connection: &MultiplexedConnection,
    command: &str,
) -> anyhow::Result<(f64, u64)> {
    let info = |section: &'static str| {
        let mut connection = connection.clone();
        async move {
            redis::cmd("INFO")
                .arg(section)
                .query_async::<String>(&mut connection)
                .await
        }
    };
    let cpu = info("cpu").await?;
    let seconds = |name: &str| -> anyhow::Result<f64> {
        let prefix = format!("{name}:");
        let value = cpu
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .ok_or_else(|| anyhow::anyhow!("Redis's INFO cpu has no {name}"))?;
        Ok(value.trim().parse()?)
    };
    let cpu_us =
        (seconds("used_cpu_user_main_thread")? + seconds("used_cpu_sys_main_thread")?) * 1e6;
    let stats = info("commandstats").await?;
    let prefix = format!("cmdstat_{command}:calls=");
    let calls = match stats.lines().find_map(|line| line.strip_prefix(&prefix)) {
        Some(rest) => rest
            .split(',')
            .next()
            .unwrap_or_default()
            .parse()
            .map_err(|e| anyhow::anyhow!("Redis's stats of {command}: {e}"))?,
        None => 0,
    };
    Ok((cpu_us, calls))
}

/// Redis's processor time per message of `count` added while `run` ran,
/// pushed to `into` beside `run`'s rate, which it returns. Fails unless
/// Redis ran the command `calls` names a number of times in its range
/// meanwhile: more says another client shared the server, and its
/// processor time with it.
async fn with_server_time(
    connection: &MultiplexedConnection,
    (command, calls): (&str, RangeInclusive<u64>),
    count: u64,
    into: &Mutex<Vec<f64>>,
    run: impl Future<Output = anyhow::Result<f64>>,
) -> anyhow::Result<f64> {
    let (cpu_before, calls_before) = server_work(connection, command).await?;
    let rate = run.await?;
    let (cpu_after, calls_after) = server_work(connection, command).await?;
    let ran = calls_after.saturating_sub(calls_before);
    anyhow::ensure!(
        calls.contains(&ran),
        "Redis ran {command} {ran} times for {count} messages ({calls:?} expected): another \
         client shares the server, so its processor time per message cannot be read"
    );
    push(into, (cpu_after - cpu_before).max(0.0) / count as f64)?;
    Ok(rate)
}

/// `EVALSHA`: one call per claim at most, each of at most [`IN_FLIGHT`]
/// messages, for `count` messages.
fn script_calls(count: u64) -> (&'static str, RangeInclusive<u64>) {
    ("evalsha", count.div_ceil(IN_FLIGHT as u64)..=count)
}

/// `XADD`: one per message.
fn adds(count: u64) -> (&'static str, RangeInclusive<u64>) {
    ("xadd", count..=count)
}

/// Tasks/s of one relay publishing `count` pending tasks through the
/// Streams publisher, [`IN_FLIGHT`] handler slots, with the default dedup
/// window or `without_dedup_window`; Redis's processor time per message
/// goes to `server`.
async fn relay<B: Raw>(
    db: &B,
    count: u64,
    outbox: &str,
    windowed: bool,
    server: &Mutex<Vec<f64>>,
) -> anyhow::Result<f64> {
    let sink = Stream::create("bench_redis_relay", outbox).await?;
    let publisher = StreamPublisher::builder(sink.redis.url()).route(KIND, 1, &sink.stream);
    let (publisher, calls) = if windowed {
        (publisher, script_calls(count))
    } else {
        (publisher.without_dedup_window(), adds(count))
    };
    let run = through_relay(db, &sink, publisher.build()?, count);
    with_server_time(&sink.connection, calls, count, server, run).await
}

/// Tasks/s of pipelined `XADD`s of the relay's entries, [`IN_FLIGHT`] per
/// pipeline, reading no database; Redis's processor time per `XADD` goes
/// to `server`.
async fn raw(count: u64, outbox: &str, server: &Mutex<Vec<f64>>) -> anyhow::Result<f64> {
    let stream = Stream::create("bench_redis_raw", outbox).await?;
    let run = pipelined_adds(&stream, count);
    with_server_time(&stream.connection, adds(count), count, server, run).await
}

/// Tasks/s of `count` pipelined `XADD`s to `stream`, [`IN_FLIGHT`] per
/// pipeline.
async fn pipelined_adds(stream: &Stream, count: u64) -> anyhow::Result<f64> {
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

/// Tasks/s of the overlapping hand-written publisher adding `count`
/// pending tasks through the Streams publisher's script.
async fn scripted_overlapping<B: Raw>(db: &B, count: u64, outbox: &str) -> anyhow::Result<f64> {
    pending(db, count).await?;
    let sink = OnceStream::create("bench_redis_overlap_once", outbox).await?;
    hand_written_overlapping(db, &sink, count).await
}

/// Adds `figure` to the figures of every run so far.
fn push(into: &Mutex<Vec<f64>>, figure: f64) -> anyhow::Result<()> {
    into.lock()
        .map_err(|_| anyhow::anyhow!("a run panicked"))?
        .push(figure);
    Ok(())
}

/// The relay with the Streams publisher against the overlapping
/// hand-written publisher (target 0.90x) and raw pipelined `XADD`s; the
/// same hand-written publisher running the publisher's script; the relay
/// with a publisher that keeps no dedup window; and Redis's own time per
/// message in the publisher's script (which remembers each message id for
/// the dedup window and adds the entry) and without it, against a plain
/// `XADD` of the same entry.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Figure>> {
    let names = Names {
        broker: "Redis Streams",
        plot: "Redis Streams: the relay, against a hand-written publisher",
        raw: "raw XADD, 256 per pipeline",
        hand_written: "hand-written publisher, 2 connections: claim next, pipeline XADDs, complete previous at once",
    };
    let (script, adds) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    let (scripted, plain, plain_adds) = (
        Mutex::new(Vec::new()),
        Mutex::new(Vec::new()),
        Mutex::new(Vec::new()),
    );
    let (adding, scripting, plainly, plain_adding) = (&adds, &scripted, &plain, &plain_adds);
    // Every entry carries this outbox's id, as the relay's do.
    let outbox = db.store().outbox_id().await?.as_str().to_owned();
    let outbox = outbox.as_str();
    let mut figures = against_hand_written(
        db,
        plan,
        &names,
        0.90,
        |count| relay(db, count, outbox, true, &script),
        // Each run's raw step also runs the hand-written publisher with the
        // publisher's script, and the relay without a dedup window, so
        // that their runs interleave with the others.
        |count| async move {
            let rate = raw(count, outbox, adding).await?;
            let once = scripted_overlapping(db, count, outbox).await?;
            push(scripting, once)?;
            pending(db, count).await?;
            let without = relay(db, count, outbox, false, plain_adding).await?;
            push(plainly, without)?;
            Ok(rate)
        },
        || Stream::create("bench_redis_overlap", outbox),
    )
    .await?;
    let taken = |times: Mutex<Vec<f64>>| {
        times
            .into_inner()
            .map(|times| median(&times))
            .map_err(|_| anyhow::anyhow!("a run panicked"))
    };
    let (scripted, plain, plain_adds) = (taken(scripted)?, taken(plain)?, taken(plain_adds)?);
    // The first figure is the relay's against the target.
    let (library, overlapping) = figures
        .first()
        .filter(|relay| relay.target.is_some())
        .map(|relay| (relay.library, relay.baseline))
        .ok_or_else(|| anyhow::anyhow!("no relay figure"))?;
    let count = plan.nats_tasks;
    // A figure without a target: a rate (tasks/s) or Redis's processor
    // time per message, against `baseline`.
    let figure = |scenario: String, unit, library: f64, baseline: f64, baseline_name| Figure {
        backend: B::NAME,
        scenario,
        unit,
        library,
        baseline,
        ratio: library / baseline,
        higher_is_better: unit == "tasks/s",
        runs: plan.runs,
        target: None,
        baseline_name,
        cpu: None,
        plot: Plot::None,
    };
    let (script, adds) = (taken(script)?, taken(adds)?);
    figures.extend([
        figure(
            format!(
                "publish {count} to Redis Streams through the relay, against a hand-written publisher overlapping its round trips and running the same dedup script"
            ),
            "tasks/s",
            library,
            scripted,
            "hand-written publisher, 2 connections: claim next, the publisher's script for each batch, complete previous at once",
        ),
        figure(
            format!(
                "publish {count} to Redis Streams through the relay without a dedup window, against a hand-written publisher overlapping its round trips"
            ),
            "tasks/s",
            plain,
            overlapping,
            names.hand_written,
        ),
        figure(
            format!(
                "publish {count} to Redis Streams: Redis's processor time per message, the publisher's script (GET, XADD, SET) against XADD"
            ),
            "us Redis CPU/message",
            script,
            adds,
            names.raw,
        ),
        figure(
            format!(
                "publish {count} to Redis Streams: Redis's processor time per message, the publisher without a dedup window (XADD) against XADD"
            ),
            "us Redis CPU/message",
            plain_adds,
            adds,
            names.raw,
        ),
    ]);
    Ok(figures)
}
