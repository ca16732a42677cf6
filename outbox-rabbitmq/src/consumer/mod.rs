//! [`InboxConsumer`]: a loop on a RabbitMQ queue that applies each message
//! once, through an [`Inbox`].

mod delivered;

use std::{fmt, sync::Arc, time::Duration};

use diesel_outbox_core::{
    CancellationToken, Inbox, RetryPolicy,
    consume::{ConsumeFlow, ConsumerSettings, metrics::counted},
};
use futures_util::StreamExt;
use lapin::{
    Channel, Connection, ConnectionProperties,
    options::{
        BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions,
        QueueDeclareOptions,
    },
    types::{FieldTable, ShortString},
};

pub use delivered::{DEAD_CONSUMER, DEAD_DELIVERED, DEAD_QUEUE, DEAD_REASON, DeadLetter};
pub use diesel_outbox_core::consume::{ConsumeHandler, ConsumerReport, Incoming};

use crate::{
    RabbitError,
    connector::{MAX_BACKOFF, backoff},
};
use delivered::{Delivered, Shared, retry_queue_arguments};

/// Applies each message of a queue once, in a transaction of the
/// consumer's database that also records it in the inbox.
///
/// For each message: decode it, open a transaction, record its
/// `message_id` for this consumer ([`Inbox::record`]), run the
/// [`ConsumeHandler`] on the same transaction, commit, then `basic.ack`. A
/// message the inbox has seen is acknowledged without the handler; the
/// acknowledgement goes only after the commit, so a crash in between costs
/// a redelivery that the inbox absorbs. Each delivery is decided by the
/// shared [consumer flow](diesel_outbox_core::consume).
///
/// A failed message waits in the retry queue (`<queue>.retry`, declared
/// by [`run`](Self::run)) for the retry policy's delay, as a copy that
/// counts its deliveries, then comes back to the queue; the original is
/// acknowledged once the copy is confirmed. A message given up goes to the
/// [dead-letter exchange](ConsumerBuilder::dead_letter) with the reason,
/// or, without one, is rejected (the queue's own `x-dead-letter-exchange`
/// takes it, if it has one). At most `prefetch` messages are in hand at
/// once.
///
/// ```no_run
/// use diesel_async::AsyncPgConnection;
/// use diesel_outbox_postgres::{PgStore, outbox::{CancellationToken, HandlerError}};
/// use diesel_outbox_rabbitmq::{ConsumeHandler, Incoming, InboxConsumer};
///
/// struct Ship;
///
/// #[async_trait::async_trait]
/// impl ConsumeHandler<AsyncPgConnection> for Ship {
///     async fn handle(
///         &self,
///         _conn: &mut AsyncPgConnection,
///         incoming: &Incoming,
///     ) -> Result<(), HandlerError> {
///         let _order: serde_json::Value = incoming.json()?;
///         // diesel::insert_into(shipments::table)...execute(conn).await?;
///         Ok(())
///     }
/// }
///
/// # async fn demo(store: PgStore) -> anyhow::Result<()> {
/// let consumer = InboxConsumer::builder(store, "amqp://guest:guest@127.0.0.1:5672/%2f", "orders", Ship)
///     .name("shipping")
///     .prefetch(16)
///     .build()?;
/// let report = consumer.run(CancellationToken::new()).await?;
/// println!("applied {}, duplicates {}", report.applied, report.duplicates);
/// # Ok(())
/// # }
/// ```
pub struct InboxConsumer<I: Inbox, H> {
    flow: Arc<ConsumeFlow<I, H>>,
    url: String,
    queue: String,
    prefetch: u16,
    dead_letter: Option<DeadLetter>,
}

impl<I: Inbox, H> fmt::Debug for InboxConsumer<I, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxConsumer")
            .field("queue", &self.queue)
            .field("prefetch", &self.prefetch)
            .field("dead_letter", &self.dead_letter)
            .finish_non_exhaustive()
    }
}

/// The channels of one connection to the broker.
struct Session {
    connection: Connection,
    consuming: Channel,
    publishing: Channel,
}

