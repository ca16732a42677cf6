//! Kafka for tests: topics of their own per test, [`TestTopic`], on the
//! broker `cargo xtask test` starts.

use std::{collections::HashMap, time::Duration};

use anyhow::Context as _;
use confluent_kafka::{
    admin::{Admin, AdminClient, AdminClientConfig, NewTopic},
    common::{
        TopicPartition,
        header::RecordHeaders,
        serialization::{ByteArrayDeserializer, ByteArraySerializer},
    },
    consumer::{Consumer as _, ConsumerConfig, ConsumerRecord, KafkaConsumer},
    producer::{KafkaProducer, Producer as _, ProducerConfig, ProducerRecord},
};

use crate::url;

/// Environment variable naming the Kafka cluster tests use
/// (`host:port`).
pub const BOOTSTRAP_VAR: &str = "OUTBOX_KAFKA_BOOTSTRAP";
/// The cluster used when [`BOOTSTRAP_VAR`] is unset.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.1:9092";
/// Environment variable naming the `tansu` program (a Kafka-protocol
/// broker) that `cargo xtask test` and the chaos scenarios start.
pub const TANSU_VAR: &str = "OUTBOX_TANSU";
/// How to get a broker when none answers.
pub const START_HINT: &str =
    "`cargo xtask test` installs and starts one (tansu), and sets OUTBOX_KAFKA_BOOTSTRAP";

/// The client properties every test client sets: `tansu` answers no
/// cluster-id check (KIP-1242), so the client must not ask for one.
pub const CLIENT_PROPERTIES: [(&str, &str); 1] = [("metadata.cluster.check.enable", "false")];

/// The test cluster's bootstrap servers ([`BOOTSTRAP_VAR`], or
/// [`DEFAULT_BOOTSTRAP`]).
pub fn bootstrap() -> String {
    url::from_env(BOOTSTRAP_VAR, DEFAULT_BOOTSTRAP)
}

/// The `tansu` program: [`TANSU_VAR`], else `tansu` as installed by
/// `cargo xtask` under the user's cache.
pub fn tansu_program() -> String {
    std::env::var(TANSU_VAR).unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
        format!("{home}/.cache/outbox-tools/tansu/bin/tansu")
    })
}

/// The arguments that start `tansu` on `{port}`, with its data in memory
/// (`memory`) or in a SQLite file in its working directory (kept across
/// restarts), for
/// [`PrivateServer::start`](crate::private_server::PrivateServer::start),
/// which runs it in its scratch folder.
pub fn tansu_args(persistent: bool) -> Vec<&'static str> {
    vec![
        "broker",
        "--listener-url",
        "tcp://127.0.0.1:{port}",
        "--advertised-listener-url",
        "tcp://127.0.0.1:{port}",
        "--storage-engine",
        if persistent {
            "sqlite://tansu.db"
        } else {
            "memory://tansu/"
        },
    ]
}

fn properties(bootstrap: &str, extra: &[(&str, &str)]) -> HashMap<String, String> {
    CLIENT_PROPERTIES
        .iter()
        .chain(extra)
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .chain([("bootstrap.servers".to_owned(), bootstrap.to_owned())])
        .collect()
}

/// An admin client of the cluster at `bootstrap`.
pub fn admin(bootstrap: &str) -> anyhow::Result<Box<dyn Admin>> {
    Ok(AdminClient::create(AdminClientConfig::new(&properties(
        bootstrap,
        &[],
    ))?)?)
}

/// Creates `topic` with `partitions` partitions on the cluster at
/// `bootstrap` (one replica).
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let admin = admin(bootstrap)?;
    let new = NewTopic::with_num_partitions_replication_factor(topic, Some(partitions), Some(1));
    tokio::time::timeout(
        Duration::from_secs(30),
        admin.create_topics(&[new]).all().get(),
    )
    .await
    .with_context(|| format!("Kafka at {bootstrap} did not answer; {START_HINT}"))?
    .with_context(|| format!("creating topic {topic} at {bootstrap}"))?;
    Ok(())
}

/// A topic of its own for one test, with `partitions` partitions, and its
/// dead-letter companion `<topic>.dead` (one partition); both deleted when
/// dropped, kept when the test panics.
#[derive(Debug)]
pub struct TestTopic {
    bootstrap: String,
    topic: String,
    partitions: i32,
}

impl TestTopic {
    /// Creates the topic for `test`, and its dead-letter topic.
    pub async fn create(test: &str, partitions: i32) -> anyhow::Result<Self> {
        let bootstrap = bootstrap();
        let topic = url::database_name(test).replace('_', "-");
        create_topic(&bootstrap, &topic, partitions).await?;
        create_topic(&bootstrap, &format!("{topic}.dead"), 1).await?;
        Ok(Self {
            bootstrap,
            topic,
            partitions,
        })
    }

