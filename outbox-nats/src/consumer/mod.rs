//! [`InboxConsumer`]: a loop on a durable JetStream pull consumer that
//! applies each message once, through an [`Inbox`].

mod dead_letter;
mod incoming;
pub(crate) mod metrics;
mod process;

use std::{fmt, sync::Arc, time::Duration};

use async_nats::jetstream::consumer::PullConsumer;
use diesel_outbox_core::{CancellationToken, Inbox, RetryPolicy, inbox::check_key};
use futures_util::StreamExt;
use tokio::{sync::Semaphore, task::JoinSet};

pub use dead_letter::{DEAD_CONSUMER, DEAD_DELIVERED, DEAD_REASON, DEAD_SEQUENCE, DeadLetter};
pub use incoming::{ConsumeHandler, Incoming};

use crate::NatsError;

/// What a run of the consumer did, counted per message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerReport {
    /// Messages applied: the handler's transaction committed, then the
    /// message was acknowledged.
    pub applied: u64,
    /// Deliveries the inbox had already applied: acknowledged without
    /// calling the handler.
    pub duplicates: u64,
    /// Deliveries that failed (handler, database or timeout) and were handed
    /// back for a later redelivery.
    pub failed: u64,
    /// Messages given up: dead-lettered (when configured) and terminated.
    pub dead_lettered: u64,
}

/// How one delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Applied,
    Duplicate,
    Failed,
    DeadLettered,
}

impl ConsumerReport {
    fn add(&mut self, outcome: Outcome) {
        let slot = match outcome {
            Outcome::Applied => &mut self.applied,
            Outcome::Duplicate => &mut self.duplicates,
            Outcome::Failed => &mut self.failed,
            Outcome::DeadLettered => &mut self.dead_lettered,
        };
        *slot += 1;
    }
}

/// The settings and parts each delivery shares.
pub(crate) struct Shared<I, H> {
    pub(crate) inbox: I,
    pub(crate) handler: H,
    pub(crate) name: String,
    pub(crate) retry: RetryPolicy,
    pub(crate) max_deliveries: i64,
    pub(crate) handler_timeout: Duration,
    pub(crate) dead_letter: Option<DeadLetter>,
}

/// Applies each message of a durable pull consumer once, in a transaction
/// of the consumer's database that also records it in the inbox.
///
/// For each message: decode it, open a transaction, record its
/// `Nats-Msg-Id` for this consumer ([`Inbox::record`]), run the
/// [`ConsumeHandler`] on the same transaction, commit, then acknowledge. A
/// message the inbox has seen is acknowledged without the handler; the
/// acknowledgement is sent only after the commit, so a crash in between
/// costs a redelivery that the inbox absorbs. See the crate docs and
/// `docs/consuming.md` for failures, shutdown and retention.
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
    shared: Arc<Shared<I, H>>,
    consumer: PullConsumer,
    concurrency: usize,
}

impl<I: Inbox, H> fmt::Debug for InboxConsumer<I, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxConsumer")
            .field("name", &self.shared.name)
            .field("concurrency", &self.concurrency)
            .field("max_deliveries", &self.shared.max_deliveries)
            .field("handler_timeout", &self.shared.handler_timeout)
            .field("dead_letter", &self.shared.dead_letter)
            .finish()
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
            dead_letter: None,
        }
    }

    /// The name the inbox records messages under.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Pulls and applies messages until `shutdown` is cancelled, then stops
    /// pulling and waits for the messages in hand: each is committed and
    /// acknowledged, or handed back (`-NAK`) when it fails. Messages pulled
    /// but not started are left unacknowledged and come back after the
    /// consumer's `ack_wait`. No message is ever acknowledged before its
    /// transaction committed.
    ///
    /// Fails only when the message stream cannot be opened or ends (the
    /// consumer was deleted); failures of single messages are counted in the
    /// report and logged.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<ConsumerReport, NatsError> {
        let jetstream = |e: Box<dyn std::error::Error + Send + Sync>| NatsError::JetStream(e);
        let mut messages = self
            .consumer
            .stream()
            .max_messages_per_batch(self.concurrency)
            .messages()
            .await
            .map_err(|e| jetstream(Box::new(e)))?;
        let permits = Arc::new(Semaphore::new(self.concurrency));
        let mut running = JoinSet::new();
        let mut report = ConsumerReport::default();
        let ended = loop {
            while let Some(done) = running.try_join_next() {
                report.add(done.unwrap_or(Outcome::Failed));
            }
            let permit = tokio::select! {
                biased;
                () = shutdown.cancelled() => break false,
                permit = Arc::clone(&permits).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break false,
                },
            };
            let next = tokio::select! {
                biased;
                () = shutdown.cancelled() => break false,
                next = messages.next() => next,
            };
            match next {
                None => break true,
                Some(Err(error)) => {
                    tracing::warn!(consumer = %self.shared.name, %error, "pulling messages failed");
                }
                Some(Ok(message)) => {
                    let shared = Arc::clone(&self.shared);
                    running.spawn(async move {
                        let outcome = process::one(&shared, message).await;
                        drop(permit);
                        outcome
                    });
                }
            }
        };
        // Stop pulling; the messages in hand finish (commit and ack, or nak).
        drop(messages);
        while let Some(done) = running.join_next().await {
            report.add(done.unwrap_or(Outcome::Failed));
        }
        if ended {
            return Err(jetstream("the consumer's message stream ended".into()));
        }
        Ok(report)
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

    /// Deliveries tried before a message that keeps failing retryably is
    /// given up (default 5). A permanent failure is given up at once. Leave
    /// the JetStream consumer's own `max_deliver` unlimited, or above this.
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
        check_key(&name, "-").map_err(|e| config("name", e.to_string()))?;
        if self.concurrency == 0 || self.concurrency > Semaphore::MAX_PERMITS {
            return Err(config(
                "concurrency",
                format!("must be between 1 and {}", Semaphore::MAX_PERMITS),
            ));
        }
        if self.max_deliveries == 0 {
            return Err(config("max_deliveries", "must be at least 1".into()));
        }
        if self.handler_timeout.is_zero() {
            return Err(config("handler_timeout", "must not be zero".into()));
        }
        Ok(InboxConsumer {
            shared: Arc::new(Shared {
                inbox: self.inbox,
                handler: self.handler,
                name,
                retry: self.retry,
                max_deliveries: i64::from(self.max_deliveries),
                handler_timeout: self.handler_timeout,
                dead_letter: self.dead_letter,
            }),
            consumer: self.consumer,
            concurrency: self.concurrency,
        })
    }
}

fn durable_name(consumer: &PullConsumer) -> Option<String> {
    consumer.cached_info().config.durable_name.clone()
}
