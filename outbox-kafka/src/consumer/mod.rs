//! [`InboxConsumer`]: reads a topic's partitions and applies each record
//! once, through an [`Inbox`], committing the group's offsets only after
//! the inbox commits.

mod answer;
mod partition;

use std::{
    collections::HashMap,
    fmt,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use confluent_kafka::{
    common::{TopicPartition, serialization::ByteArrayDeserializer},
    consumer::{Consumer as _, KafkaConsumer, OffsetAndMetadata},
};
use diesel_outbox_core::{
    CancellationToken, Inbox, RetryPolicy,
    consume::{
        ConsumeFlow, ConsumerSettings, FIRST_RECEIVE_PAUSE, MAX_RECEIVE_PAUSE, metrics::counted,
    },
};
use tokio::{
    sync::{Semaphore, mpsc},
    task::JoinSet,
};

pub use answer::{DEAD_CONSUMER, DEAD_DELIVERED, DEAD_REASON, DEAD_SOURCE};
pub use diesel_outbox_core::consume::{ConsumeHandler, ConsumerReport, Incoming};

use crate::{KafkaError, producer::Producer, properties::Properties, topic};
use partition::{Progress, Queue};

/// How long one poll waits for records; shutdown is noticed between polls.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// How often every partition's offset is committed again, changed or not:
/// a group's offsets expire when not committed for the broker's
/// `offsets.retention.minutes` (7 days by default), and a consumer that
/// reads assigned partitions is not a member that keeps them alive.
const OFFSET_REFRESH: Duration = Duration::from_secs(3600);
/// The longest a request to the broker may hold the loop (a commit, the
/// topic's partitions at start-up, closing): a broker that went away must
/// not hold shutdown for the client's own default (60 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What every partition's worker shares.
pub(crate) struct Shared {
    name: String,
    pub(crate) dead_letter: String,
    pub(crate) producer: Producer,
    pub(crate) permits: Semaphore,
}

impl Shared {
    pub(crate) fn flow_name(&self) -> &str {
        &self.name
    }
}

/// Applies each record of a topic once, in a transaction of the consumer's
/// database that also records it in the inbox.
///
/// For each record: decode its headers, open a transaction, record its
/// `Outbox-Message-Id` for this consumer ([`Inbox::record`]), run the
/// [`ConsumeHandler`] on the same transaction, commit; the partition's
/// offset moves past the record only then, and is committed to the
/// consumer group within the [commit interval](ConsumerBuilder::commit_interval)
/// and when the consumer stops. A crash between the inbox commit and the
/// offset commit delivers the record again, and the inbox answers it as a
/// duplicate, without the handler. Each delivery is decided by the shared
/// [consumer flow](diesel_outbox_core::consume).
///
/// A partition's records apply one after another, in offset order, so a
/// key's records (one partition) apply in the order they were published;
/// partitions apply side by side, at most
/// [`concurrency`](ConsumerBuilder::concurrency) transactions at once. A
/// record that fails is tried again in place after the retry policy's
/// delay (its partition waits), until `max_deliveries`; a record given up
/// is copied to the dead-letter topic (`<topic>.dead` unless set), with the
/// reason, before the offset moves past it. A copy that fails keeps the
/// record in place: nothing is skipped unrecorded.
///
/// The consumer reads the partitions it is given (all of the topic's by
/// default) under its consumer group's committed offsets: to hand
/// partitions to another instance, stop this one (it finishes the record
/// in hand on each partition and commits) and start the other. A consumer
/// stopped mid-record, or killed, leaves the record uncommitted; the next
/// reader of the partition starts from it.
///
/// ```no_run
/// use diesel_async::AsyncPgConnection;
/// use diesel_outbox_postgres::{PgStore, outbox::{CancellationToken, HandlerError}};
/// use diesel_outbox_kafka::{ConsumeHandler, Incoming, InboxConsumer};
///
/// struct Ship;
///
/// #[diesel_outbox_postgres::outbox::async_trait]
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
/// let consumer = InboxConsumer::builder(store, "127.0.0.1:9092", "orders", Ship)
///     .name("shipping")
///     .build()?;
/// let report = consumer.run(CancellationToken::new()).await?;
/// println!("applied {}, duplicates {}", report.applied, report.duplicates);
/// # Ok(())
/// # }
/// ```
pub struct InboxConsumer<I: Inbox, H> {
    flow: Arc<ConsumeFlow<I, H>>,
    properties: Properties,
    topic: String,
    group: String,
    partitions: Option<Vec<i32>>,
    dead_letter: String,
    concurrency: usize,
    buffer: usize,
    commit_interval: Duration,
}

impl<I: Inbox, H> fmt::Debug for InboxConsumer<I, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxConsumer")
            .field("topic", &self.topic)
            .field("group", &self.group)
            .field("partitions", &self.partitions)
            .field("dead_letter", &self.dead_letter)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

/// The partitions' workers and what the consumer knows of them.
struct Workers {
    queues: HashMap<i32, Queue>,
    running: JoinSet<()>,
    progress: mpsc::UnboundedSender<Progress>,
    stop: CancellationToken,
    /// The offset each partition may commit, and whether it changed since
    /// the last commit.
    next: HashMap<i32, (i64, bool)>,
}

impl<I, H> InboxConsumer<I, H>
where
    I: Inbox + 'static,
    H: ConsumeHandler<I::Conn> + 'static,
{
    /// Starts configuring a consumer that reads `topic` from the cluster at
    /// `bootstrap`, records in `inbox` and applies with `handler`.
    pub fn builder(
        inbox: I,
        bootstrap: impl Into<String>,
        topic: impl Into<String>,
        handler: H,
    ) -> ConsumerBuilder<I, H> {
        ConsumerBuilder {
            inbox,
            properties: Properties::new(bootstrap.into()),
            topic: topic.into(),
            handler,
            name: None,
            group: None,
            partitions: None,
            dead_letter: None,
            concurrency: 16,
            buffer: 1000,
            commit_interval: Duration::from_secs(1),
            retry: RetryPolicy::default(),
            max_deliveries: 5,
            handler_timeout: Duration::from_secs(30),
        }
    }

    /// The name the inbox records messages under.
    pub fn name(&self) -> &str {
        self.flow.name()
    }

    /// The consumer group whose offsets it commits.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The topic given-up records are copied to.
    pub fn dead_letter_topic(&self) -> &str {
        &self.dead_letter
    }

    /// Consumes and applies records until `shutdown` is cancelled; then
    /// stops fetching, lets each partition finish the record in hand,
    /// commits the offsets of what is done and closes the client. No offset
    /// ever moves past a record before its transaction committed (or its
    /// dead-letter copy was acknowledged).
    ///
    /// A broker that cannot be reached makes fetches come back empty until
    /// it is back; a fetch that fails with an error that may pass is logged
    /// and counted as a receive error (`outbox_consumer_receive_errors_total`)
    /// and the next waits a pause that doubles with each failure in a row
    /// (100 ms up to 5 s).
    ///
    /// Fails at start-up when the consumer cannot be created, when the topic
    /// or the dead-letter topic does not exist (has no partitions), when a
    /// partition named with [`partitions`](ConsumerBuilder::partitions) is
    /// not the topic's, or when the partitions cannot be assigned. Fails
    /// later, after the orderly stop above, when a fetch fails with an error
    /// no retry can pass (a record compressed with a codec the client lacks,
    /// say) or a partition's worker panicked.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<ConsumerReport, KafkaError> {
        let mut consumer: KafkaConsumer<Vec<u8>, Vec<u8>> = KafkaConsumer::new(
            self.properties.consumer(&self.group)?,
            ByteArrayDeserializer::new(),
            ByteArrayDeserializer::new(),
        )?;
        let partitions = match self.start(&mut consumer).await {
            Ok(partitions) => partitions,
            Err(error) => {
                let _ = tokio::time::timeout(REQUEST_TIMEOUT, consumer.close()).await;
                return Err(error);
            }
        };
        let shared = Arc::new(Shared {
            name: self.flow.name().to_owned(),
            dead_letter: self.dead_letter.clone(),
            producer: Producer::new(self.properties.clone())?,
            permits: Semaphore::new(self.concurrency),
        });
        let (progress, mut reports) = mpsc::unbounded_channel();
        let mut workers = Workers {
            queues: HashMap::new(),
            running: JoinSet::new(),
            progress,
            stop: CancellationToken::new(),
            next: HashMap::new(),
        };
        // Where each partition starts: committed again with the others, so
        // that a quiet partition's offset does not expire.
        for &partition in &partitions {
            let at = TopicPartition::new(self.topic.as_str(), partition);
            if let Ok(position) = consumer.position_with_timeout(&at, REQUEST_TIMEOUT).await {
                workers.next.insert(partition, (position, false));
            }
        }
        let mut report = ConsumerReport::default();
        let mut failure = None;
        let mut pause = FIRST_RECEIVE_PAUSE;
        let mut last_commit = tokio::time::Instant::now();
        let mut last_refresh = tokio::time::Instant::now();
        while !shutdown.is_cancelled() {
            match consumer.poll(POLL_TIMEOUT).await {
                Ok(records) => {
                    pause = FIRST_RECEIVE_PAUSE;
                    for record in records {
                        self.hand_over(&shared, &mut workers, record);
                    }
                }
                Err(error) if !error.is_retriable_error() => {
                    tracing::error!(consumer = %self.flow.name(), %error, "fetching records failed for good; the consumer stops");
                    failure = Some(KafkaError::Fetch {
                        topic: self.topic.clone(),
                        source: error,
                    });
                    break;
                }
                Err(error) => {
                    report.receive_errors += 1;
                    counted("outbox_consumer_receive_errors_total", self.flow.name());
                    tracing::warn!(consumer = %self.flow.name(), %error, ?pause, "fetching records failed; trying again after a pause");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(MAX_RECEIVE_PAUSE);
                }
            }
            // A worker ends before shutdown only by a panic outside the
            // flow's own guard: its partition would stall unseen.
            if let Some(ended) = workers.running.try_join_next() {
                let reason = match ended {
                    Err(error) => error.to_string(),
                    Ok(()) => "it ended".to_owned(),
                };
                tracing::error!(consumer = %self.flow.name(), %reason, "a partition's worker stopped; the consumer stops");
                failure = Some(KafkaError::Worker(reason));
                break;
            }
            while let Ok(done) = reports.try_recv() {
                workers.note(&mut report, done);
            }
            self.pace(&mut consumer, &mut workers).await;
            if last_commit.elapsed() >= self.commit_interval {
                let all = last_refresh.elapsed() >= OFFSET_REFRESH;
                self.commit(&mut consumer, &mut workers, all).await;
                last_commit = tokio::time::Instant::now();
                if all {
                    last_refresh = last_commit;
                }
            }
        }
        // Each partition finishes the record in hand; the rest stay
        // uncommitted for the partition's next reader.
        workers.stop.cancel();
        workers.queues.clear();
        while workers.running.join_next().await.is_some() {}
        while let Ok(done) = reports.try_recv() {
            workers.note(&mut report, done);
        }
        self.commit(&mut consumer, &mut workers, false).await;
        close_within(self.flow.name(), "the Kafka consumer", consumer.close()).await;
        close_within(
            self.flow.name(),
            "the dead-letter producer",
            shared.producer.close(),
        )
        .await;
        match failure {
            Some(error) => Err(error),
            None => Ok(report),
        }
    }

    /// Checks the topic, the partitions and the dead-letter topic, and
    /// assigns the partitions; returns them.
    async fn start(
        &self,
        consumer: &mut KafkaConsumer<Vec<u8>, Vec<u8>>,
    ) -> Result<Vec<i32>, KafkaError> {
        let start = |topic: &str, source| KafkaError::Start {
            topic: topic.to_owned(),
            source,
        };
        let config = |field: &'static str, reason: String| KafkaError::Config { field, reason };
        let existing: Vec<i32> = consumer
            .partitions_for_with_timeout(&self.topic, REQUEST_TIMEOUT)
            .await
            .map_err(|error| start(&self.topic, error))?
            .iter()
            .map(|info| info.partition())
            .collect();
        if existing.is_empty() {
            return Err(config(
                "topic",
                format!("topic `{}` has no partitions: create it first", self.topic),
            ));
        }
        let partitions = match &self.partitions {
            Some(named) => {
                if let Some(missing) = named.iter().find(|p| !existing.contains(p)) {
                    return Err(config(
                        "partitions",
                        format!(
                            "topic `{}` has {} partitions, numbered from 0: {missing} is not one",
                            self.topic,
                            existing.len()
                        ),
                    ));
                }
                named.clone()
            }
            None => existing,
        };
        let dead = consumer
            .partitions_for_with_timeout(&self.dead_letter, REQUEST_TIMEOUT)
            .await
            .map_err(|error| start(&self.dead_letter, error))?;
        if dead.is_empty() {
            return Err(config(
                "dead_letter",
                format!(
                    "topic `{}` does not exist: create it with the topic, so that a record \
                     given up has somewhere to go",
                    self.dead_letter
                ),
            ));
        }
        let assigned = partitions
            .iter()
            .map(|&partition| TopicPartition::new(self.topic.as_str(), partition))
            .collect();
        consumer
            .assign(assigned)
            .await
            .map_err(|error| start(&self.topic, error))?;
        Ok(partitions)
    }

    /// Queues `record` for its partition's worker, starting the worker on
    /// the partition's first record.
    fn hand_over(
        &self,
        shared: &Arc<Shared>,
        workers: &mut Workers,
        record: confluent_kafka::consumer::ConsumerRecord<Vec<u8>, Vec<u8>>,
    ) {
        let partition = record.partition();
        let queue = workers.queues.entry(partition).or_insert_with(|| {
            let (records, receiver) = mpsc::unbounded_channel();
            let waiting = Arc::new(AtomicUsize::new(0));
            workers.running.spawn(partition::work(
                Arc::clone(shared),
                Arc::clone(&self.flow),
                partition,
                receiver,
                Arc::clone(&waiting),
                workers.progress.clone(),
                workers.stop.clone(),
            ));
            Queue {
                records,
                waiting,
                paused: false,
            }
        });
        queue.waiting.fetch_add(1, Ordering::Relaxed);
        if queue.records.send(record).is_err() {
            queue.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Pauses fetching a partition whose queue holds `buffer` records, and
    /// resumes it once half of them are done: a partition whose record keeps
    /// failing holds its own records back, never the others'.
    async fn pace(&self, consumer: &mut KafkaConsumer<Vec<u8>, Vec<u8>>, workers: &mut Workers) {
        for (&partition, queue) in &mut workers.queues {
            let waiting = queue.waiting.load(Ordering::Relaxed);
            let change = if !queue.paused && waiting >= self.buffer {
                Some(true)
            } else if queue.paused && waiting <= self.buffer / 2 {
                Some(false)
            } else {
                None
            };
            let Some(pause) = change else { continue };
            let partitions = [TopicPartition::new(self.topic.as_str(), partition)];
            let changed = if pause {
                consumer.pause(&partitions).await
            } else {
                consumer.resume(&partitions).await
            };
            match changed {
                Ok(()) => queue.paused = pause,
                Err(error) => {
                    tracing::warn!(consumer = %self.flow.name(), partition, %error, "pausing or resuming a partition failed")
                }
            }
        }
    }

    /// Commits the offsets of the records done since the last commit (with
    /// `all`, every partition's, changed or not, so that none expires); a
    /// commit that fails is tried again at the next interval.
    async fn commit(
        &self,
        consumer: &mut KafkaConsumer<Vec<u8>, Vec<u8>>,
        workers: &mut Workers,
        all: bool,
    ) {
        let mut offsets = HashMap::new();
        for (&partition, &(next, changed)) in &workers.next {
            if !changed && !all {
                continue;
            }
            match OffsetAndMetadata::new(next) {
                Ok(offset) => {
                    offsets.insert(TopicPartition::new(self.topic.as_str(), partition), offset);
                }
                Err(error) => {
                    tracing::warn!(consumer = %self.flow.name(), partition, %error, "an offset could not be committed")
                }
            }
        }
        if offsets.is_empty() {
            return;
        }
        let committed: Vec<i32> = offsets.keys().map(TopicPartition::partition).collect();
        match consumer
            .commit_sync_with_offsets_timeout(offsets, REQUEST_TIMEOUT)
            .await
        {
            Ok(()) => {
                for partition in committed {
                    if let Some((_, changed)) = workers.next.get_mut(&partition) {
                        *changed = false;
                    }
                }
            }
            Err(error) => {
                tracing::warn!(consumer = %self.flow.name(), %error, "committing offsets failed; trying again later (the records done since come again after a crash, as duplicates)");
            }
        }
    }
}

/// Waits at most [`REQUEST_TIMEOUT`] for `what` to close, and logs a
/// failure or a close that took too long (then it is left as it is).
async fn close_within<E: fmt::Display>(
    consumer: &str,
    what: &str,
    closing: impl Future<Output = Result<(), E>>,
) {
    match tokio::time::timeout(REQUEST_TIMEOUT, closing).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(consumer, %error, "closing {what} failed"),
        Err(_) => tracing::warn!(consumer, "closing {what} took too long; left it"),
    }
}

impl Workers {
    /// Counts a delivery's outcome and moves its partition's offset.
    fn note(&mut self, report: &mut ConsumerReport, progress: Progress) {
        report.add(progress.outcome);
        if let Some(next) = progress.next_offset {
            let slot = self.next.entry(progress.partition).or_insert((next, true));
            if next >= slot.0 {
                *slot = (next, true);
            }
        }
    }
}

/// Configures an [`InboxConsumer`]; [`build`](ConsumerBuilder::build)
/// checks the settings.
pub struct ConsumerBuilder<I: Inbox, H> {
    inbox: I,
    properties: Properties,
    topic: String,
    handler: H,
    name: Option<String>,
    group: Option<String>,
    partitions: Option<Vec<i32>>,
    dead_letter: Option<String>,
    concurrency: usize,
    buffer: usize,
    commit_interval: Duration,
    retry: RetryPolicy,
    max_deliveries: u32,
    handler_timeout: Duration,
}

impl<I: Inbox, H> fmt::Debug for ConsumerBuilder<I, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("topic", &self.topic)
            .field("name", &self.name)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl<I, H> ConsumerBuilder<I, H>
where
    I: Inbox + 'static,
    H: ConsumeHandler<I::Conn> + 'static,
{
    /// The name the inbox records under (at most 64 bytes), and the
    /// consumer group's unless [`group`](Self::group) sets one; required.
    /// Each service that must apply every record needs a name of its own.
    /// A new name is a new consumer: it starts from the topic's first
    /// record, and applies every record again under its name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The consumer group whose committed offsets it starts from and
    /// commits to; by default the consumer's name.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Reads these partitions of the topic only (by default, all of them):
    /// instances of one service that split a topic's partitions between
    /// them, each its own share.
    pub fn partitions(mut self, partitions: impl IntoIterator<Item = i32>) -> Self {
        self.partitions = Some(partitions.into_iter().collect());
        self
    }

    /// The topic given-up records are copied to (default `<topic>.dead`);
    /// it must exist where the broker does not create topics.
    pub fn dead_letter(mut self, topic: impl Into<String>) -> Self {
        self.dead_letter = Some(topic.into());
        self
    }

    /// How many transactions run at once, across partitions (default 16),
    /// each on its own pooled connection: keep it within the pool.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// How many fetched records a partition may hold before its fetching
    /// pauses (default 1,000).
    pub fn buffer(mut self, records: usize) -> Self {
        self.buffer = records;
        self
    }

    /// How often done records' offsets are committed (default 1 s); a crash
    /// delivers again, as duplicates, what was done since the last commit
    /// that went through (one interval while the broker answers commits).
    pub fn commit_interval(mut self, interval: Duration) -> Self {
        self.commit_interval = interval;
        self
    }

    /// Sets a property of Kafka's consumer client (`client.id`,
    /// `fetch.max.wait.ms`, `auto.offset.reset`...); the dead-letter
    /// producer gets the same properties. `enable.auto.commit` stays
    /// `false`.
    pub fn property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.set(name.into(), value.into());
        self
    }

    /// The delay before a failed record is tried again, by delivery count
    /// (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Deliveries tried before a record that keeps failing is given up
    /// (default 5). A permanent failure, a database error that cannot pass
    /// by retrying, and a record that does not decode or whose id the inbox
    /// cannot store are given up at once. Counted per run: a restarted
    /// consumer starts counting again.
    pub fn max_deliveries(mut self, max: u32) -> Self {
        self.max_deliveries = max;
        self
    }

    /// How long one record's transaction may take (default 30 s); past it
    /// the transaction is abandoned (rolled back) and the record tried
    /// again.
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.handler_timeout = timeout;
        self
    }

    /// Checks the settings: a name, topic names Kafka accepts, a concurrency, buffer
    /// and `max_deliveries` of at least 1, a non-zero commit interval and
    /// handler timeout, client properties the client accepts.
    pub fn build(self) -> Result<InboxConsumer<I, H>, KafkaError> {
        let config = |field: &'static str, reason: String| KafkaError::Config { field, reason };
        topic::check(&self.topic).map_err(|reason| config("topic", reason))?;
        let dead_letter = self
            .dead_letter
            .unwrap_or_else(|| format!("{}.dead", self.topic));
        topic::check(&dead_letter).map_err(|reason| config("dead_letter", reason))?;
        if dead_letter == self.topic {
            return Err(config("dead_letter", "must not be the topic read".into()));
        }
        if let Some(partitions) = &self.partitions
            && (partitions.is_empty() || partitions.iter().any(|&p| p < 0))
        {
            return Err(config(
                "partitions",
                "name at least one, none negative".into(),
            ));
        }
        if self.concurrency == 0 || self.concurrency > Semaphore::MAX_PERMITS {
            return Err(config(
                "concurrency",
                format!("must be 1 to {}", Semaphore::MAX_PERMITS),
            ));
        }
        if self.buffer == 0 {
            return Err(config("buffer", "must be at least 1".into()));
        }
        if self.commit_interval.is_zero() {
            return Err(config("commit_interval", "must not be zero".into()));
        }
        // No default: a topic is read by many services, and two that left
        // the name to a default drawn from it would share one group's
        // offsets and skip each other's records.
        let name = self.name.ok_or_else(|| {
            config(
                "name",
                "name the consumer: its inbox records and its consumer group go by it".into(),
            )
        })?;
        let group = self.group.unwrap_or_else(|| name.clone());
        if group.is_empty() {
            return Err(config("group", "must not be empty".into()));
        }
        self.properties.consumer(&group)?;
        Producer::new(self.properties.clone())?;
        let mut settings = ConsumerSettings::new(name);
        settings.retry = self.retry;
        settings.max_deliveries = self.max_deliveries;
        settings.handler_timeout = self.handler_timeout;
        let flow =
            ConsumeFlow::new(self.inbox, self.handler, settings).map_err(|error| match error {
                diesel_outbox_core::Error::Config { field, reason } => config(field, reason),
                other => config("consumer", other.to_string()),
            })?;
        Ok(InboxConsumer {
            flow: Arc::new(flow),
            properties: self.properties,
            topic: self.topic,
            group,
            partitions: self.partitions,
            dead_letter,
            concurrency: self.concurrency,
            buffer: self.buffer,
            commit_interval: self.commit_interval,
        })
    }
}
