//! [`StreamConsumer`]: a consumer group reader that applies each entry of
//! a stream once, through an [`Inbox`].

use std::{collections::VecDeque, fmt, sync::Arc, time::Duration};

use diesel_outbox_core::{
    CancellationToken, Inbox, RetryPolicy,
    consume::{ConsumeFlow, ConsumeHandler, ConsumerReport, ConsumerSettings},
};
use redis::{Script, Value, streams::StreamPendingCountReply};
use tokio::time::Instant;

pub use super::entry::{DEAD_CONSUMER, DEAD_DELIVERED, DEAD_FIELDS_LEFT_OUT, DEAD_REASON};
use super::{
    entry::{Entry, Shared},
    reply::{self, RawEntry},
};
use crate::{RedisError, connection::Connection};

/// Applies each entry of a stream once, as a member of a consumer group,
/// in a transaction of the consumer's database that also records it in
/// the inbox.
///
/// For each entry: decode it, open a transaction, record its `message_id`
/// for this consumer ([`Inbox::record`]), run the [`ConsumeHandler`] on the
/// same transaction, commit, then `XACK`. An entry the inbox has seen is
/// acked without the handler; the ack goes only after the commit, so a
/// crash in between leaves the entry pending, and the claim that takes it
/// again is answered by the inbox. Each delivery is decided by the shared
/// [consumer flow](diesel_outbox_core::consume).
///
/// Entries pending longer than [`claim_idle`](StreamConsumerBuilder::claim_idle)
/// (their consumer died, or handed them back) are claimed (`XCLAIM`, which
/// counts a delivery) before new ones are read (`XREADGROUP`). A failed
/// entry stays pending and is claimed again after about the retry
/// policy's delay, at most `claim_idle`. An entry given up (a permanent
/// failure, one that does not decode, `max_deliveries` spent) is copied to
/// the dead-letter stream (`<stream>:dead` unless set) with
/// [`DEAD_CONSUMER`], [`DEAD_REASON`] and [`DEAD_DELIVERED`], then acked,
/// in one script that never acks without the copy. At most `concurrency`
/// entries are in hand at once. It keeps two connections: one for the
/// blocking reads, one for everything else.
///
/// ```no_run
/// use diesel_async::AsyncPgConnection;
/// use diesel_outbox_postgres::{PgStore, outbox::{CancellationToken, HandlerError}};
/// use diesel_outbox_redis::{ConsumeHandler, Incoming, StreamConsumer};
///
/// struct Ship;
///
/// #[async_trait::async_trait]
/// impl ConsumeHandler<AsyncPgConnection> for Ship {
///     async fn handle(
///         &self,
///         _conn: &mut AsyncPgConnection,
///         incoming: &Incoming,
///     ) -> Result<(), HandlerError> {
///         let _order: serde_json::Value = incoming.json()?;
///         // diesel::insert_into(shipments::table)...execute(conn).await?;
///         Ok(())
///     }
/// }
///
/// # async fn demo(store: PgStore) -> anyhow::Result<()> {
/// let consumer = StreamConsumer::builder(store, "redis://127.0.0.1:6379", "orders", "shipping", Ship)
///     .concurrency(16)
///     .build()?;
/// let report = consumer.run(CancellationToken::new()).await?;
/// println!("applied {}, duplicates {}", report.applied, report.duplicates);
/// # Ok(())
/// # }
/// ```
pub struct StreamConsumer<I: Inbox, H> {
    flow: Arc<ConsumeFlow<I, H>>,
    shared: Arc<Shared>,
    reading: Arc<Connection>,
    concurrency: usize,
    block: Duration,
}

impl<I: Inbox, H> fmt::Debug for StreamConsumer<I, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamConsumer")
            .field("stream", &self.shared.stream)
            .field("group", &self.shared.group)
            .field("consumer", &self.shared.consumer)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl<I, H> StreamConsumer<I, H>
