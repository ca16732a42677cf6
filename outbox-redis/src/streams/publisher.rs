//! [`StreamPublisher`]: a batch handler that adds each delivery to a Redis
//! stream once inside a dedup window.

use std::{collections::HashMap, fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use diesel_outbox_core::{
    BatchHandler, Delivery, Handler, HandlerError, HandlerKey, RegistryBuilder, wire,
};
use redis::{Script, Value};

use crate::{
    RedisError,
    connection::{Connection, publish_failed},
    fields,
};

/// How long a message id is remembered when nothing else is set: longer
/// than a relay's lease and its first retries, so a relay that crashed
/// after adding an entry and before its completion write adds nothing the
/// second time.
pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(600);

/// The longest dedup window a publisher takes: 30 days.
pub const MAX_DEDUP_WINDOW: Duration = Duration::from_secs(30 * 86_400);

/// The key a message id is remembered under for `stream`:
/// `outbox:dedup:{<stream>}:<message id>` (the braces keep it in the
/// stream's hash slot; stream names with braces are refused).
pub fn dedup_key(stream: &str, message_id: &str) -> String {
    format!("outbox:dedup:{{{stream}}}:{message_id}")
}

/// What Redis did with one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Added {
    /// The stream the entry is in.
    pub stream: String,
    /// The entry's id (the first entry's, for a replay).
    pub entry_id: String,
    /// Whether the message id was remembered and nothing was added.
    pub replay: bool,
}

/// Adds each delivery to the stream its kind and version are routed to,
/// once inside the dedup window, and succeeds only on Redis's reply.
///
/// Redis has no duplicate window of its own, so the publisher keeps one:
/// one script remembers the message id (`<outbox id>:<task id>`, unique to
/// the task across every outbox) under [`dedup_key`] for the window and
/// adds the entry, atomically. A replay inside the window (a relay that
/// crashed between the add and its completion write, a retry whose reply
/// was lost) adds nothing and succeeds as the task's own replay; an id
/// remembered for another task (two publishers sharing an explicit
/// `message_id_prefix`) fails the task for good, naming the collision.
///
/// Each entry's fields are `message_id`, `Outbox-Task-Id`, `Outbox-Kind`,
/// `Outbox-Version`, `Outbox-Attempt`, `Outbox-Source`, the task's headers
/// (trace context among them) under their own names, and `payload`, last.
///
/// It is a [`BatchHandler`] (what [`register`](Self::register) makes it)
/// and a [`Handler`]: a relay's batch is sent on one multiplexed
/// connection without waiting between commands, so it costs about one
/// round trip. A command whose reply never came (Redis gone, a timeout)
/// fails its task retryably: it is never counted as sent, and the dedup
/// window absorbs the retry if the entry was added after all.
#[derive(Clone)]
pub struct StreamPublisher {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Connection,
    routes: HashMap<HandlerKey, String>,
    window: Duration,
    max_len: Option<u64>,
    message_id_prefix: Option<String>,
    script: Script,
}

impl fmt::Debug for StreamPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPublisher")
            .field("routes", &self.inner.routes)
            .field("window", &self.inner.window)
            .field("max_len", &self.inner.max_len)
            .finish_non_exhaustive()
    }
}

impl StreamPublisher {
    /// Starts configuring a publisher to the Redis at `url`
    /// (`redis://host:port/db`).
    pub fn builder(url: impl Into<String>) -> StreamPublisherBuilder {
        StreamPublisherBuilder {
            url: url.into(),
            routes: Vec::new(),
            window: DEFAULT_DEDUP_WINDOW,
            max_len: None,
            message_id_prefix: None,
        }
    }

    /// The stream each `(kind, version)` is added to.
    pub fn routes(&self) -> &HashMap<HandlerKey, String> {
        &self.inner.routes
    }

    /// The message id of a delivery: its [message id](Delivery::message_id),
    /// or `<prefix>:<task id>` with an explicit `message_id_prefix`.
    pub fn message_id(&self, delivery: &Delivery) -> String {
        delivery.message_id_with(self.inner.message_id_prefix.as_deref())
    }

