//! Kafka: publishing through the relay against raw confluent-kafka
//! producing with every acknowledgement in flight, and against the
//! publisher a user writes by hand.
//!
//! The broker is the one `OUTBOX_KAFKA_BOOTSTRAP` names, or else a `tansu`
//! of the bench's own, its data in memory, killed when the scenario ends.
//! Every run produces to a topic of its own.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use confluent_kafka::{
    common::{
        KafkaFuture, TopicPartition,
        header::{RecordHeader, RecordHeaders},
        serialization::ByteArraySerializer,
    },
    consumer::Consumer as _,
    producer::{KafkaProducer, Producer as _, ProducerConfig, ProducerRecord, RecordMetadata},
};
use diesel_outbox_core::{Store as _, wire};
use diesel_outbox_kafka::{KafkaPublisher, MESSAGE_ID};
use diesel_outbox_testkit::{
    kafka::{
        BOOTSTRAP_VAR, CLIENT_PROPERTIES, admin, create_topic, reader, tansu_args, tansu_program,
    },
    private_server::PrivateServer,
};
use futures_util::{StreamExt, stream::FuturesUnordered};
use tokio::sync::OnceCell;

use super::{
    Plan,
    figure::Figure,
    publishing::{IN_FLIGHT, KIND, Names, Sink, against_hand_written, through_relay},
    raw::{Claimed, Raw},
};

/// Partitions of each run's topic.
const PARTITIONS: i32 = 3;

/// The settings `KafkaPublisher` gives its producer unless told otherwise
/// (idempotent, `acks=all`, and its timeouts), which the hand-written
/// producers set too.
const PUBLISHER_SETTINGS: [(&str, &str); 5] = [
    ("acks", "all"),
    ("enable.idempotence", "true"),
    ("max.block.ms", "3000"),
    ("request.timeout.ms", "4000"),
    ("delivery.timeout.ms", "4500"),
];

/// `linger.ms` of every producer of the scenario, the relay's included.
/// Each side hands the producer a whole batch and then awaits it, so a
/// linger only holds the batch back: with the client's default (5 ms) both
/// sides waited on it alike, and the comparison measured the linger, not
/// the publishers.
const LINGER: (&str, &str) = ("linger.ms", "0");

/// How long a topic's count reads on after the last record it got, once
/// every partition gave some: the last batch of each comes whole, so this
/// only guards against more after it.
const QUIET: Duration = Duration::from_millis(100);

/// How long a topic's count waits for every partition with records to
/// give some.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the topics of a broker the bench did not start get to be
/// deleted at the end.
const DELETE_TIMEOUT: Duration = Duration::from_secs(10);

/// The cluster of one scenario: its bootstrap servers, the private broker
/// when the bench started one, the outbox id the relay's records carry,
/// and the topics made so far.
struct Cluster {
    bootstrap: String,
    /// The bench's own `tansu`, killed when dropped; none when
    /// `OUTBOX_KAFKA_BOOTSTRAP` names a cluster.
    private: Option<PrivateServer>,
    /// The outbox id of the bench's database: the `Outbox-Source` of every
    /// record, and the prefix of its `Outbox-Message-Id`.
    outbox: String,
    /// Names the next topic.
    next: AtomicU64,
    /// The topics made, to delete from a cluster the bench did not start.
    topics: Mutex<Vec<String>>,
}

impl Cluster {
    /// The cluster `OUTBOX_KAFKA_BOOTSTRAP` names, or a `tansu` started
    /// now with its data in memory, for the database of `db`.
    async fn start<B: Raw>(db: &B) -> anyhow::Result<Self> {
        let outbox = db.store().outbox_id().await?.as_str().to_owned();
        let named = std::env::var(BOOTSTRAP_VAR)
            .ok()
            .filter(|bootstrap| !bootstrap.trim().is_empty());
        let (bootstrap, private) = match named {
            Some(bootstrap) => (bootstrap, None),
            None => {
                let program = tansu_program();
                let server = tokio::task::spawn_blocking(move || {
                    PrivateServer::start("bench-tansu", &program, &tansu_args(false))
                })
                .await?
                .with_context(|| {
                    format!(
                        "starting tansu (a Kafka-protocol broker) for the Kafka scenario: \
                         `cargo xtask bench` installs it; or set {BOOTSTRAP_VAR}, or pass --no-kafka"
                    )
                })?;
                (format!("127.0.0.1:{}", server.port()), Some(server))
            }
        };
        Ok(Self {
            bootstrap,
            private,
            outbox,
            next: AtomicU64::new(1),
            topics: Mutex::new(Vec::new()),
        })
    }

    /// Client properties: the test clients' and `extra`, on this cluster.
    fn properties(&self, extra: &[(&str, &str)]) -> HashMap<String, String> {
        CLIENT_PROPERTIES
            .iter()
            .chain(extra)
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .chain([("bootstrap.servers".to_owned(), self.bootstrap.clone())])
            .collect()
    }

