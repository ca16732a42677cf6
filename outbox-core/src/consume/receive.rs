//! A consumer's loop, for any broker: [`ConsumeFlow::run`] takes a
//! broker's stream of [`Received`] messages and runs each through the flow,
//! so many at once, until shutdown.

use std::{fmt::Display, sync::Arc, time::Duration};

use futures_util::{Stream, StreamExt};
use tokio::{sync::Semaphore, task::JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::{
    Acknowledge, ConsumeFlow, ConsumeHandler, ConsumerReport, Incoming, Outcome, Undecodable,
    metrics::counted,
};
use crate::Inbox;

/// The first pause after a failure to receive messages; each failure in a
/// row doubles it, up to [`MAX_RECEIVE_PAUSE`].
pub const FIRST_RECEIVE_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two tries to receive messages.
pub const MAX_RECEIVE_PAUSE: Duration = Duration::from_secs(5);

/// One message as a broker's adapter hands it to [`ConsumeFlow::run`]: what
/// the broker says of it, the message decoded, and its three answers
/// ([`Acknowledge`]).
pub trait Received: Acknowledge + Send + Sync + 'static {
    /// How many times the broker delivered it, this one included.
    fn delivered(&self) -> i64;
    /// The message as the flow takes it: decoded, or why not.
    fn decode(&self) -> Result<Incoming, Undecodable>;
    /// The span its processing runs in (its consumer, where it came from).
    fn span(&self, consumer: &str) -> Span;
}

/// How a [`ConsumeFlow::run`] ended: what it did, and whether the broker's
/// stream of messages ended (rather than shutdown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ran {
    /// The deliveries, counted by outcome.
    pub report: ConsumerReport,
    /// Whether the stream ended before shutdown was asked for.
    pub stream_ended: bool,
}

impl<I, H> ConsumeFlow<I, H>
where
    I: Inbox + 'static,
    H: ConsumeHandler<I::Conn> + 'static,
{
    /// Runs each message of `messages` through the flow, at most
    /// `concurrency` at once, until `shutdown` is cancelled or the stream
    /// ends; then stops taking messages and waits for those in hand, each
    /// committed and acknowledged, or handed back. A message the stream
    /// delivered but the loop never took stays unacknowledged and comes
    /// back from the broker.
    ///
    /// A failure to receive (an `Err` item: the broker went away, the
    /// consumer was deleted) is logged, counted in
    /// `outbox_consumer_receive_errors_total` and the report, and followed
    /// by a pause that doubles with each failure in a row
    /// ([`FIRST_RECEIVE_PAUSE`] up to [`MAX_RECEIVE_PAUSE`]), never a tight
    /// loop.
    pub async fn run<S, R, E>(
        self: &Arc<Self>,
        mut messages: S,
        concurrency: usize,
        shutdown: CancellationToken,
    ) -> Ran
    where
        S: Stream<Item = Result<R, E>> + Unpin,
        R: Received,
        E: Display,
    {
        let permits = Arc::new(Semaphore::new(concurrency.clamp(1, Semaphore::MAX_PERMITS)));
        let mut running = JoinSet::new();
        let mut report = ConsumerReport::default();
        let mut pause = FIRST_RECEIVE_PAUSE;
        let stream_ended = loop {
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
                    report.receive_errors += 1;
                    counted("outbox_consumer_receive_errors_total", self.name());
                    tracing::warn!(consumer = %self.name(), %error, pause = ?pause, "receiving messages failed; trying again after a pause");
                    tokio::select! {
                        () = shutdown.cancelled() => break false,
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(MAX_RECEIVE_PAUSE);
                }
                Some(Ok(received)) => {
                    pause = FIRST_RECEIVE_PAUSE;
                    let flow = Arc::clone(self);
                    running.spawn(async move {
                        let span = received.span(flow.name());
                        let decoded = received.decode();
                        let outcome = flow
                            .process(&received, received.delivered(), decoded)
                            .instrument(span)
                            .await;
                        drop(permit);
                        outcome
                    });
                }
            }
        };
        drop(messages);
        while let Some(done) = running.join_next().await {
            report.add(done.unwrap_or(Outcome::Failed));
        }
        Ran {
            report,
            stream_ended,
        }
    }
}