    /// Registers this publisher as the batch handler of every routed
    /// `(kind, version)`.
    pub fn register(&self, registry: RegistryBuilder) -> RegistryBuilder {
        registry.batch_handler_for(self.inner.routes.keys(), self)
    }

    /// Adds `delivery`'s entry once, or recognises its replay.
    ///
    /// Retryable: Redis unreachable, no reply in time, a refused command.
    /// Permanent: a kind with no route, a header with a reserved name, the
    /// message id remembered for another task.
    pub async fn publish(&self, delivery: &Delivery) -> Result<Added, HandlerError> {
        let stream = self.route(delivery)?;
        let connection = self.inner.connection.for_publishing().await?;
        self.add(connection, stream, delivery).await
    }

    /// The stream `delivery`'s kind and version are routed to.
    fn route(&self, delivery: &Delivery) -> Result<&str, HandlerError> {
        let key = delivery.key();
        self.inner
            .routes
            .get(&key)
            .map(String::as_str)
            .ok_or_else(|| {
                HandlerError::permanent(anyhow::anyhow!("no stream is routed for {key}"))
            })
    }

    /// Runs the add-once script for `delivery` on `connection`.
    async fn add(
        &self,
        mut connection: redis::aio::ConnectionManager,
        stream: &str,
        delivery: &Delivery,
    ) -> Result<Added, HandlerError> {
        let message_id = self.message_id(delivery);
        let entry = fields::build(delivery, &message_id)?;
        let identity = format!(
            "{} {} {}",
            delivery.outbox.as_str(),
            delivery.id,
            delivery.task.kind
        );
        let window_ms = u64::try_from(self.inner.window.as_millis()).unwrap_or(u64::MAX);
        let mut invocation = self.inner.script.key(dedup_key(stream, &message_id));
        invocation
            .key(stream)
            .arg(window_ms)
            .arg(self.inner.max_len.unwrap_or(0))
            .arg(&identity)
            .arg(entry);
        let reply: Value = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(|error| publish_failed(&format!("adding to stream `{stream}`"), &error))?;
        let (added, entry_id, same) = answer(&reply).ok_or_else(|| {
            HandlerError::retryable(anyhow::anyhow!(
                "adding to stream `{stream}`: unexpected reply {reply:?}"
            ))
        })?;
        if !added && !same {
            return Err(HandlerError::permanent(anyhow::anyhow!(
                "message id `{message_id}` is taken in stream `{stream}` (entry {entry_id}) by \
                 another task: nothing was added for this one. Two publishers share message ids; \
                 give each its own message_id_prefix, or none (the outbox's own id)"
            )));
        }
        if !added {
            tracing::debug!(task_id = delivery.id.get(), %stream, %entry_id, "Redis already held this task's entry: a replay");
        }
        Ok(Added {
            stream: stream.to_owned(),
            entry_id,
            replay: !added,
        })
    }
}

/// The script's reply: `{added, entry id, same task}`.
fn answer(reply: &Value) -> Option<(bool, String, bool)> {
    let Value::Array(items) = reply else {
        return None;
    };
    let flag = |value: &Value| match value {
        Value::Int(n) => Some(*n == 1),
        _ => None,
    };
    match items.as_slice() {
        [added, entry, same] => Some((
            flag(added)?,
            String::from_utf8(fields::bytes(entry)?).ok()?,
            flag(same)?,
        )),
        _ => None,
    }
}

#[async_trait]
impl Handler for StreamPublisher {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        self.publish(&delivery).await.map(|_| ())
    }
}

