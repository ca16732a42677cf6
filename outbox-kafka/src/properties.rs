//! The client properties the publisher and the consumer hand to Kafka's
//! client: the outbox's defaults, then the user's own.

use std::collections::HashMap;

use confluent_kafka::{
    admin::AdminClientConfig, consumer::ConsumerConfig, producer::ProducerConfig,
};

use crate::KafkaError;

/// The producer's settings the outbox relies on; [`Properties::producer`]
/// refuses a user property that changes them.
const PRODUCER_FIXED: [(&str, &str); 2] = [
    // Every in-sync replica has the record before the task counts as sent.
    ("acks", "all"),
    // The producer's own retries never write a record twice, nor reorder
    // a partition's records.
    ("enable.idempotence", "true"),
];

/// The producer's defaults, which a user property replaces: a send gives
/// up within the relay's default handler timeout (5 s), so that a batch
/// the broker does not answer fails retryably instead of being cut (3 s
/// for a topic's metadata, then 1 s to ask whether the topic exists; 4.5 s
/// for an acknowledgement).
const PRODUCER_DEFAULTS: [(&str, &str); 3] = [
    ("max.block.ms", "3000"),
    ("request.timeout.ms", "4000"),
    ("delivery.timeout.ms", "4500"),
];

/// The consumer's settings the outbox relies on.
const CONSUMER_FIXED: [(&str, &str); 1] = [
    // Offsets are committed by the consumer, after each inbox commit.
    ("enable.auto.commit", "false"),
];

/// The consumer's defaults: a group new to a partition starts at its
/// first record, so that nothing published before it started is skipped;
/// the group protocol is the one the client speaks (KIP-848's).
const CONSUMER_DEFAULTS: [(&str, &str); 2] = [
    ("auto.offset.reset", "earliest"),
    ("group.protocol", "consumer"),
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
        fixed: &[(&str, &str)],
    ) -> Result<HashMap<String, String>, KafkaError> {
        if self.bootstrap.trim().is_empty() {
            return Err(config("bootstrap", "name at least one `host:port`".into()));
        }
        let mut map: HashMap<String, String> = defaults
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        for (name, value) in &self.user {
            if name == "bootstrap.servers" {
                return Err(config(
                    "property",
                    "`bootstrap.servers` is the builder's first argument".into(),
                ));
            }
            if let Some((_, required)) = fixed.iter().find(|(fixed, _)| fixed == name)
                && value != required
            {
                return Err(config(
                    "property",
                    format!("`{name}` must stay `{required}`: the outbox's guarantees rest on it"),
                ));
            }
            map.insert(name.clone(), value.clone());
        }
        for (name, value) in fixed {
            map.insert((*name).to_owned(), (*value).to_owned());
        }
        map.insert("bootstrap.servers".to_owned(), self.bootstrap.clone());
        Ok(map)
    }

    /// The producer's configuration: idempotent, `acks=all`.
    pub(crate) fn producer(&self) -> Result<ProducerConfig, KafkaError> {
        let map = self.map(&PRODUCER_DEFAULTS, &PRODUCER_FIXED)?;
        ProducerConfig::new(&map).map_err(|error| config("property", error.to_string()))
    }

    /// The consumer's configuration, in `group`, committing its own offsets.
    pub(crate) fn consumer(&self, group: &str) -> Result<ConsumerConfig, KafkaError> {
        let mut map = self.map(&CONSUMER_DEFAULTS, &CONSUMER_FIXED)?;
        map.insert("group.id".to_owned(), group.to_owned());
        ConsumerConfig::new(&map).map_err(|error| config("property", error.to_string()))
    }

    /// An admin client's configuration (the user's properties that are a
    /// producer's only are left out).
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
        assert!(with("acks", "all").producer().is_ok());
        assert!(with("enable.auto.commit", "true").consumer("g").is_err());
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
        let error = with("bootstrap.servers", "x:1")
            .producer()
            .expect_err("twice");
        assert!(error.to_string().contains("first argument"), "{error}");
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
    }

    #[test]
    fn user_properties_replace_the_defaults() {
        assert!(with("delivery.timeout.ms", "60000").producer().is_ok());
        assert!(with("linger.ms", "0").admin().is_ok());
    }
}