where
    I: Inbox + 'static,
    H: ConsumeHandler<I::Conn> + 'static,
{
    /// Starts configuring a consumer that reads `stream` on the Redis at
    /// `url` as a member of `group`, records in `inbox` and applies with
    /// `handler`. The group is also the name the inbox records under,
    /// unless [`name`](StreamConsumerBuilder::name) sets another.
    pub fn builder(
        inbox: I,
        url: impl Into<String>,
        stream: impl Into<String>,
        group: impl Into<String>,
        handler: H,
    ) -> StreamConsumerBuilder<I, H> {
        StreamConsumerBuilder {
            inbox,
            url: url.into(),
            stream: stream.into(),
            group: group.into(),
            handler,
            name: None,
            consumer: None,
            dead_letter: None,
            concurrency: 16,
            claim_idle: Duration::from_secs(90),
            block: Duration::from_secs(1),
            retry: RetryPolicy::default(),
            max_deliveries: 5,
            handler_timeout: Duration::from_secs(30),
        }
    }

    /// The name the inbox records entries under.
    pub fn name(&self) -> &str {
        self.flow.name()
    }

    /// This member's name in the group.
    pub fn consumer(&self) -> &str {
        &self.shared.consumer
    }

    /// The stream given-up entries are copied to.
    pub fn dead_letter(&self) -> &str {
        &self.shared.dead_letter
    }

    /// Consumes and applies entries until `shutdown` is cancelled, then
    /// stops reading and waits for the entries in hand: each is committed
    /// and acked, or left pending. Entries read but never started stay
    /// pending and are claimed after `claim_idle`. No entry is ever acked
    /// before its transaction committed.
    ///
    /// Creates the group (from the stream's first entry, and the stream
    /// if it does not exist) when it does not exist, at start-up and
    /// whenever a read finds it gone (a Redis without persistence
    /// restarted, the stream deleted). A failure to read (Redis gone,
    /// restarted) is logged, counted as a receive error, and followed by a
    /// pause that doubles with each failure in a row; the connection
    /// reopens by itself. Fails only when the group cannot be created at
    /// start-up: a consumer that never worked is reported, not retried in
    /// silence.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<ConsumerReport, RedisError> {
        create_group(&self.shared).await?;
        let reader = Reader {
            shared: Arc::clone(&self.shared),
            reading: Arc::clone(&self.reading),
            buffer: VecDeque::new(),
            next_claim: Instant::now(),
            count: self.concurrency,
            block: self.block,
        };
        let entries = Box::pin(futures_util::stream::unfold(
            reader,
            |mut reader| async move {
                let next = reader.next().await;
                Some((next, reader))
            },
        ));
        let ran = self.flow.run(entries, self.concurrency, shutdown).await;
        Ok(ran.report)
    }
}

/// `XGROUP CREATE <stream> <group> 0 MKSTREAM`, a group that exists
/// already being fine.
async fn create_group(shared: &Shared) -> Result<(), redis::RedisError> {
    let mut connection = shared.commands.get().await?;
    let created = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&shared.stream)
        .arg(&shared.group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async::<()>(&mut connection)
        .await;
    match created {
        Err(error) if error.code() == Some("BUSYGROUP") => Ok(()),
        other => other,
    }
}

/// The reading side: claims of idle entries, then new ones, one at a time
/// to the flow.
struct Reader {
    shared: Arc<Shared>,
    reading: Arc<Connection>,
    buffer: VecDeque<Entry>,
    next_claim: Instant,
    count: usize,
    block: Duration,
}

impl Reader {
    /// The next entry, or why none could be read. A group found gone is
    /// created again before the error goes back to the flow (which pauses
    /// and reads again).
    async fn next(&mut self) -> Result<Entry, redis::RedisError> {
        loop {
            if let Some(entry) = self.buffer.pop_front() {
                return Ok(entry);
            }
            let read = self.fill().await;
            if let Err(error) = &read
                && error.code() == Some("NOGROUP")
            {
                tracing::warn!(stream = %self.shared.stream, group = %self.shared.group, "the consumer group is gone; creating it again");
                if let Err(error) = create_group(&self.shared).await {
                    tracing::warn!(%error, "could not create the consumer group again");
                }
            }
            read?;
        }
    }

