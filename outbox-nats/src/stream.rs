//! Creating or checking the stream a publisher needs: [`StreamSpec`].

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::{JetStreamPublisher, NatsError, subject};

/// JetStream's default duplicate window.
pub const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// The stream a publisher writes to: its name, the subjects it must capture,
/// and how long it remembers message ids to drop replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// Stream name.
    pub name: String,
    /// Subjects (filters) the stream must capture.
    pub subjects: Vec<String>,
    /// How long JetStream drops a replayed `Nats-Msg-Id`.
    pub duplicate_window: Duration,
}

impl StreamSpec {
    /// A stream named `name` capturing `subjects`, with the default
    /// two-minute duplicate window.
    pub fn new(
        name: impl Into<String>,
        subjects: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            subjects: subjects.into_iter().map(Into::into).collect(),
            duplicate_window: DEFAULT_DUPLICATE_WINDOW,
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

    /// Creates the stream if it does not exist; if it does, checks that it
    /// captures every subject of this spec and keeps duplicates at least as
    /// long. An existing stream is never changed.
    pub async fn ensure(&self, jetstream: &jetstream::Context) -> Result<stream::Info, NatsError> {
        let config = stream::Config {
            name: self.name.clone(),
            subjects: self.subjects.clone(),
            duplicate_window: self.duplicate_window,
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
        Ok(info)
    }
}
