//! [`KafkaPublisher`]: a batch handler that produces deliveries to Kafka
//! topics with an idempotent producer and `acks=all`.

use std::{collections::HashMap, fmt, sync::Arc};

use async_trait::async_trait;
use diesel_outbox_core::{
    BatchHandler, Delivery, Handler, HandlerError, HandlerKey, RegistryBuilder, wire,
};

use crate::{
    KafkaError, headers,
    producer::{Outgoing, Producer},
    properties::Properties,
    topic,
};

pub use diesel_outbox_core::wire::MAX_MESSAGE_ID_PREFIX_BYTES;

/// Produces each delivery to the topic its kind is routed to, and succeeds
/// only when every in-sync replica has the record.
///
/// The producer is idempotent with `acks=all` (the publisher refuses
/// properties that change either). The record's key is the task's ordering
/// key, so a key's tasks land on one partition, in the order the relay
/// sends them, which is commit order; a task without one has no key. The
/// record's headers carry the task's own headers (trace context among
/// them) and the outbox's, as UTF-8 text: `Outbox-Message-Id`
/// (`<outbox id>:<task id>`, what a consumer's inbox records),
/// `Outbox-Task-Id`, `Outbox-Kind`, `Outbox-Version`, `Outbox-Attempt` and
/// `Outbox-Source`.
///
/// It is a [`BatchHandler`] (what [`register`](Self::register) makes it) and
/// a [`Handler`]: a relay hands the producer every record of a claim, then
/// awaits their acknowledgements together. Retryable: the broker
/// unreachable, a leader moved, no answer within the producer's delivery
/// timeout (4.5 s unless set, inside the relay's default handler timeout).
/// Permanent: a record larger than the broker takes, a topic the client
/// may not write, a topic that does not exist on a broker that does not
/// create topics, a kind with no route, a header name reserved for the
/// outbox.
#[derive(Clone)]
pub struct KafkaPublisher {
    inner: Arc<Inner>,
}

struct Inner {
    producer: Producer,
    routes: HashMap<HandlerKey, String>,
    message_id_prefix: Option<String>,
}

impl fmt::Debug for KafkaPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaPublisher")
            .field("producer", &self.inner.producer)
            .field("routes", &self.inner.routes)
            .field("message_id_prefix", &self.inner.message_id_prefix)
            .finish()
    }
}

impl KafkaPublisher {
    /// Starts configuring a publisher to the cluster at `bootstrap`
    /// (`host:port`, or several separated by commas).
    pub fn builder(bootstrap: impl Into<String>) -> PublisherBuilder {
        PublisherBuilder {
            properties: Properties::new(bootstrap.into()),
            routes: Vec::new(),
            message_id_prefix: None,
        }
    }

    /// The topic of each `(kind, version)`.
    pub fn routes(&self) -> &HashMap<HandlerKey, String> {
        &self.inner.routes
    }

    /// The `Outbox-Message-Id` of a delivery: its
    /// [message id](Delivery::message_id), or `<prefix>:<task id>` with an
    /// explicit `message_id_prefix`.
    pub fn message_id(&self, delivery: &Delivery) -> String {
        delivery.message_id_with(self.inner.message_id_prefix.as_deref())
    }

    /// Registers this publisher as the batch handler of every routed
    /// `(kind, version)`.
    pub fn register(&self, registry: RegistryBuilder) -> RegistryBuilder {
        registry.batch_handler_for(self.inner.routes.keys(), self)
    }

    /// Produces `delivery` and waits for the broker's acknowledgement.
    pub async fn publish(&self, delivery: &Delivery) -> Result<(), HandlerError> {
        self.publish_all(std::slice::from_ref(delivery))
            .await
            .pop()
            .unwrap_or_else(|| {
                Err(HandlerError::retryable(anyhow::anyhow!(
                    "the producer gave no answer for the record"
                )))
            })
    }

    /// Produces every delivery, then awaits the acknowledgements together.
    async fn publish_all(&self, deliveries: &[Delivery]) -> Vec<Result<(), HandlerError>> {
        let records = deliveries
            .iter()
            .map(|delivery| {
                let topic = self.topic(delivery)?;
                Ok(Outgoing {
                    topic,
                    key: delivery.task.ordering_key.as_deref().map(str::as_bytes),
                    value: delivery.payload(),
                    headers: headers::build(delivery, self.message_id(delivery))?,
                })
            })
            .collect();
        self.inner
            .producer
            .send_all(records)
            .await
            .into_iter()
            .map(|sent| sent.map(|_| ()))
            .collect()
    }