    /// Makes a topic of its own for one run of `what` on `backend`.
    async fn topic(&self, backend: &str, what: &str) -> anyhow::Result<String> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let topic = format!("bench-{backend}-{what}-{}-{n}", std::process::id());
        create_topic(&self.bootstrap, &topic, PARTITIONS).await?;
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(topic.clone());
        Ok(topic)
    }

    /// A producer as `KafkaPublisher` opens one, by hand.
    fn producer(&self) -> anyhow::Result<KafkaProducer<Vec<u8>, Vec<u8>>> {
        let settings: Vec<(&str, &str)> = PUBLISHER_SETTINGS.into_iter().chain([LINGER]).collect();
        let config = ProducerConfig::new(&self.properties(&settings))?;
        Ok(KafkaProducer::new(
            config,
            ByteArraySerializer::new(),
            ByteArraySerializer::new(),
        )?)
    }

    /// How many records `topic` holds: the records before each partition's
    /// last, by its end offset, and those read from its last on, until
    /// every partition that has records gave some and then [`QUIET`]
    /// passed without more. (tansu 0.6.0 answers an end offset one past
    /// the start of the partition's last batch, and a fetch from there
    /// gets nothing: read from one before it, a partition's last batch
    /// comes whole. Nothing is deleted from the bench's topics, and no
    /// producer is transactional, so an offset counts the records before
    /// it.)
    async fn count(&self, topic: &str) -> anyhow::Result<u64> {
        // A fetch with nothing to give comes back soon, so quiet is quick
        // to tell.
        let mut consumer = reader(&self.bootstrap, topic, &[("fetch.max.wait.ms", "50")]).await?;
        let partitions: Vec<TopicPartition> = consumer.assignment().into_iter().collect();
        let (mut records, mut waiting) = (0_u64, HashSet::new());
        for (partition, end) in consumer.end_offsets(&partitions).await? {
            let from = (end - 1).max(0);
            records += u64::try_from(from)?;
            if end > 0 {
                waiting.insert(partition.partition());
            }
            consumer.seek_with_offset(partition, from).await?;
        }
        let (started, mut last) = (Instant::now(), Instant::now());
        while !waiting.is_empty() || last.elapsed() < QUIET {
            anyhow::ensure!(
                started.elapsed() < READ_TIMEOUT,
                "reading topic {topic} back: partitions {waiting:?} gave nothing within {READ_TIMEOUT:?}"
            );
            for record in consumer.poll(Duration::from_millis(50)).await? {
                waiting.remove(&record.partition());
                records += 1;
                last = Instant::now();
            }
        }
        consumer.close().await?;
        Ok(records)
    }

    /// Ends the scenario: deletes its topics from a cluster the bench did
    /// not start (a failure only reported), kills the one it started.
    async fn finish(mut self) {
        if self.private.take().is_some() {
            return;
        }
        let topics =
            std::mem::take(&mut *self.topics.lock().unwrap_or_else(PoisonError::into_inner));
        if topics.is_empty() {
            return;
        }
        let deleted = async {
            let admin = admin(&self.bootstrap)?;
            tokio::time::timeout(
                DELETE_TIMEOUT,
                admin.delete_topics_with_string_slice(&topics).all().get(),
            )
            .await
            .context("no answer")??;
            anyhow::Ok(())
        };
        if let Err(error) = deleted.await {
            eprintln!(
                "bench: deleting the Kafka scenario's {} topics at {}: {error:#}",
                topics.len(),
                self.bootstrap
            );
        }
    }
}

/// The headers the relay's publisher gives the record of the first
/// attempt of task `id` of the bench's kind (version 1, no headers of its
/// own), all as UTF-8 text.
fn headers(outbox: &str, id: i64) -> RecordHeaders {
    let header = |name: &str, value: Vec<u8>| RecordHeader::new(name.to_owned(), Some(value));
    RecordHeaders::with_header_iter([
        header(MESSAGE_ID, format!("{outbox}:{id}").into_bytes()),
        header(wire::TASK_ID, id.to_string().into_bytes()),
        header(wire::KIND, KIND.as_bytes().to_vec()),
        header(wire::VERSION, b"1".to_vec()),
        header(wire::ATTEMPT, b"1".to_vec()),
        header(wire::SOURCE, outbox.as_bytes().to_vec()),
    ])
}

/// A topic of one run and a producer to produce there by hand, as the
/// relay's publisher produces, opened on first use as the publisher opens
/// its own (the relay's topic never opens one).
struct Topic<'a> {
    cluster: &'a Cluster,
    topic: String,
    producer: OnceCell<KafkaProducer<Vec<u8>, Vec<u8>>>,
}

