//! [`InboxConsumer`]: a loop on a durable JetStream pull consumer that
//! applies each message once, through an [`Inbox`].

mod dead_letter;
mod process;

use std::{fmt, sync::Arc, time::Duration};

use async_nats::jetstream::consumer::PullConsumer;
use diesel_outbox_core::{
    CancellationToken, Inbox, RetryPolicy,
    consume::{ConsumeFlow, ConsumerSettings},
};
use futures_util::StreamExt;
use tokio::sync::Semaphore;

pub use dead_letter::{DEAD_CONSUMER, DEAD_DELIVERED, DEAD_REASON, DEAD_SEQUENCE, DeadLetter};
pub use diesel_outbox_core::consume::{ConsumeHandler, ConsumerReport, Incoming};

use crate::NatsError;
use process::Delivered;

/// How long the server may stay silent before a consumer counts a receive
/// error, by default.
pub const DEFAULT_IDLE_HEARTBEAT: Duration = Duration::from_secs(5);

/// Applies each message of a durable pull consumer once, in a transaction
/// of the consumer's database that also records it in the inbox.
///
/// For each message: decode it, open a transaction, record its
/// `Nats-Msg-Id` for this consumer ([`Inbox::record`]), run the
/// [`ConsumeHandler`] on the same transaction, commit, then acknowledge. A
/// message the inbox has seen is acknowledged without the handler; the
/// acknowledgement is sent only after the commit, so a crash in between
/// costs a redelivery that the inbox absorbs. See the crate docs and
/// [consuming.md](https://github.com/outbox-rs/outbox/blob/main/docs/consuming.md) for failures, shutdown and retention.
///
/// ```no_run
/// use async_nats::jetstream::consumer::pull;
/// use diesel_async::AsyncPgConnection;
/// use diesel_outbox_nats::{ConsumeHandler, Incoming, InboxConsumer};
/// use diesel_outbox_postgres::{PgStore, outbox::{CancellationToken, HandlerError, Store, Task}};
///
/// /// Records a shipment, and announces it through the outbox, in the
/// /// consumer's transaction: consume, effect and next event are atomic.
/// struct Ship {
///     store: PgStore,
/// }
///
/// #[async_trait::async_trait]
/// impl ConsumeHandler<AsyncPgConnection> for Ship {
///     async fn handle(
///         &self,
///         conn: &mut AsyncPgConnection,
///         incoming: &Incoming,
///     ) -> Result<(), HandlerError> {
///         let order: serde_json::Value = incoming.json()?;
///         // diesel::insert_into(shipments::table)...execute(conn).await?;
///         let next = Task::json("shipment.created", 1, &order)?;
///         self.store.enqueue(conn, next).await?;
///         Ok(())
///     }
/// }
///
/// # async fn demo(store: PgStore) -> anyhow::Result<()> {
/// let jetstream = async_nats::jetstream::new(async_nats::connect("nats://127.0.0.1:4222").await?);
/// let consumer = jetstream
///     .get_stream("ORDERS")
///     .await?
///     .get_or_create_consumer("shipping", pull::Config {
///         durable_name: Some("shipping".into()),
///         ..Default::default()
///     })
///     .await?;
/// let consumer = InboxConsumer::builder(store.clone(), consumer, Ship { store })
///     .name("shipping")
///     .concurrency(16)
///     .build()?;
/// let shutdown = CancellationToken::new();
/// let report = consumer.run(shutdown).await?;
/// println!("applied {}, duplicates {}", report.applied, report.duplicates);
/// # Ok(())
/// # }
/// ```
pub struct InboxConsumer<I: Inbox, H> {
    flow: Arc<ConsumeFlow<I, H>>,
    consumer: PullConsumer,
    concurrency: usize,
    idle_heartbeat: Duration,
    dead_letter: Option<Arc<DeadLetter>>,
}

impl<I: Inbox, H> fmt::Debug for InboxConsumer<I, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxConsumer")
            .field("concurrency", &self.concurrency)
            .field("dead_letter", &self.dead_letter)
            .finish_non_exhaustive()
    }
}

impl<I: Inbox, H: ConsumeHandler<I::Conn>> InboxConsumer<I, H> {
    /// Starts configuring a consumer that reads `consumer` (a durable pull
    /// consumer), records in `inbox` and applies with `handler`.
    pub fn builder(inbox: I, consumer: PullConsumer, handler: H) -> ConsumerBuilder<I, H> {
        ConsumerBuilder {
            inbox,
            consumer,
            handler,
            name: None,
            concurrency: 16,
            retry: RetryPolicy::default(),
            max_deliveries: 5,
            handler_timeout: Duration::from_secs(30),
            idle_heartbeat: DEFAULT_IDLE_HEARTBEAT,
            dead_letter: None,
        }
    }

    /// The name the inbox records messages under.
    pub fn name(&self) -> &str {
        self.flow.name()
    }

