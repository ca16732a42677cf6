//! The handler every scenario runs: its effect is a `done` line in the
//! process's record file (after publishing to a broker, when it publishes),
//! with `begin` and `fail` lines around it.

use std::{path::PathBuf, sync::Arc, time::Duration};

use diesel_outbox_core::{Delivery, Handler, HandlerError, Registry, handler_fn};

use super::{
    db::{KIND, Payload},
    records::{self, Event, Recorder},
};

/// How the handler behaves.
#[derive(Debug, Clone, Default)]
pub(crate) struct Behaviour {
    /// How long the handler works before its effect.
    pub(crate) work: Duration,
    /// How long it waits after its effect before returning (as for a
    /// downstream's acknowledgement): a crash in between repeats the effect.
    pub(crate) linger: Duration,
    /// Fail every first attempt (retryably), to exercise retry scheduling.
    pub(crate) fail_first: bool,
    /// On a task marked `hang`: hang (blocking the thread, beyond the reach
    /// of the handler timeout) until another process has written the task's
    /// result, then fail. The scenario's record directory and this process's owner.
    pub(crate) hang: Option<(PathBuf, String)>,
    /// Publish each delivery to JetStream before the effect.
    #[cfg(feature = "nats")]
    pub(crate) publisher: Option<Arc<diesel_outbox_nats::JetStreamPublisher>>,
    /// Publish each claim's deliveries to RabbitMQ before the effect,
    /// through the publisher's batch handler.
    #[cfg(feature = "rabbitmq")]
    pub(crate) amqp: Option<Arc<diesel_outbox_rabbitmq::RabbitPublisher>>,
    /// Publish each claim's deliveries to Redis Streams before the effect,
    /// through the publisher's batch handler.
    #[cfg(feature = "redis")]
    pub(crate) redis: Option<Arc<diesel_outbox_redis::StreamPublisher>>,
    /// Publish each claim's deliveries to Kafka before the effect, through
    /// the publisher's batch handler.
    #[cfg(feature = "kafka")]
    pub(crate) kafka: Option<Arc<diesel_outbox_kafka::KafkaPublisher>>,
}

/// A registry with the scenario handler for `order.created` v1.
pub(crate) fn registry(recorder: Recorder, behaviour: Behaviour) -> anyhow::Result<Registry> {
    #[cfg(feature = "rabbitmq")]
    if let Some(publisher) = behaviour.amqp.clone() {
        return Ok(Registry::builder()
            .batch_handler(KIND, 1, batch_publishing(recorder, publisher))
            .build()?);
    }
    #[cfg(feature = "redis")]
    if let Some(publisher) = behaviour.redis.clone() {
        return Ok(Registry::builder()
            .batch_handler(KIND, 1, batch_publishing(recorder, publisher))
            .build()?);
    }
    #[cfg(feature = "kafka")]
    if let Some(publisher) = behaviour.kafka.clone() {
        return Ok(Registry::builder()
            .batch_handler(KIND, 1, batch_publishing(recorder, publisher))
            .build()?);
    }
    Ok(Registry::builder()
        .handler(KIND, 1, handler(recorder, behaviour))
        .build()?)
}

/// The scenario handler over a broker's batch publisher: `begin` for each
/// delivery of the batch, the batch published through the publisher's own
/// batch handler, then `done` or `fail` for each by its own answer.
#[cfg(any(feature = "rabbitmq", feature = "redis", feature = "kafka"))]
fn batch_publishing<P: diesel_outbox_core::BatchHandler + 'static>(
    recorder: Recorder,
    publisher: Arc<P>,
) -> impl diesel_outbox_core::BatchHandler {
    diesel_outbox_core::batch_handler_fn(move |deliveries: Vec<Delivery>| {
        let (recorder, publisher) = (recorder.clone(), Arc::clone(&publisher));
        async move {
            let mut lines = Vec::with_capacity(deliveries.len());
            for delivery in &deliveries {
                let order = delivery.json::<Payload>().map(|payload| payload.order);
                let (id, attempt) = (delivery.id.get(), delivery.attempt);
                let order = order.unwrap_or(-1);
                recorder.line(&format!("begin {id} {attempt} {order}")).ok();
                lines.push((id, attempt, order));
            }
            let answers = publisher.handle_batch(deliveries).await;
            for ((id, attempt, order), answer) in lines.iter().zip(&answers) {
                let line = match answer {
                    Ok(()) => format!("done {id} {attempt} {order} 0"),
                    Err(_) => format!("fail {id} {attempt} {order}"),
                };
                recorder.line(&line).ok();
            }
            answers
        }
    })
}

