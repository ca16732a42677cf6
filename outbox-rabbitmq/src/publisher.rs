//! [`RabbitPublisher`]: a batch handler that publishes deliveries to
//! RabbitMQ with publisher confirms.

use std::{collections::HashMap, fmt, sync::Arc};

use async_trait::async_trait;
use diesel_outbox_core::{
    BatchHandler, Delivery, Handler, HandlerError, HandlerKey, RegistryBuilder, wire,
};
use lapin::{Channel, Confirmation, PublisherConfirm, options::BasicPublishOptions};

use crate::{RabbitError, Route, RoutingKey, connector::Connector, properties};

pub use diesel_outbox_core::wire::MAX_MESSAGE_ID_PREFIX_BYTES;

/// Publishes each delivery to the exchange and routing key its kind is
/// routed to, and succeeds only when the broker confirmed it.
///
/// Every message is persistent (delivery mode 2) and `mandatory`: a
/// message no queue is bound for comes back from the broker and fails its
/// task (retryably, naming the exchange and the routing key), never a
/// silent success. Its `message_id` is the task's
/// [message id](Delivery::message_id), `<outbox id>:<task id>`, unique to
/// the task across every outbox, so a consumer's inbox drops a replay and
/// never the message of another service's task; its `type` is the kind. The
/// task's headers travel as AMQP headers (text), with `Outbox-Kind`,
/// `Outbox-Version`, `Outbox-Task-Id`, `Outbox-Attempt` and
/// `Outbox-Source` (the outbox id) added.
///
/// It is a [`BatchHandler`] (what [`register`](Self::register) makes it) and
/// a [`Handler`]: a relay publishes every message of a claim, then awaits
/// their confirms together. The connection opens on first use; when the
/// broker goes away, the tasks whose confirms never came fail retryably
/// and the next publish connects again, after a pause that doubles with
/// each failed try (100 ms up to 5 s).
#[derive(Clone)]
pub struct RabbitPublisher {
    inner: Arc<Inner>,
}

struct Inner {
    connector: Connector,
    routes: HashMap<HandlerKey, Route>,
    message_id_prefix: Option<String>,
}

impl fmt::Debug for RabbitPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitPublisher")
            .field("routes", &self.inner.routes)
            .field("message_id_prefix", &self.inner.message_id_prefix)
            .finish_non_exhaustive()
    }
}

impl RabbitPublisher {
    /// Starts configuring a publisher to the broker at `url`
    /// (`amqp://user:password@host:port/vhost`).
    pub fn builder(url: impl Into<String>) -> PublisherBuilder {
        PublisherBuilder {
            url: url.into(),
            routes: Vec::new(),
            message_id_prefix: None,
        }
    }

    /// Where each `(kind, version)` is published.
    pub fn routes(&self) -> &HashMap<HandlerKey, Route> {
        &self.inner.routes
    }

    /// The `message_id` of a delivery: its [message id](Delivery::message_id),
    /// or `<prefix>:<task id>` with an explicit `message_id_prefix`.
    pub fn message_id(&self, delivery: &Delivery) -> String {
        delivery.message_id_with(self.inner.message_id_prefix.as_deref())
    }

    /// Registers this publisher as the batch handler of every routed
    /// `(kind, version)`.
    pub fn register(&self, registry: RegistryBuilder) -> RegistryBuilder {
        registry.batch_handler_for(self.inner.routes.keys(), self)
    }

    /// Publishes `delivery` and waits for the broker's confirm.
    ///
    /// Retryable: the broker unreachable or gone before it confirmed, a
    /// `nack`, a message no queue is bound for. Permanent: a kind with no
    /// route, a routing key (an ordering key) or header name over AMQP's
    /// 255 bytes, a header name reserved for the outbox or RabbitMQ.
    pub async fn publish(&self, delivery: &Delivery) -> Result<(), HandlerError> {
        let route = self.route(delivery)?;
        let channel = self.inner.connector.take().await?;
        let sent = self.start(&channel, route, delivery).await;
        let answer = match sent {
            Ok(sent) => {
                let confirmed = sent.confirmed().await;
                let returned = returned_ids([&confirmed]);
                confirmed.answer(&returned)
            }
            Err(error) => Err(error),
        };
        self.inner.connector.give_back(channel).await;
        answer
    }

