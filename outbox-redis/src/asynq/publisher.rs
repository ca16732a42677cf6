//! [`AsynqPublisher`]: a batch handler that enqueues each delivery as an
//! Asynq task.

use std::{
    collections::HashMap,
    fmt,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use async_trait::async_trait;
use diesel_outbox_core::{
    BatchHandler, Delivery, Handler, HandlerError, HandlerKey, RegistryBuilder, wire,
};
use prost::Message as _;
use redis::{Script, Value};

use super::{TaskMessage, envelope, layout};
use crate::{
    RedisError,
    connection::{Connection, publish_failed},
    fields,
};

/// Asynq's own default for a task's retries.
pub const DEFAULT_RETRY: i32 = 25;
/// Asynq's own default for how long one run of a task may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// What a task's Asynq payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Payload {
    /// The [`Envelope`](super::Envelope): JSON with the message id, kind,
    /// version, task id, outbox, ordering key and headers around the
    /// task's payload (which must be JSON).
    #[default]
    Envelope,
    /// The task's payload bytes as they are.
    Raw,
}

/// Enqueues each delivery into an Asynq queue, in the layout an Asynq
/// server dequeues from, and succeeds only on Redis's reply.
///
/// Each task is a hash `asynq:{<queue>}:t:<id>` with `msg` (the
/// protobuf-encoded [`TaskMessage`]), `state` `pending` and
/// `pending_since` (Unix nanoseconds); its id is pushed onto
/// `asynq:{<queue>}:pending` and the queue added to `asynq:queues`. The
/// Asynq task id is the outbox's message id (`<outbox id>:<task id>`), and
/// the enqueue refuses an id whose task still exists, as Asynq's own does:
/// a replay (a relay that crashed after the enqueue and before its
/// completion write) adds nothing while Asynq still holds the task. Once
/// Asynq has run the task and deleted it (no retention), a replay enqueues
/// it again: only the worker's own idempotence covers that.
///
/// The task type is the kind unless [`task_type`](AsynqPublisherBuilder::task_type)
/// maps it; `retry` is the task's `max_attempts - 1` or [`DEFAULT_RETRY`];
/// `timeout` is [`DEFAULT_TIMEOUT`] unless set; `deadline` is the task's
/// `expires_at`; `retention` is none unless set. The task's headers travel
/// in Asynq's `headers`, with
/// `Outbox-Kind`, `Outbox-Version`, `Outbox-Task-Id`, `Outbox-Attempt` and
/// `Outbox-Source` added.
#[derive(Clone)]
pub struct AsynqPublisher {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Connection,
    queue: String,
    types: HashMap<HandlerKey, String>,
    payload: Payload,
    timeout: Duration,
    retention: Duration,
    message_id_prefix: Option<String>,
    script: Script,
}

impl fmt::Debug for AsynqPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsynqPublisher")
            .field("queue", &self.inner.queue)
            .field("types", &self.inner.types)
            .field("payload", &self.inner.payload)
            .finish_non_exhaustive()
    }
}

impl AsynqPublisher {
    /// Starts configuring a publisher into the Asynq queue `queue` on the
    /// Redis at `url`.
    pub fn builder(url: impl Into<String>, queue: impl Into<String>) -> AsynqPublisherBuilder {
        AsynqPublisherBuilder {
            url: url.into(),
            queue: queue.into(),
            types: Vec::new(),
            payload: Payload::default(),
            timeout: DEFAULT_TIMEOUT,
            retention: Duration::ZERO,
            message_id_prefix: None,
        }
    }

    /// The queue tasks go to.
    pub fn queue(&self) -> &str {
        &self.inner.queue
    }

    /// The Asynq task id of a delivery: its [message id](Delivery::message_id),
    /// or `<prefix>:<task id>` with an explicit `message_id_prefix`.
    pub fn message_id(&self, delivery: &Delivery) -> String {
        delivery.message_id_with(self.inner.message_id_prefix.as_deref())
    }

    /// Registers this publisher as the batch handler of every
    /// `(kind, version)` it has a task type for.
    pub fn register(&self, registry: RegistryBuilder) -> RegistryBuilder {
        registry.batch_handler_for(self.inner.types.keys(), self)
    }

