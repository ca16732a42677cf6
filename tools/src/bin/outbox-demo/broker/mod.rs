//! The broker the demo publishes to, with `--nats` or `--rabbitmq`: an
//! enum per concern with a variant per broker (each in a feature of its
//! own), so that the demo's flow is written once.

// Built with no broker, the enums below have no variants, and the
// arguments of their methods go unused.
#![cfg_attr(
    not(any(feature = "nats", feature = "rabbitmq")),
    allow(unused_variables)
)]

#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;

use diesel_outbox_core::{
    CancellationToken, Delivery, HandlerError, Inbox,
    consume::{ConsumeHandler, ConsumerReport},
};
use tokio::task::JoinHandle;

/// A broker the demo can publish to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// NATS JetStream (`--nats`).
    Nats,
    /// RabbitMQ (`--rabbitmq`).
    RabbitMq,
}

impl Kind {
    /// The broker's name, as the demo says it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Nats => "NATS JetStream",
            Self::RabbitMq => "RabbitMQ",
        }
    }

    /// The cargo feature the broker needs (also its flag).
    fn feature(self) -> &'static str {
        match self {
            Self::Nats => "nats",
            Self::RabbitMq => "rabbitmq",
        }
    }
}

/// The demo's own place on a broker (a stream, or an exchange and its
/// queue), removed when dropped.
#[derive(Debug)]
pub(crate) enum Broker {
    /// A JetStream stream.
    #[cfg(feature = "nats")]
    Nats(diesel_outbox_testkit::nats::TestStream),
    /// A direct exchange with the shipping service's queue bound to it.
    #[cfg(feature = "rabbitmq")]
    RabbitMq(diesel_outbox_testkit::rabbitmq::TestQueue),
}

/// The running shipping consumer: its report once it stopped.
pub(crate) type Consuming = JoinHandle<anyhow::Result<ConsumerReport>>;

impl Broker {
    /// Creates the demo's stream, or exchange and queue, on the `kind`
    /// broker.
    pub(crate) async fn create(kind: Kind) -> anyhow::Result<Self> {
        match kind {
            #[cfg(feature = "nats")]
            Kind::Nats => Ok(Self::Nats(nats::stream().await?)),
            #[cfg(feature = "rabbitmq")]
            Kind::RabbitMq => Ok(Self::RabbitMq(rabbitmq::queue().await?)),
            #[allow(unreachable_patterns)]
            kind => anyhow::bail!(
                "outbox-demo was built without the `{}` feature",
                kind.feature()
            ),
        }
    }

    /// Where relays publish to it.
    pub(crate) fn target(&self) -> Target {
        match *self {
            #[cfg(feature = "nats")]
            Self::Nats(ref stream) => Target {
                nats_prefix: Some(stream.prefix().to_owned()),
                ..Target::default()
            },
            #[cfg(feature = "rabbitmq")]
            Self::RabbitMq(ref queue) => Target {
                rabbitmq_exchange: Some(queue.exchange().to_owned()),
                rabbitmq_routing_key: Some(queue.routing_key().to_owned()),
                ..Target::default()
            },
        }
    }