    /// The route of each delivery, looked up again only where the kind or
    /// version changes (a relay's batch is of one kind and version).
    fn routes_of<'a>(&'a self, deliveries: &[Delivery]) -> Vec<Result<&'a Route, HandlerError>> {
        let mut routes: Vec<Result<&Route, HandlerError>> = Vec::with_capacity(deliveries.len());
        let mut previous: Option<&Delivery> = None;
        for delivery in deliveries {
            let same = previous.is_some_and(|previous| {
                previous.task.kind == delivery.task.kind
                    && previous.task.version == delivery.task.version
            });
            let route = match routes.last() {
                Some(Ok(route)) if same => Ok(*route),
                _ => self.route(delivery),
            };
            routes.push(route);
            previous = Some(delivery);
        }
        routes
    }

    /// The route of `delivery`'s kind and version.
    fn route(&self, delivery: &Delivery) -> Result<&Route, HandlerError> {
        let key = delivery.key();
        self.inner.routes.get(&key).ok_or_else(|| {
            HandlerError::permanent(anyhow::anyhow!("no exchange is routed for {key}"))
        })
    }

    /// Sends `delivery`'s message on `channel` by `route`; returns where it
    /// went, its message id and the confirm to await.
    async fn start<'a>(
        &self,
        channel: &Channel,
        route: &'a Route,
        delivery: &'a Delivery,
    ) -> Result<Sent<'a>, HandlerError> {
        let ordering_key = delivery.task.ordering_key.as_deref();
        let routing_key = route.key_for(ordering_key).ok_or_else(|| {
            HandlerError::permanent(anyhow::anyhow!(
                "the routing key of {} (its ordering key) is longer than the 255 bytes AMQP carries",
                delivery.key()
            ))
        })?;
        let message_id = self.message_id(delivery);
        let properties = properties::build(delivery, &message_id)?;
        let destination = Destination {
            route,
            ordering_key,
        };
        let confirm = channel
            .basic_publish(
                route.exchange.as_str().into(),
                routing_key,
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                delivery.payload(),
                properties,
            )
            .await
            .map_err(|error| {
                HandlerError::retryable(anyhow::anyhow!(
                    "publishing to exchange `{}` failed: {error}",
                    route.exchange
                ))
            })?;
        Ok(Sent {
            to: destination,
            message_id,
            confirm,
        })
    }
}

/// Where one message went: by its route, with its ordering key (named
/// only when something failed).
struct Destination<'a> {
    route: &'a Route,
    ordering_key: Option<&'a str>,
}

/// A message handed to the channel: where it went, its id, and the confirm
/// to await.
struct Sent<'a> {
    to: Destination<'a>,
    message_id: String,
    confirm: PublisherConfirm,
}

impl<'a> Sent<'a> {
    async fn confirmed(self) -> Confirmed<'a> {
        Confirmed {
            to: self.to,
            message_id: self.message_id,
            confirm: self.confirm.await,
        }
    }
}

/// A message's confirm as it came back.
struct Confirmed<'a> {
    to: Destination<'a>,
    message_id: String,
    confirm: Result<Confirmation, lapin::Error>,
}

/// The ids of the messages the broker returned (unroutable), whichever
/// confirm of the channel carried them: lapin hands a returned message to
/// the next confirm it completes, which need not be that message's own.
/// A return without an id counts against the message whose confirm carried
/// it.
fn returned_ids<'c, 'a: 'c>(
    confirmed: impl IntoIterator<Item = &'c Confirmed<'a>>,
) -> std::collections::HashSet<String> {
    confirmed
        .into_iter()
        .filter_map(|confirmed| match &confirmed.confirm {
            Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned))) => Some(
                returned
                    .delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .map_or_else(|| confirmed.message_id.clone(), |id| id.as_str().to_owned()),
            ),
            _ => None,
        })
        .collect()
}

impl Confirmed<'_> {
    /// What the confirm means for the message's task, given the ids of the
    /// messages its channel's publish had returned.
    fn answer(&self, returned: &std::collections::HashSet<String>) -> Result<(), HandlerError> {
        let exchange = &self.to.route.exchange;
        match &self.confirm {
            Ok(Confirmation::Ack(_)) if returned.contains(&self.message_id) => {
                let routing_key = self
                    .to
                    .route
                    .key_for(self.to.ordering_key)
                    .map(|key| key.as_str().to_owned())
                    .unwrap_or_default();
                Err(HandlerError::retryable(anyhow::anyhow!(
                    "unroutable: no queue is bound to exchange `{exchange}` for routing key \
                     `{routing_key}` (the broker returned the message)"
                )))
            }
            Ok(Confirmation::Ack(_)) => Ok(()),
            Ok(Confirmation::Nack(_)) => Err(HandlerError::retryable(anyhow::anyhow!(
                "the broker refused the message for exchange `{exchange}` (nack)"
            ))),
            Ok(Confirmation::NotRequested) => Err(HandlerError::retryable(anyhow::anyhow!(
                "the channel does not confirm: the message may not be stored"
            ))),
            Err(error) => Err(HandlerError::retryable(anyhow::anyhow!(
                "no confirm from the broker for exchange `{exchange}`: {error}"
            ))),
        }
    }
}