/// The exchange, queue and routing key of the RabbitMQ scenario.
#[cfg(feature = "rabbitmq")]
pub(crate) const AMQP_EXCHANGE: &str = "chaos.orders";
/// See [`AMQP_EXCHANGE`].
#[cfg(feature = "rabbitmq")]
pub(crate) const AMQP_QUEUE: &str = "chaos.orders";
/// See [`AMQP_EXCHANGE`].
#[cfg(feature = "rabbitmq")]
pub(crate) const AMQP_ROUTING_KEY: &str = "order";

/// The stream of the Redis scenario.
#[cfg(feature = "redis")]
pub(crate) const REDIS_STREAM: &str = "chaos:orders";

/// The publisher of the Redis scenario, ids `chaos:<task id>`, remembered
/// for ten minutes: longer than any outage the scenario makes.
#[cfg(feature = "redis")]
pub(crate) fn redis_publisher(url: &str) -> anyhow::Result<diesel_outbox_redis::StreamPublisher> {
    Ok(diesel_outbox_redis::StreamPublisher::builder(url)
        .route(KIND, 1, REDIS_STREAM)
        .message_id_prefix("chaos")
        .build()?)
}

/// The topic of the Kafka scenario on `backend`: one per backend, since
/// task ids start again on each backend's database and the run's broker
/// serves both.
#[cfg(feature = "kafka")]
pub(crate) fn kafka_topic(backend: diesel_outbox_sql::BackendKind) -> String {
    format!("chaos.orders.{}", backend.name())
}

/// How long the Kafka scenario's producer keeps a record before it gives
/// up on the acknowledgement (`delivery.timeout.ms`, 4.5 s by default):
/// longer than the longest outage the scenario makes (15 s) plus the
/// restart and the client's reconnect backoff (at most 1 s), so that a
/// record in flight when the broker is killed is sent again, with its
/// sequence number, once the broker is back.
///
/// With the default, such a record expires during the outage, and the
/// idempotent producer then bumps its epoch on its own (KIP-360), which
/// Kafka's brokers accept. tansu 0.6.0 does not: its SQLite storage panics
/// on the epoch it has not seen ("more or less than one row"), the broker
/// answers every request after it with an error, and once restarted it
/// fails the same way at that producer's next record.
#[cfg(feature = "kafka")]
pub(crate) const KAFKA_DELIVERY_TIMEOUT: Duration = Duration::from_secs(20);

/// The publisher of the Kafka scenario, to `topic`, ids `chaos:<task id>`,
/// with the client properties the private broker needs and
/// [`KAFKA_DELIVERY_TIMEOUT`].
#[cfg(feature = "kafka")]
pub(crate) fn kafka_publisher(
    bootstrap: &str,
    topic: &str,
) -> anyhow::Result<diesel_outbox_kafka::KafkaPublisher> {
    let builder = diesel_outbox_kafka::KafkaPublisher::builder(bootstrap)
        .route(KIND, 1, topic)
        .message_id_prefix("chaos")
        .property(
            "delivery.timeout.ms",
            KAFKA_DELIVERY_TIMEOUT.as_millis().to_string(),
        );
    Ok(diesel_outbox_testkit::kafka::CLIENT_PROPERTIES
        .iter()
        .fold(builder, |builder, (name, value)| {
            builder.property(*name, *value)
        })
        .build()?)
}