    /// The topic of `delivery`'s kind and version.
    fn topic(&self, delivery: &Delivery) -> Result<&str, HandlerError> {
        let key = delivery.key();
        self.inner
            .routes
            .get(&key)
            .map(String::as_str)
            .ok_or_else(|| HandlerError::permanent(anyhow::anyhow!("no topic is routed for {key}")))
    }
}

#[async_trait]
impl Handler for KafkaPublisher {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        self.publish(&delivery).await
    }
}

/// Hands the producer every record of the batch, then awaits their
/// acknowledgements together: the batch costs about one round trip per
/// partition leader. Each delivery's answer is its own record's.
#[async_trait]
impl BatchHandler for KafkaPublisher {
    async fn handle_batch(&self, deliveries: Vec<Delivery>) -> Vec<Result<(), HandlerError>> {
        self.publish_all(&deliveries).await
    }
}

/// Configures a [`KafkaPublisher`]; [`build`](PublisherBuilder::build)
/// checks every route and property, so a bad name fails at start-up, never
/// at send time.
pub struct PublisherBuilder {
    properties: Properties,
    routes: Vec<(HandlerKey, String)>,
    message_id_prefix: Option<String>,
}

impl fmt::Debug for PublisherBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublisherBuilder")
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

impl PublisherBuilder {
    /// Produces `(kind, version)` to `topic`.
    pub fn route(
        mut self,
        kind: impl Into<String>,
        version: i32,
        topic: impl Into<String>,
    ) -> Self {
        self.routes
            .push((HandlerKey::new(kind, version), topic.into()));
        self
    }

    /// Sets a property of Kafka's producer client (`linger.ms`,
    /// `compression.type`, `client.id`, `delivery.timeout.ms`...). `acks`
    /// and `enable.idempotence` stay `all` and `true`: a property that
    /// changes them fails [`build`](Self::build).
    pub fn property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.set(name.into(), value.into());
        self
    }

    /// Makes `Outbox-Message-Id` `<prefix>:<task id>` instead of the task's
    /// [message id](Delivery::message_id) (`<outbox id>:<task id>`, the
    /// default, unique to each outbox by construction). Two publishers with
    /// the same prefix collide in a shared inbox: give each its own. At
    /// most [`MAX_MESSAGE_ID_PREFIX_BYTES`] bytes, so an id fits an inbox.
    pub fn message_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.message_id_prefix = Some(prefix.into());
        self
    }

    /// Checks every route and property and builds the publisher (it
    /// connects on first use).
    pub fn build(self) -> Result<KafkaPublisher, KafkaError> {
        let config = |field: &'static str, reason: String| KafkaError::Config { field, reason };
        if let Some(prefix) = &self.message_id_prefix {
            wire::check_message_id_prefix(prefix)
                .map_err(|reason| config("message_id_prefix", reason))?;
        }
        if self.routes.is_empty() {
            return Err(config(
                "routes",
                "route at least one (kind, version)".into(),
            ));
        }
        let mut routes = HashMap::new();
        for (key, topic) in self.routes {
            topic::check(&topic).map_err(|reason| config("routes", format!("{key}: {reason}")))?;
            if routes.insert(key.clone(), topic).is_some() {
                return Err(config("routes", format!("{key} is routed twice")));
            }
        }
        Ok(KafkaPublisher {
            inner: Arc::new(Inner {
                producer: Producer::new(self.properties)?,
                routes,
                message_id_prefix: self.message_id_prefix,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_routes_fail_at_build_naming_the_setting() {
        let build = |builder: PublisherBuilder| builder.build().expect_err("rejected");
        let field = |error: KafkaError| match error {
            KafkaError::Config { field, .. } => field,
            other => panic!("{other}"),
        };
        let builder = || KafkaPublisher::builder("127.0.0.1:9092");
        assert_eq!(field(build(builder())), "routes");
        assert_eq!(field(build(builder().route("k", 1, "bad topic"))), "routes");
        assert_eq!(
            field(build(builder().route("k", 1, "t").route("k", 1, "u"))),
            "routes"
        );
        assert_eq!(
            field(build(builder().route("k", 1, "t").message_id_prefix("a b"))),
            "message_id_prefix"
        );
        assert_eq!(
            field(build(builder().route("k", 1, "t").property("acks", "0"))),
            "property"
        );
        assert!(builder().route("k", 1, "t").build().is_ok());
    }
}