    /// The [`TaskMessage`] `delivery` is enqueued as.
    pub fn task_message(&self, delivery: &Delivery) -> Result<TaskMessage, HandlerError> {
        let key = delivery.key();
        let task_type = self.inner.types.get(&key).ok_or_else(|| {
            HandlerError::permanent(anyhow::anyhow!("no Asynq task type is set for {key}"))
        })?;
        let id = self.message_id(delivery);
        let payload = match self.inner.payload {
            Payload::Envelope => envelope::build(delivery, &id)?,
            Payload::Raw => delivery.payload().to_vec(),
        };
        let mut headers: HashMap<String, String> =
            HashMap::with_capacity(delivery.headers().len() + 5);
        for (name, value) in delivery.headers() {
            if fields::is_reserved(name) {
                return Err(HandlerError::permanent(anyhow::anyhow!(
                    "task header `{name}` uses a name reserved for the outbox"
                )));
            }
            headers.insert(name.clone(), value.clone());
        }
        headers.insert(wire::TASK_ID.into(), delivery.id.get().to_string());
        headers.insert(wire::KIND.into(), delivery.task.kind.clone());
        headers.insert(wire::VERSION.into(), delivery.task.version.to_string());
        headers.insert(wire::ATTEMPT.into(), delivery.attempt.to_string());
        headers.insert(wire::SOURCE.into(), delivery.outbox.as_str().to_owned());
        let retry = delivery
            .task
            .max_attempts
            .map_or(DEFAULT_RETRY, |attempts| attempts.saturating_sub(1).max(0));
        Ok(TaskMessage {
            r#type: task_type.clone(),
            payload,
            id,
            queue: self.inner.queue.clone(),
            retry,
            timeout: i64::try_from(self.inner.timeout.as_secs()).unwrap_or(i64::MAX),
            deadline: delivery.task.expires_at.map_or(0, |at| at.timestamp()),
            retention: i64::try_from(self.inner.retention.as_secs()).unwrap_or(i64::MAX),
            headers,
            ..TaskMessage::default()
        })
    }

    /// Enqueues `delivery` as an Asynq task, or recognises its replay.
    ///
    /// Retryable: Redis unreachable, no reply in time. Permanent: a kind
    /// with no task type, a reserved header, a payload that is not JSON in
    /// envelope mode, the task id held by another task.
    pub async fn publish(&self, delivery: &Delivery) -> Result<(), HandlerError> {
        let message = self.task_message(delivery)?;
        let connection = self.inner.connection.for_publishing().await?;
        let (listed, enqueued) = tokio::join!(
            self.list_queue(connection.clone()),
            self.enqueue(connection, message)
        );
        listed.and(enqueued)
    }

    /// Adds the queue to `asynq:queues`, which Asynq's server and tools list
    /// (once per publish or batch, beside its enqueues).
    async fn list_queue(
        &self,
        mut connection: redis::aio::ConnectionManager,
    ) -> Result<(), HandlerError> {
        let queue = &self.inner.queue;
        redis::cmd("SADD")
            .arg(layout::ALL_QUEUES)
            .arg(queue)
            .query_async::<i64>(&mut connection)
            .await
            .map(|_| ())
            .map_err(|error| publish_failed(&format!("listing Asynq queue `{queue}`"), &error))
    }

    async fn enqueue(
        &self,
        mut connection: redis::aio::ConnectionManager,
        message: TaskMessage,
    ) -> Result<(), HandlerError> {
        let queue = &self.inner.queue;
        let encoded = message.encode_to_vec();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
            });
        let mut invocation = self.inner.script.key(layout::task_key(queue, &message.id));
        invocation
            .key(layout::pending_key(queue))
            .arg(&encoded)
            .arg(&message.id)
            .arg(now);
        let lost = |error: redis::RedisError| {
            publish_failed(&format!("enqueueing into Asynq queue `{queue}`"), &error)
        };
        // The script is sent by hash and loaded again when Redis lost it
        // (a restart).
        let reply: Value = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(lost)?;
        match reply {
            Value::Int(1) => Ok(()),
            stored => self.own_replay(&message, &stored),
        }
    }

    /// Whether the task Asynq holds under this id is this one's (same
    /// type, payload, outbox and task id); another is a permanent failure
    /// naming the collision.
    fn own_replay(&self, message: &TaskMessage, stored: &Value) -> Result<(), HandlerError> {
        let held =
            fields::bytes(stored).and_then(|bytes| TaskMessage::decode(bytes.as_slice()).ok());
        let same =
            |held: &TaskMessage, name: &str| held.headers.get(name) == message.headers.get(name);
        if let Some(held) = held
            && held.r#type == message.r#type
            && held.payload == message.payload
            && same(&held, wire::SOURCE)
            && same(&held, wire::TASK_ID)
        {
            tracing::debug!(task = %message.id, queue = %self.inner.queue, "Asynq already held this task: a replay");
            return Ok(());
        }
        Err(HandlerError::permanent(anyhow::anyhow!(
            "Asynq task id `{}` is taken in queue `{}` by another task: nothing was enqueued for \
             this one. Two publishers share message ids; give each its own message_id_prefix, or \
             none (the outbox's own id)",
            message.id,
            self.inner.queue
        )))
    }
}

#[async_trait]
impl Handler for AsynqPublisher {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        self.publish(&delivery).await
    }
}