    /// Claims idle entries when a claim is due, then reads new ones if
    /// none were claimed.
    async fn fill(&mut self) -> Result<(), redis::RedisError> {
        let now = Instant::now();
        if now >= self.next_claim {
            // Claim at a quarter of the idle time: an entry handed back
            // comes again about on time.
            let every = (self.shared.claim_idle / 4).max(Duration::from_millis(50));
            self.next_claim = now.checked_add(every).unwrap_or(now);
            self.claim().await?;
            if !self.buffer.is_empty() {
                return Ok(());
            }
        }
        self.read_new().await
    }

    /// Claims entries idle past `claim_idle`, with their delivery counts.
    async fn claim(&mut self) -> Result<(), redis::RedisError> {
        let shared = Arc::clone(&self.shared);
        let idle = u64::try_from(shared.claim_idle.as_millis()).unwrap_or(u64::MAX);
        let mut connection = shared.commands.get().await?;
        let pending: StreamPendingCountReply = redis::cmd("XPENDING")
            .arg(&shared.stream)
            .arg(&shared.group)
            .arg("IDLE")
            .arg(idle)
            .arg("-")
            .arg("+")
            .arg(self.count)
            .query_async(&mut connection)
            .await?;
        if pending.ids.is_empty() {
            return Ok(());
        }
        let mut claim = redis::cmd("XCLAIM");
        claim
            .arg(&shared.stream)
            .arg(&shared.group)
            .arg(&shared.consumer)
            .arg(idle);
        for id in &pending.ids {
            claim.arg(&id.id);
        }
        let claimed: Value = claim.query_async(&mut connection).await?;
        for entry in reply::entries(&claimed)? {
            // The claim counted one more delivery than XPENDING showed.
            let delivered = pending
                .ids
                .iter()
                .find(|p| p.id == entry.id)
                .map_or(1, |p| p.times_delivered.saturating_add(1));
            self.push(entry, i64::try_from(delivered).unwrap_or(i64::MAX));
        }
        Ok(())
    }

    /// Reads new entries, blocking for up to `block`.
    async fn read_new(&mut self) -> Result<(), redis::RedisError> {
        let shared = Arc::clone(&self.shared);
        let mut connection = self.reading.get().await?;
        let read: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(&shared.group)
            .arg(&shared.consumer)
            .arg("COUNT")
            .arg(self.count)
            .arg("BLOCK")
            .arg(u64::try_from(self.block.as_millis()).unwrap_or(u64::MAX))
            .arg("STREAMS")
            .arg(&shared.stream)
            .arg(">")
            .query_async(&mut connection)
            .await?;
        for entry in reply::read(&read)? {
            self.push(entry, 1);
        }
        Ok(())
    }

    fn push(&mut self, entry: RawEntry, delivered: i64) {
        self.buffer.push_back(Entry {
            shared: Arc::clone(&self.shared),
            id: entry.id,
            fields: entry.fields,
            delivered,
        });
    }
}

/// Configures a [`StreamConsumer`]; [`build`](Self::build) checks the
/// settings.
pub struct StreamConsumerBuilder<I: Inbox, H> {
    inbox: I,
    url: String,
    stream: String,
    group: String,
    handler: H,
    name: Option<String>,
    consumer: Option<String>,
    dead_letter: Option<String>,
    concurrency: usize,
    claim_idle: Duration,
    block: Duration,
    retry: RetryPolicy,
    max_deliveries: u32,
    handler_timeout: Duration,
}

impl<I: Inbox, H> fmt::Debug for StreamConsumerBuilder<I, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamConsumerBuilder")
            .field("stream", &self.stream)
            .field("group", &self.group)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<I, H> StreamConsumerBuilder<I, H>
