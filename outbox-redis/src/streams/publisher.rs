//! [`StreamPublisher`]: a batch handler that adds each delivery to a Redis
//! stream once inside a dedup window, or with a plain `XADD` without one.

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
/// and a [`Handler`]: a relay's batch goes to Redis as one script call per
/// stream, in one round trip. A call
/// Redis refused (the stream's key holds another type) fails each of its
/// tasks for good; one whose reply never came (Redis gone, a timeout)
/// fails its tasks retryably: none is counted as sent, and the dedup
/// window absorbs the retry of those added after all.
///
/// Where every consumer applies each message id once anyway (a
/// [`StreamConsumer`](crate::StreamConsumer) does, through its inbox),
/// [`without_dedup_window`](StreamPublisherBuilder::without_dedup_window)
/// drops the window: each delivery is a plain `XADD`, in one pipeline for
/// the batch, and a replay adds a second entry.
#[derive(Clone)]
pub struct StreamPublisher {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Connection,
    routes: HashMap<HandlerKey, String>,
    /// The dedup window; none for plain `XADD`s.
    window: Option<Duration>,
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
            window: Some(DEFAULT_DEDUP_WINDOW),
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

    /// Adds `delivery`'s entry once, or recognises its replay (without a
    /// dedup window: adds it, each time).
    ///
    /// Retryable: Redis unreachable, no reply in time, a busy or loading
    /// server. Permanent: a kind with no route, a header with a reserved
    /// name, the message id remembered for another task, a command Redis
    /// refuses for good (the stream's key holds another type).
    pub async fn publish(&self, delivery: &Delivery) -> Result<Added, HandlerError> {
        self.publish_all(std::slice::from_ref(delivery))
            .await
            .pop()
            .unwrap_or_else(|| Err(HandlerError::retryable(anyhow::anyhow!("no answer"))))
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

    /// `delivery`'s add, checked: its stream and message id.
    fn prepare<'a>(&'a self, delivery: &'a Delivery) -> Result<Prepared<'a>, HandlerError> {
        let stream = self.route(delivery)?;
        fields::check(delivery)?;
        Ok(Prepared {
            stream,
            message_id: self.message_id(delivery),
            delivery,
        })
    }

    /// The script's `EVALSHA` for `batch`, adds to one stream remembering
    /// each message id for `window`: every message's keys, then its
    /// identity and its entry's fields, written straight into the command.
    fn command(&self, batch: &[&Prepared<'_>], window: Duration) -> redis::Cmd {
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let mut command = redis::cmd("EVALSHA");
        command
            .arg(self.inner.script.get_hash())
            .arg(2 * batch.len());
        for prepared in batch {
            command
                .arg(dedup_key(prepared.stream, &prepared.message_id))
                .arg(prepared.stream);
        }
        command.arg(window_ms).arg(self.inner.max_len.unwrap_or(0));
        for prepared in batch {
            let delivery = prepared.delivery;
            command
                .arg(format!(
                    "{} {} {}",
                    delivery.outbox.as_str(),
                    delivery.id,
                    delivery.task.kind
                ))
                .arg(fields::count(delivery));
            fields::write(&mut command, delivery, &prepared.message_id);
        }
        command
    }

    /// Publishes every delivery: one script call per stream, all of them in
    /// one pipeline on the multiplexed connection (one round trip), each
    /// delivery answered by its own part of its call's reply; without a
    /// dedup window, one plain `XADD` each, in one pipeline
    /// ([`add_each`](Self::add_each)).
    async fn publish_all(&self, deliveries: &[Delivery]) -> Vec<Result<Added, HandlerError>> {
        let prepared: Vec<_> = deliveries.iter().map(|d| self.prepare(d)).collect();
        let Some(window) = self.inner.window else {
            return self.add_each(prepared).await;
        };
        // The adds to send, grouped by stream in the order streams first
        // appear: one script call each.
        let mut streams: Vec<(&str, Vec<usize>)> = Vec::new();
        for (n, prepared) in prepared.iter().enumerate() {
            if let Ok(prepared) = prepared {
                match streams
                    .iter_mut()
                    .find(|(stream, _)| *stream == prepared.stream)
                {
                    Some((_, members)) => members.push(n),
                    None => streams.push((prepared.stream, vec![n])),
                }
            }
        }
        // Nothing to send (no delivery prepared: an unrouted kind, a
        // reserved header): each fails for good, whether Redis is up or
        // not.
        if streams.is_empty() {
            return unsent(prepared, "not sent");
        }
        let batches: Vec<Vec<&Prepared<'_>>> = streams
            .iter()
            .map(|(_, members)| {
                members
                    .iter()
                    .filter_map(|n| prepared[*n].as_ref().ok())
                    .collect()
            })
            .collect();
        let replies = match self.inner.connection.for_publishing().await {
            Ok(mut connection) => self.send(&mut connection, &batches, window).await,
            // Not connected: each delivery that failed to prepare keeps
            // its own failure, and the rest fail as the connection did.
            Err(error) => return unsent(prepared, &error.to_string()),
        };
        let mut answers: Vec<Option<Result<Added, HandlerError>>> =
            prepared.iter().map(|_| None).collect();
        for ((stream, members), reply) in streams.iter().zip(replies) {
            let parts = reply
                .map_err(|error| publish_failed(&format!("adding to stream `{stream}`"), &error))
                .and_then(|reply| match reply {
                    Value::Array(parts) if parts.len() == members.len() => Ok(parts),
                    other => Err(HandlerError::retryable(anyhow::anyhow!(
                        "adding to stream `{stream}`: unexpected reply {other:?}"
                    ))),
                });
            match parts {
                Ok(parts) => {
                    for (n, part) in members.iter().zip(parts) {
                        if let Some(Ok(prepared)) = prepared.get(*n) {
                            answers[*n] = Some(prepared.answer(&part));
                        }
                    }
                }
                Err(error) => {
                    let text = error.to_string();
                    let permanent = error.is_permanent();
                    for n in members {
                        answers[*n] = Some(Err(if permanent {
                            HandlerError::permanent(anyhow::anyhow!("{text}"))
                        } else {
                            HandlerError::retryable(anyhow::anyhow!("{text}"))
                        }));
                    }
                }
            }
        }
        prepared
            .into_iter()
            .zip(answers)
            .map(|(prepared, answer)| {
                prepared?;
                answer.unwrap_or_else(|| Err(HandlerError::retryable(anyhow::anyhow!("no reply"))))
            })
            .collect()
    }

    /// Sends one script call per batch in one pipeline and returns each
    /// call's reply. A call that found the script gone (a restarted Redis
    /// answers `NOSCRIPT`) is written again and sent once the script is
    /// loaded: the first send takes the calls, and a lost script is rare.
    async fn send(
        &self,
        connection: &mut redis::aio::ConnectionManager,
        batches: &[Vec<&Prepared<'_>>],
        window: Duration,
    ) -> Vec<redis::RedisResult<Value>> {
        let calls = batches
            .iter()
            .map(|batch| self.command(batch, window))
            .collect();
        let mut replies = pipelined(connection, calls).await;
        let lost: Vec<usize> = replies
            .iter()
            .enumerate()
            .filter(|(_, reply)| matches!(reply, Err(error) if error.code() == Some("NOSCRIPT")))
            .map(|(n, _)| n)
            .collect();
        if lost.is_empty() {
            return replies;
        }
        if let Err(error) = self.inner.script.load_async(connection).await {
            for n in lost {
                replies[n] = Err(error.clone());
            }
            return replies;
        }
        let calls = lost
            .iter()
            .map(|n| self.command(&batches[*n], window))
            .collect();
        let again = pipelined(connection, calls).await;
        for (n, reply) in lost.into_iter().zip(again) {
            replies[n] = reply;
        }
        replies
    }

    /// Adds every prepared delivery with a plain `XADD`, all of them in one
    /// pipeline (one round trip), each answered by its own reply: what a
    /// publisher without a dedup window does.
    async fn add_each(
        &self,
        prepared: Vec<Result<Prepared<'_>, HandlerError>>,
    ) -> Vec<Result<Added, HandlerError>> {
        let adds: Vec<redis::Cmd> = prepared
            .iter()
            .filter_map(|prepared| prepared.as_ref().ok())
            .map(|prepared| self.add(prepared))
            .collect();
        // Nothing to send (no delivery prepared: an unrouted kind, a
        // reserved header): each fails for good, whether Redis is up or
        // not.
        if adds.is_empty() {
            return unsent(prepared, "not sent");
        }
        let mut replies = match self.inner.connection.for_publishing().await {
            Ok(mut connection) => pipelined(&mut connection, adds).await.into_iter(),
            // Not connected: each delivery that failed to prepare keeps
            // its own failure, and the rest fail as the connection did.
            Err(error) => return unsent(prepared, &error.to_string()),
        };
        prepared
            .into_iter()
            .map(|prepared| {
                let prepared = prepared?;
                let stream = prepared.stream;
                let what = || format!("adding to stream `{stream}`");
                let reply = replies
                    .next()
                    .ok_or_else(|| {
                        HandlerError::retryable(anyhow::anyhow!("{}: no reply", what()))
                    })?
                    .map_err(|error| publish_failed(&what(), &error))?;
                let entry_id = fields::bytes(&reply)
                    .and_then(|id| String::from_utf8(id).ok())
                    .ok_or_else(|| {
                        HandlerError::retryable(anyhow::anyhow!(
                            "{}: unexpected reply {reply:?}",
                            what()
                        ))
                    })?;
                Ok(Added {
                    stream: stream.to_owned(),
                    entry_id,
                    replay: false,
                })
            })
            .collect()
    }

    /// The plain `XADD` of `prepared`, trimming as `max_len` says.
    fn add(&self, prepared: &Prepared<'_>) -> redis::Cmd {
        let mut add = redis::cmd("XADD");
        add.arg(prepared.stream);
        if let Some(entries) = self.inner.max_len {
            add.arg("MAXLEN").arg("~").arg(entries);
        }
        add.arg("*");
        fields::write(&mut add, prepared.delivery, &prepared.message_id);
        add
    }
}

/// The answers of deliveries none of which was sent: each one's own
/// failure to prepare, or else a retryable failure saying `why`.
fn unsent(
    prepared: Vec<Result<Prepared<'_>, HandlerError>>,
    why: &str,
) -> Vec<Result<Added, HandlerError>> {
    prepared
        .into_iter()
        .map(|p| p.and(Err(HandlerError::retryable(anyhow::anyhow!("{why}")))))
        .collect()
}

/// `commands` sent in one pipeline, each reply its own (a failure of the
/// whole pipeline, a lost connection, answers each with it).
async fn pipelined(
    connection: &mut redis::aio::ConnectionManager,
    commands: Vec<redis::Cmd>,
) -> Vec<redis::RedisResult<Value>> {
    let count = commands.len();
    let mut pipe = redis::pipe();
    for command in commands {
        pipe.add_command(command);
    }
    match pipe
        .ignore_errors()
        .query_async::<Vec<redis::RedisResult<Value>>>(connection)
        .await
    {
        Ok(replies) if replies.len() == count => replies,
        Ok(replies) => (0..count)
            .map(|_| {
                Err(redis::RedisError::from((
                    redis::ErrorKind::Parse,
                    "a pipeline reply of the wrong length",
                    format!("{} replies to {count} commands", replies.len()),
                )))
            })
            .collect(),
        Err(error) => (0..count).map(|_| Err(error.clone())).collect(),
    }
}

/// One delivery's add, checked and ready to write into its stream's call.
struct Prepared<'a> {
    stream: &'a str,
    message_id: String,
    delivery: &'a Delivery,
}

impl Prepared<'_> {
    /// What this add's part of its call's reply means for its task.
    fn answer(&self, part: &Value) -> Result<Added, HandlerError> {
        let stream = self.stream;
        let (added, entry_id, same) = answer(part).ok_or_else(|| {
            HandlerError::retryable(anyhow::anyhow!(
                "adding to stream `{stream}`: unexpected reply {part:?}"
            ))
        })?;
        let message_id = &self.message_id;
        if !added && !same {
            return Err(HandlerError::permanent(anyhow::anyhow!(
                "message id `{message_id}` is taken in stream `{stream}` (entry {entry_id}) by \
                 another task: nothing was added for this one. Two publishers share message ids; \
                 give each its own message_id_prefix, or none (the outbox's own id)"
            )));
        }
        if !added {
            tracing::debug!(task_id = self.delivery.id.get(), %stream, %entry_id, "Redis already held this task's entry: a replay");
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

/// Sends the batch's adds as one script call per stream, in one pipeline
/// on the multiplexed connection: the batch costs about one round trip and
/// one script run (without a dedup window, one plain `XADD` per delivery,
/// in one pipeline). Each delivery's answer is its own reply, checked as
/// [`publish`](StreamPublisher::publish) checks it.
#[async_trait]
impl BatchHandler for StreamPublisher {
    async fn handle_batch(&self, deliveries: Vec<Delivery>) -> Vec<Result<(), HandlerError>> {
        self.publish_all(&deliveries)
            .await
            .into_iter()
            .map(|added| added.map(|_| ()))
            .collect()
    }
}

/// Configures a [`StreamPublisher`]; [`build`](Self::build) checks every
/// setting, so a bad one fails at start-up, never at send time.
#[derive(Debug)]
pub struct StreamPublisherBuilder {
    url: String,
    routes: Vec<(HandlerKey, String)>,
    window: Option<Duration>,
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
        self.window = Some(window);
        self
    }

    /// Keeps no dedup window: each delivery is a plain `XADD` (all of a
    /// batch's in one pipeline), and no message id is remembered. It and
    /// [`dedup_window`](Self::dedup_window) undo each other: the last one
    /// called holds.
    ///
    /// A replay (a relay that crashed between the add and its completion
    /// write, a retry whose reply was lost) then adds a second entry with
    /// the same `message_id`. Two publishers that share message ids (the
    /// same explicit `message_id_prefix`) are no longer caught: both
    /// entries are added, and a consumer's inbox drops the second as a
    /// duplicate without applying it, so leave the prefix unset unless
    /// every publisher has its own. Choose it where every consumer applies
    /// each message id once, as a [`StreamConsumer`](crate::StreamConsumer)
    /// does through its inbox: Redis then spends less of its processor
    /// time per message and holds no key per message for a window
    /// (docs/redis.md has the figures).
    pub fn without_dedup_window(mut self) -> Self {
        self.window = None;
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
        if self
            .window
            .is_some_and(|window| window < Duration::from_secs(1) || window > MAX_DEDUP_WINDOW)
        {
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
