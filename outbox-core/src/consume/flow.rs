//! [`ConsumeFlow`]: one delivery, start to end, for any broker.

use std::{panic::AssertUnwindSafe, sync::Arc, time::Duration};

use async_trait::async_trait;
use futures_util::FutureExt;

use super::{
    ConsumeHandler, Incoming,
    metrics::{counted, describe_consumer_metrics},
};
use crate::{
    BoxError, Error, HandlerError, Inbox, Receipt, RetryPolicy,
    inbox::{MAX_CONSUMER_BYTES, check_key},
};

/// A broker's three answers to one delivery, which [`ConsumeFlow::process`]
/// chooses between. A delivery gets one answer, except that a `give_up`
/// that failed is followed by a `nak` (the message is never lost).
#[async_trait]
pub trait Acknowledge: Send + Sync {
    /// The message is done: the broker forgets it (JetStream `+ACK`,
    /// RabbitMQ `basic.ack`, Redis `XACK`).
    async fn ack(&self) -> Result<(), BoxError>;
    /// Hands the message back, to come again after `delay` (or as soon as
    /// the broker redelivers, where it cannot wait).
    async fn nak(&self, delay: Duration) -> Result<(), BoxError>;
    /// Gives the message up for good: copies it, with `reason`, to the
    /// consumer's dead-letter destination if it has one, then ends its
    /// deliveries. `Err` when the copy could not be made: the flow then
    /// hands the message back, so that it is never lost.
    async fn give_up(&self, reason: &str, message_id: Option<&str>) -> Result<(), BoxError>;
}

/// A message that could not be decoded into an [`Incoming`]: why, and its
/// message id when it had one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// Why it could not be decoded.
    pub reason: String,
    /// Its message id, if the broker's metadata had one.
    pub message_id: Option<String>,
}

/// How one delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The transaction committed, then the message was acknowledged.
    Applied,
    /// The inbox had applied it already: acknowledged without the handler.
    Duplicate,
    /// It failed and was handed back for a later delivery.
    Failed,
    /// It was given up: dead-lettered (when configured) and terminated.
    DeadLettered,
}

/// What a run of a consumer did, counted per delivery.
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
    /// Failures to receive messages from the broker, each followed by a
    /// pause before the next try.
    pub receive_errors: u64,
}

impl ConsumerReport {
    /// Counts one delivery's outcome.
    pub fn add(&mut self, outcome: Outcome) {
        let slot = match outcome {
            Outcome::Applied => &mut self.applied,
            Outcome::Duplicate => &mut self.duplicates,
            Outcome::Failed => &mut self.failed,
            Outcome::DeadLettered => &mut self.dead_lettered,
        };
        *slot += 1;
    }
}

/// The settings a [`ConsumeFlow`] decides by; each broker's consumer
/// builder fills them in and [`ConsumeFlow::new`] checks them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConsumerSettings {
    /// The name the inbox records messages under (at most 64 bytes): two
    /// consumers that must each apply every message need different names.
    pub name: String,
    /// The delay before a failed message comes again, by delivery count.
    pub retry: RetryPolicy,
    /// Deliveries tried before a message that keeps failing is given up.
    pub max_deliveries: u32,
    /// How long one message's transaction may take; past it the
    /// transaction is abandoned (rolled back, its connection closed) and
    /// the delivery counts as a retryable failure.
    pub handler_timeout: Duration,
}

impl ConsumerSettings {
    /// Settings for the consumer `name`: the default retry policy, 5
    /// deliveries, a 30 s handler timeout.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            retry: RetryPolicy::default(),
            max_deliveries: 5,
            handler_timeout: Duration::from_secs(30),
        }
    }

    /// Checks the settings, naming the field at fault: a name the inbox can
    /// store, `max_deliveries` of at least 1, a non-zero handler timeout.
    pub fn validate(&self) -> crate::Result<()> {
        let config = |field: &'static str, reason: String| Error::Config { field, reason };
        check_key(&self.name, "-").map_err(|error| {
            config(
                "name",
                format!("{error} (a consumer name is 1 to {MAX_CONSUMER_BYTES} bytes)"),
            )
        })?;
        if self.max_deliveries == 0 {
            return Err(config("max_deliveries", "must be at least 1".into()));
        }
        if self.handler_timeout.is_zero() {
            return Err(config("handler_timeout", "must not be zero".into()));
        }
        Ok(())
    }
}

/// Why a transaction did not commit.
#[derive(Debug)]
enum Failure {
    /// The handler failed (a timeout and a panic count as retryable
    /// handler failures).
    Handler(HandlerError),
    /// The database failed (record, begin, commit).
    Store(Error),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Self::Store(error)
    }
}

/// One consumer's inbox, handler and settings, shared by its deliveries.
#[derive(Debug)]
pub struct ConsumeFlow<I, H> {
    inbox: I,
    handler: H,
    settings: ConsumerSettings,
}

impl<I: Inbox, H: ConsumeHandler<I::Conn>> ConsumeFlow<I, H> {
    /// A flow recording in `inbox` and applying with `handler`, after
    /// checking `settings` ([`ConsumerSettings::validate`]). Describes the
    /// consumer metrics to the installed recorder.
    pub fn new(inbox: I, handler: H, settings: ConsumerSettings) -> crate::Result<Self> {
        settings.validate()?;
        describe_consumer_metrics();
        Ok(Self {
            inbox,
            handler,
            settings,
        })
    }

    /// The settings.
    pub fn settings(&self) -> &ConsumerSettings {
        &self.settings
    }