#[async_trait]
impl Handler for RabbitPublisher {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        self.publish(&delivery).await
    }
}

/// Sends every message of the batch on one channel, then awaits their
/// confirms together: the batch costs about one round trip to the broker.
/// Each delivery's answer is its own confirm.
#[async_trait]
impl BatchHandler for RabbitPublisher {
    async fn handle_batch(&self, deliveries: Vec<Delivery>) -> Vec<Result<(), HandlerError>> {
        let routes = self.routes_of(&deliveries);
        // A kind with no route fails for good, whether the broker is up or not.
        if routes.iter().all(|route| route.is_err()) {
            return routes.into_iter().map(|route| route.map(|_| ())).collect();
        }
        let channel = match self.inner.connector.take().await {
            Ok(channel) => channel,
            Err(error) => {
                let error = error.to_string();
                return deliveries
                    .iter()
                    .map(|_| Err(HandlerError::retryable(anyhow::anyhow!("{error}"))))
                    .collect();
            }
        };
        let mut started = Vec::with_capacity(deliveries.len());
        for (delivery, route) in deliveries.iter().zip(routes) {
            started.push(match route {
                Ok(route) => self.start(&channel, route, delivery).await,
                Err(error) => Err(error),
            });
        }
        let confirmed =
            futures_util::future::join_all(started.into_iter().map(|started| async move {
                match started {
                    Ok(sent) => Ok(sent.confirmed().await),
                    Err(error) => Err(error),
                }
            }))
            .await;
        self.inner.connector.give_back(channel).await;
        let returned = returned_ids(confirmed.iter().filter_map(|c| c.as_ref().ok()));
        confirmed
            .into_iter()
            .map(|confirmed| confirmed.and_then(|confirmed| confirmed.answer(&returned)))
            .collect()
    }
}

/// Configures a [`RabbitPublisher`]; every route is checked by
/// [`build`](PublisherBuilder::build), so a bad name fails at start-up,
/// never at send time.
pub struct PublisherBuilder {
    url: String,
    routes: Vec<(HandlerKey, Route)>,
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
    /// Publishes `(kind, version)` to `exchange` with `routing_key`.
    pub fn route(
        mut self,
        kind: impl Into<String>,
        version: i32,
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
    ) -> Self {
        self.routes.push((
            HandlerKey::new(kind, version),
            Route {
                exchange: exchange.into(),
                routing_key: RoutingKey::Fixed(routing_key.into()),
            },
        ));
        self
    }

    /// Publishes `(kind, version)` to `exchange` with each task's ordering
    /// key as its routing key (a consistent-hash exchange keeps a key on
    /// one queue), or `fallback` for a task without one.
    pub fn route_by_ordering_key(
        mut self,
        kind: impl Into<String>,
        version: i32,
        exchange: impl Into<String>,
        fallback: impl Into<String>,
    ) -> Self {
        self.routes.push((
            HandlerKey::new(kind, version),
            Route {
                exchange: exchange.into(),
                routing_key: RoutingKey::OrderingKey {
                    fallback: fallback.into(),
                },
            },
        ));
        self
    }

    /// Makes `message_id` `<prefix>:<task id>` instead of the task's
    /// [message id](Delivery::message_id) (`<outbox id>:<task id>`, the
    /// default, unique to each outbox by construction). Two publishers with
    /// the same prefix collide in a shared inbox: give each its own. At
    /// most [`MAX_MESSAGE_ID_PREFIX_BYTES`] bytes, so an id fits an inbox.
    pub fn message_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.message_id_prefix = Some(prefix.into());
        self
    }

    /// Checks every route and builds the publisher (it connects on first
    /// use).
    pub fn build(self) -> Result<RabbitPublisher, RabbitError> {
        let config = |field: &'static str, reason: String| RabbitError::Config { field, reason };
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
        for (key, route) in self.routes {
            route
                .check()
                .map_err(|reason| config("routes", format!("{key}: {reason}")))?;
            if routes.insert(key.clone(), route).is_some() {
                return Err(config("routes", format!("{key} is routed twice")));
            }
        }
        if self.url.parse::<lapin::uri::AMQPUri>().is_err() {
            return Err(config("url", "not an amqp:// URL".into()));
        }
        Ok(RabbitPublisher {
            inner: Arc::new(Inner {
                connector: Connector::new(self.url),
                routes,
                message_id_prefix: self.message_id_prefix,
            }),
        })
    }
}