/// The publisher of the RabbitMQ scenario, ids `chaos:<task id>`.
#[cfg(feature = "rabbitmq")]
pub(crate) fn amqp_publisher(url: &str) -> anyhow::Result<diesel_outbox_rabbitmq::RabbitPublisher> {
    Ok(diesel_outbox_rabbitmq::RabbitPublisher::builder(url)
        .route(KIND, 1, AMQP_EXCHANGE, AMQP_ROUTING_KEY)
        .message_id_prefix("chaos")
        .build()?)
}

fn handler(recorder: Recorder, behaviour: Behaviour) -> impl Handler {
    let behaviour = Arc::new(behaviour);
    handler_fn(move |delivery: Delivery| {
        let (recorder, behaviour) = (recorder.clone(), Arc::clone(&behaviour));
        async move {
            let payload: Payload = delivery.json()?;
            let (id, attempt, order) = (delivery.id.get(), delivery.attempt, payload.order);
            recorder.line(&format!("begin {id} {attempt} {order}"))?;
            if !behaviour.work.is_zero() {
                tokio::time::sleep(behaviour.work).await;
            }
            let fail = |why: &str| {
                recorder.line(&format!("fail {id} {attempt} {order}")).ok();
                HandlerError::retryable(anyhow::anyhow!("{why}"))
            };
            if let (true, Some((dir, owner))) = (payload.hang, &behaviour.hang) {
                // A blocking call: the handler timeout cannot cut it.
                tokio::task::block_in_place(|| wait_for_takeover(dir, owner, id));
                return Err(fail("the downstream hung past the lease"));
            }
            if behaviour.fail_first && attempt == 1 {
                return Err(fail("first attempts fail in this scenario"));
            }
            #[cfg(feature = "nats")]
            let replay = match &behaviour.publisher {
                Some(publisher) => match publisher.publish(&delivery).await {
                    Ok(published) => published.duplicate,
                    Err(error) => {
                        recorder.line(&format!("fail {id} {attempt} {order}")).ok();
                        return Err(error);
                    }
                },
                None => false,
            };
            #[cfg(not(feature = "nats"))]
            let replay = false;
            recorder.line(&format!("done {id} {attempt} {order} {}", u8::from(replay)))?;
            if !behaviour.linger.is_zero() {
                tokio::time::sleep(behaviour.linger).await;
            }
            Ok(())
        }
    })
}

/// The stream the NATS scenario publishes to.
#[cfg(feature = "nats")]
pub(crate) const STREAM: &str = "CHAOS";

/// A client of the NATS server at `url`, or of a cluster: `url` may name
/// several servers separated by commas (`nats://a:4222,nats://b:4222`), and
/// the client fails over between them.
#[cfg(feature = "nats")]
pub(crate) async fn connect(url: &str) -> anyhow::Result<async_nats::Client> {
    let servers: Vec<&str> = url.split(',').map(str::trim).collect();
    async_nats::connect(servers.as_slice())
        .await
        .map_err(|error| anyhow::anyhow!("connecting to NATS at {url}: {error}"))
}

/// The publisher of the NATS scenarios: `chaos.order.created.v1`, ids
/// `chaos:<task id>`, on the server or servers `url` names (see [`connect`]).
#[cfg(feature = "nats")]
pub(crate) async fn publisher(url: &str) -> anyhow::Result<diesel_outbox_nats::JetStreamPublisher> {
    let client = connect(url).await?;
    Ok(
        diesel_outbox_nats::JetStreamPublisher::builder(async_nats::jetstream::new(client))
            .subject_prefix("chaos")
            .message_id_prefix("chaos")
            .route(KIND, 1)
            .expected_stream(STREAM)
            .build()?,
    )
}

/// Blocks until a process other than `owner` has written a result of task
/// `id` (the takeover's write), at most a minute.
fn wait_for_takeover(dir: &std::path::Path, owner: &str, id: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let taken_over = records::read_dir(dir).is_ok_and(|logs| {
            logs.iter().filter(|log| log.owner != owner).any(|log| {
                log.events.iter().any(|(_, event)| {
                    matches!(event, Event::Write { fences, .. }
                        if fences.iter().any(|(task, _)| *task == id))
                })
            })
        });
        if taken_over {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