    /// The cluster's bootstrap servers.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The dead-letter topic's name: `<topic>.dead`.
    pub fn dead_letter(&self) -> String {
        format!("{}.dead", self.topic)
    }

    /// The topic's number of partitions.
    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    /// The client properties a test's publisher or consumer sets
    /// ([`CLIENT_PROPERTIES`]).
    pub fn client_properties(&self) -> &'static [(&'static str, &'static str)] {
        &CLIENT_PROPERTIES
    }

    /// Produces one record to `topic`, as another program would, and waits
    /// until the broker has it.
    pub async fn produce_raw(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
        headers: RecordHeaders,
    ) -> anyhow::Result<()> {
        let config = ProducerConfig::new(&properties(&self.bootstrap, &[]))?;
        let producer = KafkaProducer::<Vec<u8>, Vec<u8>>::new(
            config,
            ByteArraySerializer::new(),
            ByteArraySerializer::new(),
        )?;
        let record = ProducerRecord::with_partition_key_headers(
            topic.to_owned(),
            None,
            key,
            Some(value),
            headers,
        )?;
        producer.send(record, None).await?.get().await?;
        producer.close().await?;
        Ok(())
    }

    /// Reads `topic` from its start until it has `count` records (or 30 s
    /// pass): every partition's records, each partition's in offset order.
    pub async fn read(
        &self,
        topic: &str,
        count: usize,
    ) -> anyhow::Result<Vec<ConsumerRecord<Vec<u8>, Vec<u8>>>> {
        let mut consumer = self.reader(topic).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut records = Vec::new();
        while records.len() < count && tokio::time::Instant::now() < deadline {
            records.extend(consumer.poll(Duration::from_millis(200)).await?);
        }
        consumer.close().await?;
        Ok(records)
    }

    /// How many records `topic` holds, read back from its start: the
    /// count once three polls in a row (600 ms) bring nothing more, or
    /// after 10 s without any record.
    pub async fn count(&self, topic: &str) -> anyhow::Result<usize> {
        let mut consumer = self.reader(topic).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let (mut count, mut quiet) = (0, 0);
        while quiet < 3 && (count > 0 || tokio::time::Instant::now() < deadline) {
            let polled = consumer.poll(Duration::from_millis(200)).await?.count();
            count += polled;
            quiet = if polled == 0 && count > 0 {
                quiet + 1
            } else {
                0
            };
        }
        consumer.close().await?;
        Ok(count)
    }

    async fn reader(&self, topic: &str) -> anyhow::Result<KafkaConsumer<Vec<u8>, Vec<u8>>> {
        reader(&self.bootstrap, topic, &[]).await
    }
}

/// A consumer of every partition of `topic` on the cluster at `bootstrap`,
/// from its start, in a group of its own that commits nothing: what reads
/// a topic back. `extra` adds client properties (`fetch.max.wait.ms`, say).
pub async fn reader(
    bootstrap: &str,
    topic: &str,
    extra: &[(&str, &str)],
) -> anyhow::Result<KafkaConsumer<Vec<u8>, Vec<u8>>> {
    let group = format!("reader-{}-{}", topic, fastrand::u64(..));
    let settings: Vec<(&str, &str)> = [
        ("group.id", group.as_str()),
        ("group.protocol", "consumer"),
        ("auto.offset.reset", "earliest"),
        ("enable.auto.commit", "false"),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect();
    let config = ConsumerConfig::new(&properties(bootstrap, &settings))?;
    let mut consumer = KafkaConsumer::<Vec<u8>, Vec<u8>>::new(
        config,
        ByteArrayDeserializer::new(),
        ByteArrayDeserializer::new(),
    )?;
    let partitions = consumer
        .partitions_for(topic)
        .await?
        .iter()
        .map(|info| TopicPartition::new(topic, info.partition()))
        .collect();
    consumer.assign(partitions).await?;
    Ok(consumer)
}

impl Drop for TestTopic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "test failed: kept topic {} and {}.dead",
                self.topic, self.topic
            );
            return;
        }
        let (bootstrap, topics) = (
            self.bootstrap.clone(),
            vec![self.topic.clone(), self.dead_letter()],
        );
        crate::drop_database::run(async move {
            let admin = admin(&bootstrap)?;
            let _ = tokio::time::timeout(
                Duration::from_secs(10),
                admin.delete_topics_with_string_slice(&topics).all().get(),
            )
            .await;
            Ok(())
        });
    }
}
