//! One idempotent producer, opened on first use, and the admin client that
//! tells a missing topic from an unreachable broker: what the publisher and
//! the consumer's dead-letter copies send with.

use std::{collections::HashMap, time::Duration};

use confluent_kafka::{
    admin::{Admin, AdminClient},
    common::serialization::ByteArraySerializer,
    common::{Error, header::RecordHeaders},
    producer::{KafkaProducer, Producer as _, ProducerRecord, RecordMetadata},
};
use diesel_outbox_core::HandlerError;
use tokio::sync::OnceCell;

use crate::{KafkaError, classify, properties::Properties};

/// How long the admin client gets to list the topics.
const LIST_TOPICS_TIMEOUT: Duration = Duration::from_secs(1);

/// One record to send: where, its key, value and headers.
pub(crate) struct Outgoing<'a> {
    pub(crate) topic: &'a str,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: &'a [u8],
    pub(crate) headers: RecordHeaders,
}

/// A producer and an admin client, each opened on first use (the client
/// starts tasks of its own, so it needs the runtime it will run on).
pub(crate) struct Producer {
    properties: Properties,
    producer: OnceCell<KafkaProducer<Vec<u8>, Vec<u8>>>,
    admin: OnceCell<Box<dyn Admin>>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("bootstrap", &self.properties.bootstrap())
            .field("open", &self.producer.initialized())
            .finish_non_exhaustive()
    }
}

impl Producer {
    /// A producer with `properties`, checked now: a bad property fails here,
    /// naming it, never at send time.
    pub(crate) fn new(properties: Properties) -> Result<Self, KafkaError> {
        properties.producer()?;
        properties.admin()?;
        Ok(Self {
            properties,
            producer: OnceCell::new(),
            admin: OnceCell::new(),
        })
    }

    /// The producer, opened on first use.
    async fn producer(&self) -> Result<&KafkaProducer<Vec<u8>, Vec<u8>>, HandlerError> {
        self.producer
            .get_or_try_init(|| async {
                let config = self
                    .properties
                    .producer()
                    .map_err(|error| HandlerError::permanent(anyhow::anyhow!("{error}")))?;
                KafkaProducer::new(
                    config,
                    ByteArraySerializer::new(),
                    ByteArraySerializer::new(),
                )
                .map_err(|error| {
                    let text = anyhow::anyhow!("opening the Kafka producer failed: {error}");
                    if error.is_config_error() {
                        HandlerError::permanent(text)
                    } else {
                        HandlerError::retryable(text)
                    }
                })
            })
            .await
    }

    /// Sends every record, then awaits their acknowledgements together; each
    /// record's answer is its own. After a send that waited in vain for a
    /// topic's metadata, the batch's other records for that topic fail the
    /// same way without waiting again.
    pub(crate) async fn send_all(
        &self,
        records: Vec<Result<Outgoing<'_>, HandlerError>>,
    ) -> Vec<Result<RecordMetadata, HandlerError>> {
        let producer = match self.producer().await {
            Ok(producer) => producer,
            Err(error) => {
                return records
                    .into_iter()
                    .map(|record| record.and_then(|_| Err(copy(&error))))
                    .collect();
            }
        };
        // A topic whose metadata the producer lacks makes each send wait
        // `max.block.ms`: ask once per topic, and fail its records together.
        let mut topics: Vec<&str> = Vec::new();
        for record in records.iter().flatten() {
            if !topics.contains(&record.topic) {
                topics.push(record.topic);
            }
        }
        // The topics are asked together: the batch waits `max.block.ms` at
        // most once, however many topics lack metadata.
        let asked = futures_util::future::join_all(topics.iter().map(|topic| async move {
            match producer.partitions_for(topic).await {
                Ok(_) => None,
                Err(error) => Some((*topic, self.classify(topic, &error).await)),
            }
        }))
        .await;
        let stalled: HashMap<&str, HandlerError> = asked.into_iter().flatten().collect();
        let mut sent = Vec::with_capacity(records.len());
        for record in records {
            let record = match record {
                Ok(record) => record,
                Err(error) => {
                    sent.push(Sending::Failed(error));
                    continue;
                }
            };
            let topic = record.topic;
            if let Some(error) = stalled.get(topic) {
                sent.push(Sending::Failed(copy(error)));
                continue;
            }
            let built = ProducerRecord::with_partition_key_headers(
                topic.to_owned(),
                None,
                record.key,
                Some(record.value),
                record.headers,
            );
            let built = match built {
                Ok(built) => built,
                Err(error) => {
                    sent.push(Sending::Failed(HandlerError::permanent(anyhow::anyhow!(
                        "the record for topic `{topic}` is invalid: {error}"
                    ))));
                    continue;
                }
            };
            match producer.send(built, None).await {
                Ok(acked) => sent.push(Sending::InFlight(topic, acked)),
                Err(error) => sent.push(Sending::Refused(topic, error)),
            }
        }
        futures_util::future::join_all(sent.into_iter().map(|sending| async move {
            match sending {
                Sending::Failed(error) => Err(error),
                Sending::Refused(topic, error) => Err(self.classify(topic, &error).await),
                Sending::InFlight(topic, acked) => match acked.get().await {
                    Ok(metadata) => Ok(metadata),
                    Err(error) => Err(self.classify(topic, &error).await),
                },
            }
        }))
        .await
    }

    /// The task's failure for a send to `topic` that failed with `error`:
    /// permanent where no later try can pass, or where the producer waited
    /// in vain for a topic the broker does not list; retryable otherwise.
    async fn classify(&self, topic: &str, error: &Error) -> HandlerError {
        if classify::is_permanent(error) {
            return classify::permanent(topic, error);
        }
        if classify::is_missing_metadata(error) && self.topic_exists(topic).await == Some(false) {
            return classify::no_such_topic(topic);
        }
        classify::failure(topic, error)
    }

    /// Whether the broker lists `topic`; `None` when it cannot say in time.
    async fn topic_exists(&self, topic: &str) -> Option<bool> {
        let admin = self
            .admin
            .get_or_try_init(|| async {
                let config = self.properties.admin().map_err(|error| error.to_string())?;
                AdminClient::create(config).map_err(|error| error.to_string())
            })
            .await
            .ok()?;
        let listed = tokio::time::timeout(LIST_TOPICS_TIMEOUT, admin.list_topics().names().get())
            .await
            .ok()?
            .ok()?;
        Some(listed.contains(topic))
    }

    /// Sends what is buffered and closes the producer, if it was opened.
    pub(crate) async fn close(&self) -> Result<(), Error> {
        match self.producer.get() {
            Some(producer) => producer.close().await,
            None => Ok(()),
        }
    }
}

/// A record handed to the producer, or why it was not.
enum Sending<'a> {
    Failed(HandlerError),
    Refused(&'a str, Error),
    InFlight(
        &'a str,
        confluent_kafka::common::KafkaFuture<RecordMetadata>,
    ),
}

/// Another failure like `error`, for the next record it fails.
fn copy(error: &HandlerError) -> HandlerError {
    let text = anyhow::anyhow!("{error}");
    if error.is_permanent() {
        HandlerError::permanent(text)
    } else {
        HandlerError::retryable(text)
    }
}