impl<I, H> InboxConsumer<I, H>
where
    I: Inbox + 'static,
    H: ConsumeHandler<I::Conn> + 'static,
{
    /// Starts configuring a consumer that reads `queue` on the broker at
    /// `url`, records in `inbox` and applies with `handler`.
    pub fn builder(
        inbox: I,
        url: impl Into<String>,
        queue: impl Into<String>,
        handler: H,
    ) -> ConsumerBuilder<I, H> {
        ConsumerBuilder {
            inbox,
            url: url.into(),
            queue: queue.into(),
            handler,
            name: None,
            prefetch: 16,
            retry: RetryPolicy::default(),
            max_deliveries: 5,
            handler_timeout: Duration::from_secs(30),
            dead_letter: None,
        }
    }

    /// The name the inbox records messages under.
    pub fn name(&self) -> &str {
        self.flow.name()
    }

    /// The retry queue failed messages wait in: `<queue>.retry`.
    pub fn retry_queue(&self) -> String {
        format!("{}.retry", self.queue)
    }

    /// Consumes and applies messages until `shutdown` is cancelled, then
    /// cancels the subscription and waits for the messages in hand: each is
    /// committed and acknowledged, or handed back. Messages the broker sent
    /// but the consumer never started are requeued by the broker when the
    /// channel closes. No message is ever acknowledged before its
    /// transaction committed.
    ///
    /// When the connection is lost (the broker restarted), the loss is
    /// logged and counted as a receive error
    /// (`outbox_consumer_receive_errors_total`), and the consumer connects
    /// and subscribes again after a pause that doubles with each failure in
    /// a row (100 ms up to 5 s). Fails only when the first connection or
    /// subscription does (the broker is unreachable at start-up, the queue
    /// does not exist): a consumer that never worked is reported, not
    /// retried in silence.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<ConsumerReport, RabbitError> {
        let mut report = ConsumerReport::default();
        let mut failures = 0u32;
        let mut first = true;
        while !shutdown.is_cancelled() {
            let session = match self.open().await {
                Ok(session) => session,
                Err(error) if first => return Err(error),
                Err(error) => {
                    failures = failures.saturating_add(1);
                    report.receive_errors += 1;
                    counted("outbox_consumer_receive_errors_total", self.flow.name());
                    let pause = backoff(failures);
                    tracing::warn!(consumer = %self.flow.name(), %error, ?pause, "could not reach RabbitMQ; trying again after a pause");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(pause) => continue,
                    }
                }
            };
            let started = tokio::time::Instant::now();
            let ended = match self.consume(&session, &shutdown, &mut report).await {
                Ok(ended) => ended,
                Err(error) if first => return Err(error),
                Err(error) => {
                    tracing::warn!(consumer = %self.flow.name(), %error, "could not subscribe to the queue again");
                    true
                }
            };
            first = false;
            let _ = tokio::time::timeout(
                MAX_BACKOFF,
                session.connection.close(200, "consumer stopped".into()),
            )
            .await;
            if ended && !shutdown.is_cancelled() {
                report.receive_errors += 1;
                counted("outbox_consumer_receive_errors_total", self.flow.name());
                // A session that held for a while starts the count again.
                if started.elapsed() > MAX_BACKOFF {
                    failures = 0;
                }
                failures = failures.saturating_add(1);
                let pause = backoff(failures);
                tracing::warn!(consumer = %self.flow.name(), ?pause, "the connection to RabbitMQ was lost; connecting again after a pause");
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
        Ok(report)
    }

    /// Connects, declares the retry queue and opens the two channels.
    async fn open(&self) -> Result<Session, RabbitError> {
        let connection = Connection::connect(&self.url, ConnectionProperties::default()).await?;
        let consuming = connection.create_channel().await?;
        let publishing = connection.create_channel().await?;
        publishing
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        publishing
            .queue_declare(
                self.retry_queue().as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                retry_queue_arguments(&self.queue),
            )
            .await?;
        consuming
            .basic_qos(self.prefetch, BasicQosOptions::default())
            .await?;
        Ok(Session {
            connection,
            consuming,
            publishing,
        })
    }

    /// One subscription: until shutdown (`Ok(false)`) or the loss of the
    /// connection (`Ok(true)`).
    async fn consume(
        &self,
        session: &Session,
        shutdown: &CancellationToken,
        report: &mut ConsumerReport,
    ) -> Result<bool, RabbitError> {
        let tag = ShortString::from(format!("{}-{}", self.flow.name(), std::process::id()));
        let consumer = session
            .consuming
            .basic_consume(
                self.queue.as_str().into(),
                tag.clone(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let shared = Arc::new(Shared {
            consumer: self.flow.name().to_owned(),
            queue: self.queue.clone(),
            retry_queue: self.retry_queue(),
            publishing: session.publishing.clone(),
            dead_letter: self.dead_letter.clone(),
        });
        // A lost connection ends the subscription: the stream stops at its
        // first error rather than pausing on it, and so does a publishing
        // channel the broker closed (the copies need it), so that the
        // session is opened again.
        let publishing = session.publishing.clone();
        let name = self.flow.name().to_owned();
        let messages = consumer
            .take_while(move |delivery| {
                if let Err(error) = delivery {
                    tracing::warn!(consumer = %name, %error, "the subscription ended");
                }
                std::future::ready(delivery.is_ok() && publishing.status().connected())
            })
            .map(move |delivery| {
                delivery.map(|delivery| Delivered::new(delivery, Arc::clone(&shared)))
            });
        let messages = Box::pin(messages);
        let stop = shutdown.child_token();
        let ran = self
            .flow
            .run(messages, usize::from(self.prefetch), stop)
            .await;
        // Bounded: a broker that stopped answering must not hold shutdown.
        let _ = tokio::time::timeout(
            MAX_BACKOFF,
            session
                .consuming
                .basic_cancel(tag, BasicCancelOptions::default()),
        )
        .await;
        report.applied += ran.report.applied;
        report.duplicates += ran.report.duplicates;
        report.failed += ran.report.failed;
        report.dead_lettered += ran.report.dead_lettered;
        report.receive_errors += ran.report.receive_errors;
        Ok(ran.stream_ended)
    }
}

/// Configures an [`InboxConsumer`]; [`build`](ConsumerBuilder::build)
/// checks the settings.
pub struct ConsumerBuilder<I: Inbox, H> {
    inbox: I,
    url: String,
    queue: String,
    handler: H,
    name: Option<String>,
    prefetch: u16,
    retry: RetryPolicy,
    max_deliveries: u32,
    handler_timeout: Duration,
    dead_letter: Option<DeadLetter>,
}

impl<I: Inbox, H> fmt::Debug for ConsumerBuilder<I, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("queue", &self.queue)
            .field("name", &self.name)
            .field("prefetch", &self.prefetch)
            .finish_non_exhaustive()
    }
}