impl<'a> Topic<'a> {
    async fn create(cluster: &'a Cluster, backend: &str, what: &str) -> anyhow::Result<Self> {
        let topic = cluster.topic(backend, what).await?;
        Ok(Self {
            cluster,
            topic,
            producer: OnceCell::new(),
        })
    }

    /// The producer, opened on first use.
    async fn producer(&self) -> anyhow::Result<&KafkaProducer<Vec<u8>, Vec<u8>>> {
        self.producer
            .get_or_try_init(|| async { self.cluster.producer() })
            .await
    }

    /// Sends what the producer holds and closes it, if it was opened.
    async fn close(&self) -> anyhow::Result<()> {
        if let Some(producer) = self.producer.get() {
            producer.close().await?;
        }
        Ok(())
    }

    /// Hands the producer the record the relay's publisher produces for
    /// the first attempt of task `id` (no key: the bench's tasks have no
    /// ordering key); returns its acknowledgement.
    async fn send(&self, id: i64, payload: &[u8]) -> anyhow::Result<KafkaFuture<RecordMetadata>> {
        let record = ProducerRecord::with_partition_key_headers(
            self.topic.clone(),
            None,
            None,
            Some(payload),
            headers(&self.cluster.outbox, id),
        )?;
        Ok(self.producer().await?.send(record, None).await?)
    }
}

impl Sink for Topic<'_> {
    /// Hands the producer every record of `claimed`, then awaits their
    /// acknowledgements together.
    async fn publish_batch(&self, claimed: Vec<Claimed>) -> anyhow::Result<Vec<i64>> {
        let mut acks = Vec::with_capacity(claimed.len());
        for row in &claimed {
            acks.push(self.send(row.id, &row.payload).await?);
        }
        for ack in futures_util::future::join_all(acks.iter().map(KafkaFuture::get)).await {
            ack?;
        }
        Ok(claimed.into_iter().map(|row| row.id).collect())
    }

    async fn count(&self) -> anyhow::Result<u64> {
        self.cluster.count(&self.topic).await
    }
}

/// Tasks/s of one relay publishing `count` pending tasks through the Kafka
/// publisher, [`IN_FLIGHT`] handler slots. Its producer is set up as the
/// hand-written ones are: the test clients' properties and [`LINGER`] on
/// top of the publisher's own settings.
async fn relay<B: Raw>(db: &B, cluster: &Cluster, count: u64) -> anyhow::Result<f64> {
    let sink = Topic::create(cluster, B::NAME, "relay").await?;
    let publisher = CLIENT_PROPERTIES
        .into_iter()
        .chain([LINGER])
        .fold(
            KafkaPublisher::builder(cluster.bootstrap.as_str()).route(KIND, 1, &sink.topic),
            |builder, (name, value)| builder.property(name, value),
        )
        .build()?;
    through_relay(db, &sink, publisher, count).await
}

/// Tasks/s of confluent-kafka producing the relay's records,
/// [`IN_FLIGHT`] acknowledgements outstanding, reading no database.
async fn raw(cluster: &Cluster, backend: &str, count: u64) -> anyhow::Result<f64> {
    let topic = Topic::create(cluster, backend, "raw").await?;
    let started = Instant::now();
    let mut acks = FuturesUnordered::new();
    for id in 1..=i64::try_from(count)? {
        if acks.len() >= IN_FLIGHT
            && let Some(ack) = acks.next().await
        {
            ack?;
        }
        let payload = format!("{{\"order\":{id}}}").into_bytes();
        let ack = topic.send(id, &payload).await?;
        acks.push(async move { ack.get().await });
    }
    while let Some(ack) = acks.next().await {
        ack?;
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    topic.close().await?;
    anyhow::ensure!(
        topic.count().await? == count,
        "the topic is missing records"
    );
    Ok(rate)
}

/// The relay with the Kafka publisher against the overlapping hand-written
/// publisher (target 0.90x) and raw confluent-kafka producing, with
/// [`IN_FLIGHT`] acknowledgements in flight everywhere.
pub(crate) async fn measure<B: Raw>(db: &B, plan: &Plan) -> anyhow::Result<Vec<Figure>> {
    let cluster = Cluster::start(db).await?;
    let names = Names {
        broker: "Kafka",
        plot: "Kafka: the relay, against a hand-written publisher",
        raw: "confluent-kafka, 256 acks in flight",
        hand_written: "hand-written publisher, 2 connections: claim next, produce with acks in flight, complete previous at once",
    };
    let figures = against_hand_written(
        db,
        plan,
        &names,
        0.90,
        |count| relay(db, &cluster, count),
        |count| raw(&cluster, B::NAME, count),
        || Topic::create(&cluster, B::NAME, "overlap"),
    )
    .await;
    cluster.finish().await;
    figures
}