where
    I: Inbox + 'static,
    H: ConsumeHandler<I::Conn> + 'static,
{
    /// The name the inbox records under (at most 64 bytes); by default the
    /// group's. Two groups that must each apply every entry need different
    /// names.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// This member's name in the group (default `<group>-<process
    /// id>-<random>`, unique to each process, containers' process 1
    /// among them). What a member that stopped left pending is claimed by
    /// the others after `claim_idle`.
    pub fn consumer(mut self, consumer: impl Into<String>) -> Self {
        self.consumer = Some(consumer.into());
        self
    }

    /// The stream given-up entries are copied to (default `<stream>:dead`).
    pub fn dead_letter(mut self, stream: impl Into<String>) -> Self {
        self.dead_letter = Some(stream.into());
        self
    }

    /// How many entries are in hand at once (default 16), each in its own
    /// transaction on its own pooled connection: keep it within the pool.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// How long an entry stays pending before any member may claim it
    /// (default 90 s): more than twice the handler timeout, since an entry
    /// read ahead may wait up to one handler timeout for a free slot and
    /// then run for another, so an entry in hand is never taken from a
    /// live member; at most a day. It also bounds how long a failed entry
    /// waits before it comes again.
    pub fn claim_idle(mut self, idle: Duration) -> Self {
        self.claim_idle = idle;
        self
    }

    /// The delay before a failed entry comes again, by delivery count
    /// (default: [`RetryPolicy::default`]), at most `claim_idle`.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Deliveries tried before an entry that keeps failing is given up
    /// (default 5). A permanent failure, a database error that cannot pass
    /// by retrying, and an entry that does not decode or whose id the
    /// inbox cannot store are given up at once.
    pub fn max_deliveries(mut self, max: u32) -> Self {
        self.max_deliveries = max;
        self
    }

    /// How long one entry's transaction may take (default 30 s); past it
    /// the transaction is abandoned (rolled back) and the entry handed
    /// back.
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.handler_timeout = timeout;
        self
    }

    /// Checks the settings: a usable URL, stream, group and name, a
    /// concurrency and `max_deliveries` of at least 1, a `claim_idle` of
    /// more than twice the handler timeout and at most a day.
    pub fn build(self) -> Result<StreamConsumer<I, H>, RedisError> {
        let config = |field: &'static str, reason: String| RedisError::Config { field, reason };
        if self.stream.is_empty() {
            return Err(config("stream", "must not be empty".into()));
        }
        if self.group.is_empty() {
            return Err(config("group", "must not be empty".into()));
        }
        if self.concurrency == 0 {
            return Err(config("concurrency", "must be at least 1".into()));
        }
        if self.claim_idle > Duration::from_secs(86_400) {
            return Err(config("claim_idle", "must be at most a day".into()));
        }
        if self.claim_idle <= self.handler_timeout.saturating_mul(2) {
            return Err(config(
                "claim_idle",
                format!(
                    "{:?} must be more than twice the handler timeout ({:?}), or entries \
                     in hand are taken from live members",
                    self.claim_idle, self.handler_timeout
                ),
            ));
        }
        let commands = Connection::new(&self.url)?;
        let reading = Connection::new(&self.url)?
            .with_response_timeout(crate::connection::RESPONSE_TIMEOUT + self.block);
        let mut settings = ConsumerSettings::new(self.name.unwrap_or_else(|| self.group.clone()));
        settings.retry = self.retry;
        settings.max_deliveries = self.max_deliveries;
        settings.handler_timeout = self.handler_timeout;
        let flow =
            ConsumeFlow::new(self.inbox, self.handler, settings).map_err(|error| match error {
                diesel_outbox_core::Error::Config { field, reason } => config(field, reason),
                other => config("consumer", other.to_string()),
            })?;
        let consumer = self.consumer.unwrap_or_else(|| {
            use std::hash::{BuildHasher as _, Hasher as _};
            let random = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            format!("{}-{}-{random:08x}", self.group, std::process::id())
        });
        Ok(StreamConsumer {
            shared: Arc::new(Shared {
                commands,
                dead_letter: self
                    .dead_letter
                    .unwrap_or_else(|| format!("{}:dead", self.stream)),
                stream: self.stream,
                group: self.group,
                consumer,
                claim_idle: self.claim_idle,
                name: flow.name().to_owned(),
                dead_letter_script: Script::new(include_str!("dead_letter.lua")),
            }),
            flow: Arc::new(flow),
            reading: Arc::new(reading),
            concurrency: self.concurrency,
            block: self.block,
        })
    }
}
