//! The client properties the publisher and the consumer hand to Kafka's
//! client: the outbox's defaults, then the user's own.

use std::collections::HashMap;

use confluent_kafka::{
    admin::AdminClientConfig, consumer::ConsumerConfig, producer::ProducerConfig,
};

use crate::KafkaError;

/// The producer's settings the outbox relies on, each with the values
/// that mean it; [`Properties::producer`] refuses a user property that
/// changes them.
const PRODUCER_FIXED: [(&str, &[&str]); 2] = [
    // Every in-sync replica has the record before the task counts as sent.
    ("acks", &["all", "-1"]),
    // The producer's own retries never write a record twice, nor reorder
    // a partition's records.
    ("enable.idempotence", &["true"]),
];

/// The producer's defaults, which a user property replaces: a send gives
/// up within the relay's default handler timeout (5 s), so that a batch
/// the broker does not answer fails retryably instead of being cut (3 s
/// for the topics' metadata, then 1 s to ask whether a topic exists; 4.5 s
/// for an acknowledgement). `delivery.timeout.ms` is set apart, by
/// [`delivery_timeout`].
const PRODUCER_DEFAULTS: [(&str, &str); 3] = [
    ("max.block.ms", "3000"),
    ("request.timeout.ms", "4000"),
    // The relay hands over a whole claim, then awaits it: lingering for
    // more records only delays the batch (about a fifth of the throughput
    // at the client's 5 ms, in the bench).
    ("linger.ms", "0"),
];

/// The client's own `linger.ms`, which the delivery timeout must cover
/// where a map has none (the admin client's, say).
const CLIENT_LINGER_MS: u64 = 5;
/// The shortest delivery timeout the outbox sets.
const DELIVERY_TIMEOUT_MS: u64 = 4500;

/// The consumer's settings the outbox relies on.
const CONSUMER_FIXED: [(&str, &[&str]); 1] = [
    // Offsets are committed by the consumer, after each inbox commit.
    ("enable.auto.commit", &["false"]),
];

/// The consumer's defaults: a group new to a partition starts at its
/// first record, so that nothing published before it started is skipped;
/// the group protocol is the one the client speaks (KIP-848's); a topic
/// that does not exist is not created by reading it; records of aborted
/// Kafka transactions (another, transactional producer's) are never
/// applied.
const CONSUMER_DEFAULTS: [(&str, &str); 4] = [
    ("auto.offset.reset", "earliest"),
    ("group.protocol", "consumer"),
    ("allow.auto.create.topics", "false"),
    ("isolation.level", "read_committed"),
];

/// Properties the builders set themselves, or that would break what the
/// outbox relies on: each with the reason it is refused.
const REFUSED: [(&str, &str); 3] = [
    ("bootstrap.servers", "is the builder's first argument"),
    (
        "group.id",
        "is the consumer's `group` (its name unless set)",
    ),
    (
        "transactional.id",
        "would make every send wait for a Kafka transaction the outbox never begins",
    ),
];

/// The bootstrap servers and the user's properties, checked once against
/// each client's configuration.
#[derive(Debug, Clone)]
pub(crate) struct Properties {
    bootstrap: String,
    user: Vec<(String, String)>,
}

impl Properties {
    pub(crate) fn new(bootstrap: String) -> Self {
        Self {
            bootstrap,
            user: Vec::new(),
        }
    }

    pub(crate) fn set(&mut self, name: String, value: String) {
        self.user.push((name, value));
    }

    /// The bootstrap servers, `host:port[,host:port...]`.
    pub(crate) fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    fn map(
        &self,
        defaults: &[(&str, &str)],
        fixed: &[(&str, &[&str])],
    ) -> Result<HashMap<String, String>, KafkaError> {
        if self.bootstrap.trim().is_empty() {
            return Err(config("bootstrap", "name at least one `host:port`".into()));
        }
        let mut map: HashMap<String, String> = defaults
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        for (name, value) in &self.user {
            if let Some((_, reason)) = REFUSED.iter().find(|(refused, _)| refused == name) {
                return Err(config("property", format!("`{name}` {reason}")));
            }
            if let Some((_, meaning)) = fixed.iter().find(|(fixed, _)| fixed == name)
                && !meaning.iter().any(|m| m.eq_ignore_ascii_case(value.trim()))
            {
                return Err(config(
                    "property",
                    format!(
                        "`{name}` must stay `{}`: the outbox's guarantees rest on it",
                        meaning[0]
                    ),
                ));
            }
            map.insert(name.clone(), value.clone());
        }
        for (name, meaning) in fixed {
            map.insert((*name).to_owned(), meaning[0].to_owned());
        }
        map.insert("bootstrap.servers".to_owned(), self.bootstrap.clone());
        Ok(map)
    }

    /// The producer's configuration: idempotent, `acks=all`.
    pub(crate) fn producer(&self) -> Result<ProducerConfig, KafkaError> {
        let mut map = self.map(&PRODUCER_DEFAULTS, &PRODUCER_FIXED)?;
        let delivery = delivery_timeout(&map)?;
        map.insert("delivery.timeout.ms".to_owned(), delivery);
        ProducerConfig::new(&map).map_err(|error| config("property", error.to_string()))
    }

    /// The consumer's configuration, in `group`, committing its own offsets.
    pub(crate) fn consumer(&self, group: &str) -> Result<ConsumerConfig, KafkaError> {
        let mut map = self.map(&CONSUMER_DEFAULTS, &CONSUMER_FIXED)?;
        map.insert("group.id".to_owned(), group.to_owned());
        ConsumerConfig::new(&map).map_err(|error| config("property", error.to_string()))
    }

