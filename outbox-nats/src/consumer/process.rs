//! One delivery, start to end: decode, transaction (inbox record, handler),
//! commit, then acknowledge, hand back or give up.

use std::{panic::AssertUnwindSafe, sync::Arc};

use async_nats::jetstream::{self, AckKind};
use diesel_outbox_core::{Error, HandlerError, Inbox, Receipt};
use futures_util::FutureExt;
use tracing::Instrument;

use super::{
    ConsumeHandler, Incoming, Outcome, Shared,
    dead_letter::Copy,
    metrics::{counted, lag},
};
use crate::decode;

/// Why a transaction did not commit.
#[derive(Debug)]
enum Failure {
    /// The handler failed.
    Handler(HandlerError),
    /// The database failed (record, begin, commit).
    Store(Error),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Self::Store(error)
    }
}

/// Handles one delivery and says how it ended.
pub(crate) async fn one<I, H>(shared: &Arc<Shared<I, H>>, message: jetstream::Message) -> Outcome
where
    I: Inbox,
    H: ConsumeHandler<I::Conn>,
{
    let (stream_sequence, delivered) = match message.info() {
        Ok(info) => {
            lag(&shared.name, info.pending);
            (info.stream_sequence, info.delivered)
        }
        Err(_) => (0, 1),
    };
    let span = tracing::info_span!(
        "outbox.consume",
        consumer = %shared.name,
        subject = %message.subject,
        stream_sequence,
        delivered,
        message_id = tracing::field::Empty,
    );
    async {
        let message_id = message
            .headers
            .as_ref()
            .and_then(|headers| headers.get(async_nats::header::NATS_MESSAGE_ID))
            .map(|value| value.as_str().to_owned());
        let decoded = decode(&message)
            .map_err(|e| e.to_string())
            .and_then(|received| match &message_id {
                Some(id) => Ok((id.clone(), received)),
                None => Err("header `Nats-Msg-Id` is missing".to_owned()),
            });
        let (message_id, received) = match decoded {
            Ok(decoded) => decoded,
            Err(reason) => {
                let copy = copy(
                    shared,
                    &reason,
                    message_id.as_deref(),
                    stream_sequence,
                    delivered,
                );
                return give_up(shared, &message, copy).await;
            }
        };
        tracing::Span::current().record("message_id", message_id.as_str());
        let incoming = Incoming {
            message_id,
            subject: message.subject.to_string(),
            stream_sequence,
            delivered,
            message: received,
        };
        let result = apply(shared, incoming.clone()).await;
        match result {
            Ok(Receipt::New) => acknowledge(shared, &message, Outcome::Applied).await,
            Ok(Receipt::Duplicate) => acknowledge(shared, &message, Outcome::Duplicate).await,
            Err(Failure::Handler(error))
                if error.is_permanent() || delivered >= shared.max_deliveries =>
            {
                let reason = format!("{error}");
                let copy = copy(
                    shared,
                    &reason,
                    Some(&incoming.message_id),
                    stream_sequence,
                    delivered,
                );
                give_up(shared, &message, copy).await
            }
            Err(Failure::Handler(error)) => {
                tracing::warn!(%error, "handler failed; the message comes back later");
                hand_back(shared, &message, delivered).await
            }
            Err(Failure::Store(error)) => {
                tracing::warn!(%error, "database failed; the message comes back later");
                hand_back(shared, &message, delivered).await
            }
        }
    }
    .instrument(span)
    .await
}

/// The inbox record and the handler in one transaction, within the
/// handler timeout; a panic or a timeout is a retryable failure, and the
/// abandoned transaction rolls back (its connection is not reused).
async fn apply<I, H>(shared: &Arc<Shared<I, H>>, incoming: Incoming) -> Result<Receipt, Failure>
where
    I: Inbox,
    H: ConsumeHandler<I::Conn>,
{
    let body_shared = Arc::clone(shared);
    let transaction = shared.inbox.transaction(move |conn: &mut I::Conn| {
        Box::pin(async move {
            let shared = body_shared;
            let receipt = shared
                .inbox
                .record(conn, &shared.name, &incoming.message_id)
                .await?;
            if receipt == Receipt::New {
                shared
                    .handler
                    .handle(conn, &incoming)
                    .await
                    .map_err(Failure::Handler)?;
            }
            Ok(receipt)
        })
    });
    let guarded = AssertUnwindSafe(tokio::time::timeout(shared.handler_timeout, transaction));
    match guarded.catch_unwind().await {
        Ok(Ok(result)) => result,
        Ok(Err(_elapsed)) => Err(Failure::Handler(HandlerError::retryable(anyhow::anyhow!(
            "the transaction did not finish within {:?}",
            shared.handler_timeout
        )))),
        Err(_panic) => Err(Failure::Handler(HandlerError::retryable(anyhow::anyhow!(
            "the handler panicked"
        )))),
    }
}

fn copy<'a, I, H>(
    shared: &'a Shared<I, H>,
    reason: &'a str,
    message_id: Option<&'a str>,
    stream_sequence: u64,
    delivered: i64,
) -> Copy<'a> {
    Copy {
        consumer: &shared.name,
        reason,
        message_id,
        stream_sequence,
        delivered,
    }
}

/// Acknowledges after the commit. A lost acknowledgement costs a
/// redelivery, which the inbox answers as a duplicate.
async fn acknowledge<I, H>(
    shared: &Shared<I, H>,
    message: &jetstream::Message,
    outcome: Outcome,
) -> Outcome {
    if let Err(error) = message.ack().await {
        tracing::warn!(%error, "acknowledgement failed; the redelivery will be a duplicate");
    }
    counted(
        if outcome == Outcome::Applied {
            "outbox_consumer_applied_total"
        } else {
            "outbox_consumer_duplicates_total"
        },
        &shared.name,
    );
    outcome
}

/// Hands the message back for a redelivery after the retry policy's delay.
async fn hand_back<I, H>(
    shared: &Shared<I, H>,
    message: &jetstream::Message,
    delivered: i64,
) -> Outcome {
    let delay = shared.retry.delay(delivered);
    if let Err(error) = message.ack_with(AckKind::Nak(Some(delay))).await {
        tracing::warn!(%error, "-NAK failed; the message comes back after ack_wait");
    }
    counted("outbox_consumer_failed_total", &shared.name);
    Outcome::Failed
}

/// Copies the message to the dead-letter subject, if any, then terminates
/// it. When the copy cannot be published the message is handed back, so
/// that it is not lost.
async fn give_up<I, H>(
    shared: &Shared<I, H>,
    message: &jetstream::Message,
    copy: Copy<'_>,
) -> Outcome {
    let (reason, delivered) = (copy.reason.to_owned(), copy.delivered);
    if let Some(dead_letter) = &shared.dead_letter
        && let Err(error) = dead_letter.publish(&message.message, copy).await
    {
        tracing::warn!(%error, "dead-lettering failed; the message comes back later");
        return hand_back(shared, message, delivered).await;
    }
    tracing::error!(%reason, "message given up");
    if let Err(error) = message.ack_with(AckKind::Term).await {
        tracing::warn!(%error, "+TERM failed; the message comes back and is given up again");
    }
    counted("outbox_consumer_dead_lettered_total", &shared.name);
    Outcome::DeadLettered
}