impl<I, H> ConsumerBuilder<I, H>
where
    I: Inbox + 'static,
    H: ConsumeHandler<I::Conn> + 'static,
{
    /// The name the inbox records under (at most 64 bytes); by default the
    /// queue's name. Two consumers that must each apply every message need
    /// different names.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How many messages are in hand at once (default 16): the channel's
    /// `basic.qos` prefetch, and how many are applied at once, each in its
    /// own transaction on its own pooled connection: keep it within the
    /// pool.
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// The delay before a failed message comes again, by delivery count
    /// (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Deliveries tried before a message that keeps failing is given up
    /// (default 5). A permanent failure, a database error that cannot pass
    /// by retrying, and a message that does not decode or whose id the
    /// inbox cannot store are given up at once.
    pub fn max_deliveries(mut self, max: u32) -> Self {
        self.max_deliveries = max;
        self
    }

    /// How long one message's transaction may take (default 30 s); past it
    /// the transaction is abandoned (rolled back) and the message handed
    /// back.
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.handler_timeout = timeout;
        self
    }

    /// Copies given-up messages to `exchange` with `routing_key`, with
    /// [`DEAD_CONSUMER`], [`DEAD_REASON`], [`DEAD_QUEUE`] and
    /// [`DEAD_DELIVERED`] added, before acknowledging them; a copy no queue
    /// takes fails, and the message is handed back instead of lost.
    pub fn dead_letter(
        mut self,
        exchange: impl Into<String>,
        routing_key: impl Into<String>,
    ) -> Self {
        self.dead_letter = Some(DeadLetter {
            exchange: exchange.into(),
            routing_key: routing_key.into(),
        });
        self
    }

    /// Checks the settings: a usable name and queue, a prefetch and
    /// `max_deliveries` of at least 1, a non-zero handler timeout.
    pub fn build(self) -> Result<InboxConsumer<I, H>, RabbitError> {
        let config = |field: &'static str, reason: String| RabbitError::Config { field, reason };
        if self.queue.is_empty() || ShortString::try_new(self.retry_queue_name()).is_err() {
            return Err(config(
                "queue",
                "must be 1 to 249 bytes (its retry queue adds `.retry`)".into(),
            ));
        }
        if self.prefetch == 0 {
            return Err(config("prefetch", "must be at least 1".into()));
        }
        if self.url.parse::<lapin::uri::AMQPUri>().is_err() {
            return Err(config("url", "not an amqp:// URL".into()));
        }
        if let Some(dead_letter) = &self.dead_letter
            && (ShortString::try_new(dead_letter.exchange.as_str()).is_err()
                || ShortString::try_new(dead_letter.routing_key.as_str()).is_err())
        {
            return Err(config(
                "dead_letter",
                "the exchange and routing key are at most 255 bytes".into(),
            ));
        }
        let mut settings = ConsumerSettings::new(self.name.unwrap_or_else(|| self.queue.clone()));
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
            url: self.url,
            queue: self.queue,
            prefetch: self.prefetch,
            dead_letter: self.dead_letter,
        })
    }

    fn retry_queue_name(&self) -> String {
        format!("{}.retry", self.queue)
    }
}