    /// An admin client's configuration (the user's properties that the
    /// outbox knows to be a producer's only are left out; the client warns
    /// of the rest it does not use).
    pub(crate) fn admin(&self) -> Result<AdminClientConfig, KafkaError> {
        let producer_only = |name: &str| {
            PRODUCER_DEFAULTS.iter().any(|(n, _)| *n == name)
                || PRODUCER_FIXED.iter().any(|(n, _)| *n == name)
                || matches!(
                    name,
                    "linger.ms"
                        | "batch.size"
                        | "compression.type"
                        | "max.in.flight.requests.per.connection"
                )
        };
        let mut map: HashMap<String, String> = self
            .user
            .iter()
            .filter(|(name, _)| !producer_only(name))
            .cloned()
            .collect();
        map.insert("bootstrap.servers".to_owned(), self.bootstrap.clone());
        AdminClientConfig::new(&map).map_err(|error| config("property", error.to_string()))
    }
}

/// The delivery timeout: the user's, if it covers `linger.ms` and
/// `request.timeout.ms` (the client refuses it otherwise, and only when the
/// producer opens: checked here so that `build` fails instead), else the
/// shortest the outbox sets that does.
fn delivery_timeout(map: &HashMap<String, String>) -> Result<String, KafkaError> {
    let millis = |name: &str, default: u64| -> Result<u64, KafkaError> {
        map.get(name).map_or(Ok(default), |value| {
            value.trim().parse().map_err(|_| {
                config(
                    "property",
                    format!("`{name}` = `{value}` is not a number of milliseconds"),
                )
            })
        })
    };
    let floor =
        millis("linger.ms", CLIENT_LINGER_MS)?.saturating_add(millis("request.timeout.ms", 0)?);
    match map.get("delivery.timeout.ms") {
        Some(_) => {
            let delivery = millis("delivery.timeout.ms", 0)?;
            if delivery < floor {
                return Err(config(
                    "property",
                    format!(
                        "`delivery.timeout.ms` ({delivery}) must be at least `linger.ms` plus \
                         `request.timeout.ms` ({floor})"
                    ),
                ));
            }
            Ok(delivery.to_string())
        }
        None => Ok(DELIVERY_TIMEOUT_MS.max(floor).to_string()),
    }
}

fn config(field: &'static str, reason: String) -> KafkaError {
    KafkaError::Config { field, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &str, value: &str) -> Properties {
        let mut properties = Properties::new("127.0.0.1:9092".into());
        properties.set(name.into(), value.into());
        properties
    }

    #[test]
    fn the_guarantees_cannot_be_turned_off() {
        for (name, value) in [("acks", "1"), ("enable.idempotence", "false")] {
            let error = with(name, value).producer().expect_err(name);
            assert!(error.to_string().contains(name), "{error}");
        }
        for (name, value) in [
            ("acks", "all"),
            ("acks", "-1"),
            ("enable.idempotence", "TRUE"),
        ] {
            assert!(with(name, value).producer().is_ok(), "{name}={value}");
        }
        assert!(with("enable.auto.commit", "true").consumer("g").is_err());
        for name in ["bootstrap.servers", "group.id", "transactional.id"] {
            let error = with(name, "x").consumer("g").expect_err(name);
            assert!(error.to_string().contains(name), "{error}");
        }
    }

    #[test]
    fn bad_values_fail_at_build_naming_the_property() {
        let error = with("linger.ms", "soon").producer().expect_err("bad value");
        assert!(
            matches!(
                error,
                KafkaError::Config {
                    field: "property",
                    ..
                }
            ),
            "{error}"
        );
        let error = Properties::new(" ".into()).producer().expect_err("empty");
        assert!(
            matches!(
                error,
                KafkaError::Config {
                    field: "bootstrap",
                    ..
                }
            ),
            "{error}"
        );
        let error = with("delivery.timeout.ms", "1000")
            .producer()
            .expect_err("too short");
        assert!(error.to_string().contains("delivery.timeout.ms"), "{error}");
    }

    #[test]
    fn the_delivery_timeout_covers_the_users_linger_and_request_timeouts() {
        let map = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect()
        };
        let timeout = |pairs: &[(&str, &str)]| delivery_timeout(&map(pairs)).expect("timeout");
        assert_eq!(timeout(&[("request.timeout.ms", "4000")]), "4500");
        assert_eq!(timeout(&[("request.timeout.ms", "30000")]), "30005");
        assert_eq!(
            timeout(&[("request.timeout.ms", "4000"), ("linger.ms", "1000")]),
            "5000"
        );
        assert_eq!(
            timeout(&[
                ("delivery.timeout.ms", "60000"),
                ("request.timeout.ms", "4000")
            ]),
            "60000"
        );
    }

    #[tokio::test]
    async fn the_client_opens_a_producer_with_the_users_timeouts() {
        use confluent_kafka::{
            common::serialization::ByteArraySerializer,
            producer::{KafkaProducer, Producer as _},
        };
        // The client checks the delivery timeout only when it opens.
        for pairs in [
            &[("request.timeout.ms", "30000")][..],
            &[("linger.ms", "1000")],
        ] {
            let mut properties = Properties::new("127.0.0.1:9".into());
            for (name, value) in pairs {
                properties.set((*name).into(), (*value).into());
            }
            let config = properties.producer().expect("config");
            let producer = KafkaProducer::<Vec<u8>, Vec<u8>>::new(
                config,
                ByteArraySerializer::new(),
                ByteArraySerializer::new(),
            )
            .unwrap_or_else(|error| panic!("{pairs:?}: {error}"));
            producer
                .close_with_timeout(std::time::Duration::ZERO)
                .await
                .ok();
        }
    }
}
