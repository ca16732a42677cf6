//! [`Connector`]: the publisher's connection and its confirming channels,
//! opened on first use and again after the broker went away, with a backoff
//! between failed tries.
//!
//! Each publish (one delivery, or a batch) takes a channel of its own and
//! gives it back when its confirms are in: the broker's returns and confirms
//! of one channel then belong to that publish alone, and a channel the
//! broker closes (an exchange that does not exist) fails only the publish
//! that used it.

use std::time::Duration;

use diesel_outbox_core::HandlerError;
use lapin::{Channel, Connection, ConnectionProperties, options::ConfirmSelectOptions};
use tokio::{sync::Mutex, time::Instant};

/// The pause after the first failed connection; each failure in a row
/// doubles it, up to [`MAX_BACKOFF`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest pause between two tries to connect.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long opening a connection and a channel may take: a broker host that
/// does not answer fails the try, which starts the backoff, well within a
/// handler timeout.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection and idle channels in confirm mode, opened when needed.
pub(crate) struct Connector {
    url: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    connection: Option<Connection>,
    /// Channels given back, open and in confirm mode.
    idle: Vec<Channel>,
    /// Failed tries in a row.
    failures: u32,
    /// No new try before this, after a failure.
    retry_at: Option<Instant>,
}

impl Connector {
    pub(crate) fn new(url: String) -> Self {
        Self {
            url,
            state: Mutex::default(),
        }
    }

    /// A confirming channel for one publish: an idle one, or a new one (on
    /// the open connection, or a new connection). While a failed try's
    /// backoff runs, fails at once, retryably: the tasks wait for their
    /// next attempt rather than for the broker. Give it back with
    /// [`give_back`](Self::give_back).
    pub(crate) async fn take(&self) -> Result<Channel, HandlerError> {
        let mut state = self.state.lock().await;
        while let Some(channel) = state.idle.pop() {
            if channel.status().connected() {
                return Ok(channel);
            }
        }
        if let Some(at) = state.retry_at
            && Instant::now() < at
        {
            return Err(HandlerError::retryable(anyhow::anyhow!(
                "RabbitMQ is unreachable; the next try to connect is in {:?}",
                at - Instant::now()
            )));
        }
        let opened = match tokio::time::timeout(CONNECT_TIMEOUT, self.open(&mut state)).await {
            Ok(opened) => opened.map_err(|error| error.to_string()),
            Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
        };
        match opened {
            Ok(channel) => {
                state.failures = 0;
                state.retry_at = None;
                Ok(channel)
            }
            Err(error) => {
                state.connection = None;
                state.failures = state.failures.saturating_add(1);
                let pause = backoff(state.failures);
                state.retry_at = Some(Instant::now() + pause);
                tracing::warn!(%error, ?pause, "could not open a RabbitMQ channel");
                Err(HandlerError::retryable(anyhow::anyhow!(
                    "could not reach RabbitMQ (next try in {pause:?}): {error}"
                )))
            }
        }
    }

    /// Gives back a channel a publish took, once every confirm of that
    /// publish is in; a closed one is dropped.
    pub(crate) async fn give_back(&self, channel: Channel) {
        if channel.status().connected() {
            self.state.lock().await.idle.push(channel);
        }
    }

    /// A confirming channel on the open connection, or on a new one.
    async fn open(&self, state: &mut State) -> Result<Channel, lapin::Error> {
        let connection = match state.connection.take() {
            Some(connection) if connection.status().connected() => connection,
            _ => Connection::connect(&self.url, ConnectionProperties::default()).await?,
        };
        let channel = connection.create_channel().await;
        state.connection = Some(connection);
        let channel = channel?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(channel)
    }
}

/// The pause after `failures` failed tries in a row.
pub(crate) fn backoff(failures: u32) -> Duration {
    let doubled = FIRST_BACKOFF.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)));
    doubled.min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_bound() {
        assert_eq!(backoff(1), FIRST_BACKOFF);
        assert_eq!(backoff(2), FIRST_BACKOFF * 2);
        assert_eq!(backoff(4), FIRST_BACKOFF * 8);
        assert_eq!(backoff(40), MAX_BACKOFF);
    }
}