    /// The name the inbox records messages under.
    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// Handles one delivery, delivered `delivered` times (this one
    /// included), and answers it through `ack` as the [module](super)
    /// documentation says; returns how it ended.
    pub async fn process<A: Acknowledge>(
        self: &Arc<Self>,
        ack: &A,
        delivered: i64,
        decoded: Result<Incoming, Undecodable>,
    ) -> Outcome {
        let incoming = match decoded {
            Ok(incoming) => incoming,
            Err(undecodable) => {
                return self
                    .give_up(
                        ack,
                        &undecodable.reason,
                        undecodable.message_id.as_deref(),
                        delivered,
                    )
                    .await;
            }
        };
        // Checked before any transaction: an id the inbox cannot store
        // fails the same way on every delivery.
        if let Err(error) = check_key(&self.settings.name, &incoming.message_id) {
            let reason = format!("the message id cannot be recorded: {error}");
            return self
                .give_up(ack, &reason, Some(&incoming.message_id), delivered)
                .await;
        }
        let message_id = incoming.message_id.clone();
        let exhausted = delivered >= i64::from(self.settings.max_deliveries);
        match self.apply(incoming).await {
            Ok(Receipt::New) => self.acknowledge(ack, Outcome::Applied).await,
            Ok(Receipt::Duplicate) => self.acknowledge(ack, Outcome::Duplicate).await,
            Err(Failure::Handler(error)) if error.is_permanent() || exhausted => {
                let reason = give_up_reason(&error.to_string(), delivered, exhausted);
                self.give_up(ack, &reason, Some(&message_id), delivered)
                    .await
            }
            Err(Failure::Store(error)) if !error.is_retryable() || exhausted => {
                let reason = give_up_reason(&error.chain(), delivered, exhausted);
                self.give_up(ack, &reason, Some(&message_id), delivered)
                    .await
            }
            Err(Failure::Handler(error)) => {
                tracing::warn!(consumer = %self.settings.name, %message_id, %error, "handler failed; the message comes back later");
                self.hand_back(ack, delivered).await
            }
            Err(Failure::Store(error)) => {
                tracing::warn!(consumer = %self.settings.name, %message_id, error = %error.chain(), "database failed; the message comes back later");
                self.hand_back(ack, delivered).await
            }
        }
    }

    /// The inbox record and the handler in one transaction, within the
    /// handler timeout; a panic or a timeout is a retryable failure, and the
    /// abandoned transaction rolls back (its connection is closed, not
    /// reused).
    async fn apply(self: &Arc<Self>, incoming: Incoming) -> Result<Receipt, Failure> {
        let flow = Arc::clone(self);
        let transaction = self.inbox.transaction(move |conn: &mut I::Conn| {
            Box::pin(async move {
                let receipt = flow
                    .inbox
                    .record(conn, &flow.settings.name, &incoming.message_id)
                    .await?;
                if receipt == Receipt::New {
                    flow.handler
                        .handle(conn, &incoming)
                        .await
                        .map_err(Failure::Handler)?;
                }
                Ok(receipt)
            })
        });
        let timeout = self.settings.handler_timeout;
        let guarded = AssertUnwindSafe(tokio::time::timeout(timeout, transaction));
        match guarded.catch_unwind().await {
            Ok(Ok(result)) => result,
            Ok(Err(_elapsed)) => Err(Failure::Handler(HandlerError::retryable(anyhow::anyhow!(
                "the transaction did not finish within {timeout:?}"
            )))),
            Err(_panic) => Err(Failure::Handler(HandlerError::retryable(anyhow::anyhow!(
                "the handler panicked"
            )))),
        }
    }

    /// Acknowledges after the commit. A lost acknowledgement costs a
    /// redelivery, which the inbox answers as a duplicate.
    async fn acknowledge<A: Acknowledge>(&self, ack: &A, outcome: Outcome) -> Outcome {
        if let Err(error) = ack.ack().await {
            tracing::warn!(consumer = %self.settings.name, %error, "acknowledgement failed; the redelivery will be a duplicate");
        }
        counted(
            if outcome == Outcome::Applied {
                "outbox_consumer_applied_total"
            } else {
                "outbox_consumer_duplicates_total"
            },
            &self.settings.name,
        );
        outcome
    }

    /// Hands the message back for a redelivery after the retry policy's delay.
    async fn hand_back<A: Acknowledge>(&self, ack: &A, delivered: i64) -> Outcome {
        let delay = self.settings.retry.delay(delivered);
        if let Err(error) = ack.nak(delay).await {
            tracing::warn!(consumer = %self.settings.name, %error, "handing the message back failed; the broker redelivers it after its own timeout");
        }
        counted("outbox_consumer_failed_total", &self.settings.name);
        Outcome::Failed
    }

    /// Gives the message up; when its dead-letter copy cannot be made it is
    /// handed back instead, so that it is not lost.
    async fn give_up<A: Acknowledge>(
        &self,
        ack: &A,
        reason: &str,
        message_id: Option<&str>,
        delivered: i64,
    ) -> Outcome {
        if let Err(error) = ack.give_up(reason, message_id).await {
            tracing::warn!(consumer = %self.settings.name, %error, "dead-lettering failed; the message comes back later");
            return self.hand_back(ack, delivered).await;
        }
        tracing::error!(consumer = %self.settings.name, message_id = message_id.unwrap_or("-"), %reason, "message given up");
        counted("outbox_consumer_dead_lettered_total", &self.settings.name);
        Outcome::DeadLettered
    }
}

/// The reason a message is given up with: the failure, and when it was the
/// last delivery allowed, how many were tried.
fn give_up_reason(failure: &str, delivered: i64, exhausted: bool) -> String {
    if exhausted {
        format!("gave up after {delivered} deliveries: {failure}")
    } else {
        failure.to_owned()
    }
}
