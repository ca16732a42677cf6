//! One multiplexed connection to Redis, opened on first use and reopened
//! by the client when it is lost.

use std::time::Duration;

use diesel_outbox_core::HandlerError;
use redis::{
    Client,
    aio::{ConnectionManager, ConnectionManagerConfig},
};
use tokio::sync::OnceCell;

use crate::RedisError;

/// How long one try to connect may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a command may wait for its reply before it counts as lost.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A lazily opened [`ConnectionManager`]: commands from many tasks share
/// it, pipelined on one socket.
pub(crate) struct Connection {
    client: Client,
    manager: OnceCell<ConnectionManager>,
    response_timeout: Duration,
}

impl Connection {
    /// A connection to the server at `url` (`redis://host:port/db`),
    /// checked for form only; it opens on first use.
    pub(crate) fn new(url: &str) -> Result<Self, RedisError> {
        let client = Client::open(url).map_err(|error| RedisError::Config {
            field: "url",
            reason: format!("not a redis:// URL: {error}"),
        })?;
        Ok(Self {
            client,
            manager: OnceCell::new(),
            response_timeout: RESPONSE_TIMEOUT,
        })
    }

    /// The same, with commands allowed `timeout` for their reply (a
    /// blocking read needs longer than it blocks).
    pub(crate) fn with_response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The shared connection, opened now if it never was.
    pub(crate) async fn get(&self) -> Result<ConnectionManager, redis::RedisError> {
        self.manager
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(self.response_timeout))
                    .set_number_of_retries(2)
                    .set_min_delay(Duration::from_millis(100))
                    .set_max_delay(Duration::from_secs(2));
                ConnectionManager::new_with_config(self.client.clone(), config).await
            })
            .await
            .cloned()
    }

    /// The shared connection, or a retryable failure naming Redis.
    pub(crate) async fn for_publishing(&self) -> Result<ConnectionManager, HandlerError> {
        self.get().await.map_err(|error| {
            HandlerError::retryable(anyhow::anyhow!("could not reach Redis: {error}"))
        })
    }
}

/// Whether a failed command may pass when tried again: the connection
/// failed or timed out (the reply never came), or Redis is busy, loading,
/// out of memory or failing over. A command Redis refused for good (a key
/// of the wrong type, a script error) cannot.
pub(crate) fn may_pass(error: &redis::RedisError) -> bool {
    if matches!(
        error.code(),
        Some("OOM" | "BUSY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "READONLY")
    ) {
        return true;
    }
    !matches!(error.retry_method(), redis::RetryMethod::NoRetry)
}

/// `error` of a publish described by `what`, as the task's failure:
/// retryable when it [may pass](may_pass), else permanent.
pub(crate) fn publish_failed(what: &str, error: &redis::RedisError) -> HandlerError {
    if may_pass(error) {
        HandlerError::retryable(anyhow::anyhow!("{what} got no answer from Redis: {error}"))
    } else {
        HandlerError::permanent(anyhow::anyhow!("{what}: Redis refused it: {error}"))
    }
}