/// Sends every delivery's enqueue on the one multiplexed connection, then
/// awaits the replies together: the batch costs about one round trip.
#[async_trait]
impl BatchHandler for AsynqPublisher {
    async fn handle_batch(&self, deliveries: Vec<Delivery>) -> Vec<Result<(), HandlerError>> {
        let messages: Vec<_> = deliveries.iter().map(|d| self.task_message(d)).collect();
        if messages.iter().all(Result::is_err) {
            return messages.into_iter().map(|m| m.map(|_| ())).collect();
        }
        let connection = match self.inner.connection.for_publishing().await {
            Ok(connection) => connection,
            // Each delivery keeps its own permanent failure.
            Err(error) => {
                let error = error.to_string();
                return messages
                    .into_iter()
                    .map(|message| {
                        message
                            .and_then(|_| Err(HandlerError::retryable(anyhow::anyhow!("{error}"))))
                    })
                    .collect();
            }
        };
        let enqueues = futures_util::future::join_all(messages.into_iter().map(|message| {
            let connection = connection.clone();
            async move { self.enqueue(connection, message?).await }
        }));
        let (listed, enqueued) = tokio::join!(self.list_queue(connection), enqueues);
        match listed {
            Ok(()) => enqueued,
            // A task whose queue is not listed is not counted as sent.
            Err(error) => {
                let error = error.to_string();
                enqueued
                    .into_iter()
                    .map(|answer| {
                        answer
                            .and_then(|()| Err(HandlerError::retryable(anyhow::anyhow!("{error}"))))
                    })
                    .collect()
            }
        }
    }
}

/// Configures an [`AsynqPublisher`]; [`build`](Self::build) checks every
/// setting.
#[derive(Debug)]
pub struct AsynqPublisherBuilder {
    url: String,
    queue: String,
    types: Vec<(HandlerKey, String)>,
    payload: Payload,
    timeout: Duration,
    retention: Duration,
    message_id_prefix: Option<String>,
}

impl AsynqPublisherBuilder {
    /// Enqueues `(kind, version)` with the kind as its Asynq task type.
    pub fn kind(self, kind: impl Into<String>, version: i32) -> Self {
        let kind = kind.into();
        self.task_type(kind.clone(), version, kind)
    }

    /// Enqueues `(kind, version)` as Asynq task type `task_type` (the name
    /// the Go side registers its handler under).
    pub fn task_type(
        mut self,
        kind: impl Into<String>,
        version: i32,
        task_type: impl Into<String>,
    ) -> Self {
        self.types
            .push((HandlerKey::new(kind, version), task_type.into()));
        self
    }

    /// What the Asynq payload is ([`Payload::Envelope`] unless set).
    pub fn payload(mut self, payload: Payload) -> Self {
        self.payload = payload;
        self
    }

    /// How long one run may take on the Asynq server ([`DEFAULT_TIMEOUT`]
    /// unless set); at least one second.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long Asynq keeps a task after it succeeded (Asynq's
    /// `retention`, none unless set, whole seconds): while it is kept, a
    /// replay of its enqueue adds nothing.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Makes task ids `<prefix>:<task id>` instead of the task's
    /// [message id](Delivery::message_id) (`<outbox id>:<task id>`, the
    /// default, unique to each outbox by construction).
    pub fn message_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.message_id_prefix = Some(prefix.into());
        self
    }

    /// Checks every setting and builds the publisher (it connects on first
    /// use).
    pub fn build(self) -> Result<AsynqPublisher, RedisError> {
        let config = |field: &'static str, reason: String| RedisError::Config { field, reason };
        if let Some(prefix) = &self.message_id_prefix {
            wire::check_message_id_prefix(prefix)
                .map_err(|reason| config("message_id_prefix", reason))?;
        }
        if self.queue.is_empty() || self.queue.contains(['{', '}']) {
            return Err(config(
                "queue",
                "must be non-empty, without `{` or `}`".into(),
            ));
        }
        if self.timeout < Duration::from_secs(1) {
            return Err(config("timeout", "must be at least one second".into()));
        }
        if self.types.is_empty() {
            return Err(config(
                "task_type",
                "set a task type for at least one (kind, version)".into(),
            ));
        }
        let mut types = HashMap::new();
        for (key, task_type) in self.types {
            if task_type.is_empty() {
                return Err(config(
                    "task_type",
                    format!("{key}: the task type is empty"),
                ));
            }
            if types.insert(key.clone(), task_type).is_some() {
                return Err(config("task_type", format!("{key} has two task types")));
            }
        }
        Ok(AsynqPublisher {
            inner: Arc::new(Inner {
                connection: Connection::new(&self.url)?,
                queue: self.queue,
                types,
                payload: self.payload,
                timeout: self.timeout,
                retention: self.retention,
                message_id_prefix: self.message_id_prefix,
                script: Script::new(include_str!("enqueue.lua")),
            }),
        })
    }
}