    /// Starts applying its messages with `handler`, through `inbox`,
    /// `concurrency` at a time, until `shutdown`.
    pub(crate) async fn consume<I, H>(
        &self,
        inbox: I,
        handler: H,
        concurrency: u16,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Consuming>
    where
        I: Inbox,
        H: ConsumeHandler<I::Conn> + 'static,
    {
        match *self {
            #[cfg(feature = "nats")]
            Self::Nats(ref stream) => {
                nats::consume(stream, inbox, handler, concurrency, shutdown).await
            }
            #[cfg(feature = "rabbitmq")]
            Self::RabbitMq(ref queue) => {
                rabbitmq::consume(queue, inbox, handler, concurrency, shutdown)
            }
        }
    }

    /// How many messages still wait for the consumer: JetStream's pending
    /// and unacknowledged ones; RabbitMQ's ready ones, in the queue and its
    /// retry queue (those in the consumer's hands are not counted).
    pub(crate) async fn unconsumed(&self) -> anyhow::Result<u64> {
        match *self {
            #[cfg(feature = "nats")]
            Self::Nats(ref stream) => nats::unconsumed(stream).await,
            #[cfg(feature = "rabbitmq")]
            Self::RabbitMq(ref queue) => rabbitmq::unconsumed(queue).await,
        }
    }

    /// The messages it carried, for the summary: those the stream holds,
    /// or the copies in RabbitMQ's audit queue (taken out).
    pub(crate) async fn carried(&self) -> anyhow::Result<Carried> {
        match *self {
            #[cfg(feature = "nats")]
            Self::Nats(ref stream) => nats::carried(stream).await,
            #[cfg(feature = "rabbitmq")]
            Self::RabbitMq(ref queue) => rabbitmq::carried(queue).await,
        }
    }
}

/// The messages a broker carried.
#[derive(Debug)]
pub(crate) struct Carried {
    /// The broker, as the summary names it.
    pub(crate) broker: &'static str,
    /// How many messages.
    pub(crate) messages: u64,
    /// Distinct task ids among them.
    pub(crate) ids: u64,
    /// Whether the broker drops replays itself (JetStream's duplicate
    /// window); RabbitMQ leaves them all to the inbox.
    pub(crate) deduplicates: bool,
}

/// Where a relay publishes: what the demo hands its relay process on the
/// command line, and what both build their publisher from.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct Target {
    /// The demo's JetStream subject prefix.
    #[arg(long)]
    nats_prefix: Option<String>,
    /// The demo's RabbitMQ exchange.
    #[arg(
        long,
        requires = "rabbitmq_routing_key",
        conflicts_with = "nats_prefix"
    )]
    rabbitmq_exchange: Option<String>,
    /// The routing key the demo's queue is bound under.
    #[arg(long, requires = "rabbitmq_exchange")]
    rabbitmq_routing_key: Option<String>,
}

impl Target {
    /// The command-line arguments that name this target.
    pub(crate) fn args(&self) -> Vec<String> {
        let named = [
            ("--nats-prefix", &self.nats_prefix),
            ("--rabbitmq-exchange", &self.rabbitmq_exchange),
            ("--rabbitmq-routing-key", &self.rabbitmq_routing_key),
        ];
        named
            .into_iter()
            .filter_map(|(flag, value)| Some([flag.to_owned(), value.clone()?]))
            .flatten()
            .collect()
    }

    /// The publisher to the target, if it names one.
    pub(crate) async fn publisher(&self) -> anyhow::Result<Option<Publisher>> {
        match (
            &self.nats_prefix,
            &self.rabbitmq_exchange,
            &self.rabbitmq_routing_key,
        ) {
            (None, None, None) => Ok(None),
            #[cfg(feature = "nats")]
            (Some(prefix), None, None) => {
                let publisher = nats::publisher(prefix).await?;
                Ok(Some(Publisher::Nats(std::sync::Arc::new(publisher))))
            }
            #[cfg(feature = "rabbitmq")]
            (None, Some(exchange), Some(routing_key)) => Ok(Some(Publisher::RabbitMq(
                rabbitmq::publisher(exchange, routing_key)?,
            ))),
            _ => anyhow::bail!(
                "outbox-demo cannot publish to {self:?}: its broker is not built in, or more \
                 than one is named"
            ),
        }
    }
}

/// What the order.created handler publishes each delivery with.
#[derive(Debug, Clone)]
pub(crate) enum Publisher {
    /// To JetStream, which drops a replay within its duplicate window.
    #[cfg(feature = "nats")]
    Nats(std::sync::Arc<diesel_outbox_nats::JetStreamPublisher>),
    /// To RabbitMQ, confirmed into the queue.
    #[cfg(feature = "rabbitmq")]
    RabbitMq(diesel_outbox_rabbitmq::RabbitPublisher),
}

impl Publisher {
    /// Publishes `delivery`; says whether the broker dropped it as a
    /// duplicate.
    pub(crate) async fn publish(&self, delivery: &Delivery) -> Result<bool, HandlerError> {
        match *self {
            #[cfg(feature = "nats")]
            Self::Nats(ref publisher) => Ok(publisher.publish(delivery).await?.duplicate),
            #[cfg(feature = "rabbitmq")]
            Self::RabbitMq(ref publisher) => publisher.publish(delivery).await.map(|()| false),
        }
    }
}