/// Sends every delivery's script on the one multiplexed connection, then
/// awaits the replies together: the batch costs about one round trip.
/// Each delivery's answer is its own reply, checked as
/// [`publish`](StreamPublisher::publish) checks it.
#[async_trait]
impl BatchHandler for StreamPublisher {
    async fn handle_batch(&self, deliveries: Vec<Delivery>) -> Vec<Result<(), HandlerError>> {
        let routes: Vec<_> = deliveries.iter().map(|d| self.route(d)).collect();
        if routes.iter().all(Result::is_err) {
            return routes.into_iter().map(|route| route.map(|_| ())).collect();
        }
        let connection = match self.inner.connection.for_publishing().await {
            Ok(connection) => connection,
            // Each delivery keeps its own permanent failure (no route).
            Err(error) => {
                let error = error.to_string();
                return routes
                    .into_iter()
                    .map(|route| {
                        route.and_then(|_| Err(HandlerError::retryable(anyhow::anyhow!("{error}"))))
                    })
                    .collect();
            }
        };
        futures_util::future::join_all(deliveries.iter().zip(routes).map(|(delivery, route)| {
            let connection = connection.clone();
            async move {
                let stream = route?;
                self.add(connection, stream, delivery).await.map(|_| ())
            }
        }))
        .await
    }
}

/// Configures a [`StreamPublisher`]; [`build`](Self::build) checks every
/// setting, so a bad one fails at start-up, never at send time.
#[derive(Debug)]
pub struct StreamPublisherBuilder {
    url: String,
    routes: Vec<(HandlerKey, String)>,
    window: Duration,
    max_len: Option<u64>,
    message_id_prefix: Option<String>,
}

impl StreamPublisherBuilder {
    /// Adds `(kind, version)` to `stream`.
    pub fn route(
        mut self,
        kind: impl Into<String>,
        version: i32,
        stream: impl Into<String>,
    ) -> Self {
        self.routes
            .push((HandlerKey::new(kind, version), stream.into()));
        self
    }

    /// How long a message id is remembered ([`DEFAULT_DEDUP_WINDOW`]
    /// unless set): a replay after the window adds a second entry, so make
    /// it longer than the longest a task can wait between an add and its
    /// completion write (the relay's lease, plus the retries of a Redis
    /// outage). At least one second, at most [`MAX_DEDUP_WINDOW`].
    pub fn dedup_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Trims each stream to about `entries` as it adds (`MAXLEN ~`); none
    /// unless set.
    pub fn max_len(mut self, entries: u64) -> Self {
        self.max_len = Some(entries);
        self
    }

    /// Makes message ids `<prefix>:<task id>` instead of the task's
    /// [message id](Delivery::message_id) (`<outbox id>:<task id>`, the
    /// default, unique to each outbox by construction). At most
    /// [`MAX_MESSAGE_ID_PREFIX_BYTES`](wire::MAX_MESSAGE_ID_PREFIX_BYTES)
    /// bytes, so an id fits an inbox.
    pub fn message_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.message_id_prefix = Some(prefix.into());
        self
    }

    /// Checks every setting and builds the publisher (it connects on first
    /// use).
    pub fn build(self) -> Result<StreamPublisher, RedisError> {
        let config = |field: &'static str, reason: String| RedisError::Config { field, reason };
        if let Some(prefix) = &self.message_id_prefix {
            wire::check_message_id_prefix(prefix)
                .map_err(|reason| config("message_id_prefix", reason))?;
        }
        if self.window < Duration::from_secs(1) || self.window > MAX_DEDUP_WINDOW {
            return Err(config(
                "dedup_window",
                "must be at least one second and at most 30 days".into(),
            ));
        }
        if self
            .max_len
            .is_some_and(|entries| entries == 0 || i64::try_from(entries).is_err())
        {
            return Err(config(
                "max_len",
                "must keep at least one entry, and at most i64::MAX".into(),
            ));
        }
        if self.routes.is_empty() {
            return Err(config(
                "routes",
                "route at least one (kind, version)".into(),
            ));
        }
        let mut routes = HashMap::new();
        for (key, stream) in self.routes {
            if stream.is_empty() || stream.contains(['{', '}']) {
                return Err(config(
                    "routes",
                    format!("{key}: the stream name must be non-empty, without `{{` or `}}`"),
                ));
            }
            if routes.insert(key.clone(), stream).is_some() {
                return Err(config("routes", format!("{key} is routed twice")));
            }
        }
        Ok(StreamPublisher {
            inner: Arc::new(Inner {
                connection: Connection::new(&self.url)?,
                routes,
                window: self.window,
                max_len: self.max_len,
                message_id_prefix: self.message_id_prefix,
                script: Script::new(include_str!("add_once.lua")),
            }),
        })
    }
}