    /// Pulls and applies messages until `shutdown` is cancelled, then stops
    /// pulling and waits for the messages in hand: each is committed and
    /// acknowledged, or handed back (`-NAK`) when it fails. Messages pulled
    /// but not started are left unacknowledged and come back after the
    /// consumer's `ack_wait`. No message is ever acknowledged before its
    /// transaction committed. Each delivery is decided by the shared
    /// [consumer flow](diesel_outbox_core::consume).
    ///
    /// A failure to receive messages (the server went away and missed its
    /// heartbeats, the consumer was deleted) is logged, counted in
    /// `outbox_consumer_receive_errors_total` and the report, and followed by
    /// a pause that doubles with each failure in a row (100 ms up to 5 s),
    /// never a tight loop. Fails only when the message stream cannot be
    /// opened or ends.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<ConsumerReport, NatsError> {
        let jetstream = |e: Box<dyn std::error::Error + Send + Sync>| NatsError::JetStream(e);
        let messages = self
            .consumer
            .stream()
            .max_messages_per_batch(self.concurrency)
            .heartbeat(self.idle_heartbeat)
            .expires(self.idle_heartbeat * 4)
            .messages()
            .await
            .map_err(|e| jetstream(Box::new(e)))?;
        let consumer: Arc<str> = Arc::from(self.flow.name());
        let dead_letter = self.dead_letter.clone();
        let messages = messages.map(move |message| {
            message
                .map(|message| Delivered::new(message, Arc::clone(&consumer), dead_letter.clone()))
        });
        let ran = self.flow.run(messages, self.concurrency, shutdown).await;
        if ran.stream_ended {
            return Err(jetstream("the consumer's message stream ended".into()));
        }
        Ok(ran.report)
    }
}

/// Configures an [`InboxConsumer`]; [`build`](ConsumerBuilder::build)
/// checks the settings.
pub struct ConsumerBuilder<I: Inbox, H> {
    inbox: I,
    consumer: PullConsumer,
    handler: H,
    name: Option<String>,
    concurrency: usize,
    retry: RetryPolicy,
    max_deliveries: u32,
    handler_timeout: Duration,
    idle_heartbeat: Duration,
    dead_letter: Option<DeadLetter>,
}

impl<I: Inbox, H> fmt::Debug for ConsumerBuilder<I, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("name", &self.name)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

impl<I: Inbox, H: ConsumeHandler<I::Conn>> ConsumerBuilder<I, H> {
    /// The name the inbox records under (at most 64 bytes); by default the
    /// durable consumer's name. Two consumers that must each apply every
    /// message need different names.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How many messages are applied at once (default 16), each in its own
    /// transaction on its own pooled connection: keep it within the pool.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// The delay before a failed message is redelivered, by delivery count
    /// (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Deliveries tried before a message that keeps failing is given up
    /// (default 5). A permanent failure, a database error that cannot pass
    /// by retrying, and a message whose id the inbox cannot store are given
    /// up at once. Leave the JetStream consumer's own `max_deliver`
    /// unlimited, or above this.
    pub fn max_deliveries(mut self, max: u32) -> Self {
        self.max_deliveries = max;
        self
    }

    /// How long one message's transaction may take (default 30 s); past it
    /// the transaction is abandoned (rolled back) and the message handed
    /// back. Keep it below the JetStream consumer's `ack_wait`.
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.handler_timeout = timeout;
        self
    }

    /// How often the server sends a heartbeat while it has nothing to
    /// deliver (default [`DEFAULT_IDLE_HEARTBEAT`], at least 100 ms): two
    /// heartbeats missed count as a receive error, logged and counted in
    /// `outbox_consumer_receive_errors_total`, so a server that went away
    /// is heard of instead of waited on in silence. Pull requests expire
    /// after four heartbeats.
    pub fn idle_heartbeat(mut self, heartbeat: Duration) -> Self {
        self.idle_heartbeat = heartbeat;
        self
    }

    /// Copies given-up messages to a dead-letter subject before terminating
    /// them; without one they are only terminated (JetStream publishes a
    /// `MSG_TERMINATED` advisory) and logged.
    pub fn dead_letter(mut self, dead_letter: DeadLetter) -> Self {
        self.dead_letter = Some(dead_letter);
        self
    }

    /// Checks the settings: a usable name, `concurrency` and
    /// `max_deliveries` of at least 1, a non-zero handler timeout.
    pub fn build(self) -> Result<InboxConsumer<I, H>, NatsError> {
        let config = |field: &'static str, reason: String| NatsError::Config { field, reason };
        let name = match self.name {
            Some(name) => name,
            None => durable_name(&self.consumer)
                .ok_or_else(|| config("name", "the consumer is not durable: name it".into()))?,
        };
        if self.concurrency == 0 || self.concurrency > Semaphore::MAX_PERMITS {
            return Err(config(
                "concurrency",
                format!("must be between 1 and {}", Semaphore::MAX_PERMITS),
            ));
        }
        if self.idle_heartbeat < Duration::from_millis(100) {
            return Err(config("idle_heartbeat", "must be at least 100 ms".into()));
        }
        let mut settings = ConsumerSettings::new(name);
        settings.retry = self.retry;
        settings.max_deliveries = self.max_deliveries;
        settings.handler_timeout = self.handler_timeout;
        let flow =
            ConsumeFlow::new(self.inbox, self.handler, settings).map_err(|error| match error {
                diesel_outbox_core::Error::Config { field, reason } => config(field, reason),
                other => config("consumer", other.to_string()),
            })?;
        Ok(InboxConsumer {
            flow: Arc::new(flow),
            consumer: self.consumer,
            concurrency: self.concurrency,
            idle_heartbeat: self.idle_heartbeat,
            dead_letter: self.dead_letter.map(Arc::new),
        })
    }
}

fn durable_name(consumer: &PullConsumer) -> Option<String> {
    consumer.cached_info().config.durable_name.clone()
}
