//! Creating or checking the stream a publisher needs: [`StreamSpec`].

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::{JetStreamPublisher, NatsError, subject};

/// JetStream's default duplicate window.
pub const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// The stream a publisher writes to: its name, the subjects it must capture,
/// how long it remembers message ids to drop replays, and on how many
/// servers of a cluster it keeps each message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// Stream name.
    pub name: String,
    /// Subjects (filters) the stream must capture.
    pub subjects: Vec<String>,
    /// How long JetStream drops a replayed `Nats-Msg-Id`.
    pub duplicate_window: Duration,
    /// Servers holding a copy of each message (1 on a single server; 3 on a
    /// three-node cluster, so one node can be lost without losing a write
    /// or the stream's quorum).
    pub replicas: usize,
}

impl StreamSpec {
    /// A stream named `name` capturing `subjects`, with the default
    /// two-minute duplicate window, on one server.
    pub fn new(
        name: impl Into<String>,
        subjects: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            subjects: subjects.into_iter().map(Into::into).collect(),
            duplicate_window: DEFAULT_DUPLICATE_WINDOW,
            replicas: 1,
        }
    }

    /// A stream capturing exactly the subjects `publisher` routes to.
    pub fn for_publisher(name: impl Into<String>, publisher: &JetStreamPublisher) -> Self {
        let mut subjects: Vec<String> = publisher.routes().values().cloned().collect();
        subjects.sort();
        subjects.dedup();
        Self::new(name, subjects)
    }

    /// Remember message ids for `window` (widen it to cover the relay's
    /// retries; see the crate docs).
    pub fn duplicate_window(mut self, window: Duration) -> Self {
        self.duplicate_window = window;
        self
    }

    /// Keep each message on `replicas` servers of the cluster (at most 5,
    /// JetStream's limit). A publish is acknowledged once a majority of
    /// them stored it.
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// Creates the stream if it does not exist; if it does, checks that it
    /// captures every subject of this spec, keeps duplicates at least as
    /// long and has at least as many replicas. An existing stream is never
    /// changed.
    pub async fn ensure(&self, jetstream: &jetstream::Context) -> Result<stream::Info, NatsError> {
        if !(1..=5).contains(&self.replicas) {
            return Err(NatsError::Config {
                field: "replicas",
                reason: format!("{} is not within 1..=5", self.replicas),
            });
        }
        let config = stream::Config {
            name: self.name.clone(),
            subjects: self.subjects.clone(),
            duplicate_window: self.duplicate_window,
            num_replicas: self.replicas,
            ..Default::default()
        };
        let mut stream = jetstream
            .get_or_create_stream(config)
            .await
            .map_err(|e| NatsError::JetStream(Box::new(e)))?;
        let info = stream
            .info()
            .await
            .map_err(|e| NatsError::JetStream(Box::new(e)))?
            .clone();
        for wanted in &self.subjects {
            if !info
                .config
                .subjects
                .iter()
                .any(|have| subject::matches(have, wanted))
            {
                return Err(NatsError::StreamMismatch {
                    stream: self.name.clone(),
                    reason: format!(
                        "it does not capture `{wanted}` (it has {:?})",
                        info.config.subjects
                    ),
                });
            }
        }
        if info.config.duplicate_window < self.duplicate_window {
            return Err(NatsError::DuplicateWindow {
                stream: self.name.clone(),
                actual: info.config.duplicate_window,
                required: self.duplicate_window,
            });
        }
        if info.config.num_replicas < self.replicas {
            return Err(NatsError::StreamMismatch {
                stream: self.name.clone(),
                reason: format!(
                    "it keeps {} replicas, fewer than the {} required",
                    info.config.num_replicas, self.replicas
                ),
            });
        }
        Ok(info)
    }
}
