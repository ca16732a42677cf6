//! RabbitMQ for tests: an exchange and a queue of their own per test,
//! [`TestQueue`].

use anyhow::Context as _;
use lapin::{
    Channel, Connection, ConnectionProperties, ExchangeKind,
    options::{
        BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
        QueueDeclareOptions, QueueDeleteOptions,
    },
    types::FieldTable,
};

use crate::url;

/// Environment variable naming the RabbitMQ broker tests use.
pub const URL_VAR: &str = "OUTBOX_AMQP_URL";
/// The broker used when [`URL_VAR`] is unset.
pub const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// How to start the local broker when it is not running.
pub const START_HINT: &str = "start it with: rabbitmq-server -detached";

/// The test broker's URL ([`URL_VAR`], or [`DEFAULT_URL`]).
pub fn broker_url() -> String {
    url::from_env(URL_VAR, DEFAULT_URL)
}

/// A connection to the test broker, or an error naming the URL and how to
/// start the broker.
pub async fn connect() -> anyhow::Result<Connection> {
    let address = broker_url();
    Connection::connect(&address, ConnectionProperties::default())
        .await
        .with_context(|| format!("RabbitMQ at {address} ({URL_VAR}) is unreachable; {START_HINT}"))
}

/// A direct exchange and a durable queue bound to it under the routing key
/// [`TestQueue::routing_key`], both named for one test; deleted when
/// dropped, kept when the test panics.
#[derive(Debug)]
pub struct TestQueue {
    exchange: String,
    queue: String,
    connection: Connection,
    channel: Channel,
    /// The other queues of the test, deleted with it.
    others: std::sync::Mutex<Vec<String>>,
}

impl TestQueue {
    /// Declares the exchange and the queue for `test`, and binds them.
    pub async fn create(test: &str) -> anyhow::Result<Self> {
        let unique = url::database_name(test);
        let connection = connect().await?;
        let channel = connection.create_channel().await?;
        let (exchange, queue) = (format!("{unique}.x"), format!("{unique}.q"));
        channel
            .exchange_declare(
                exchange.as_str().into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declaring exchange {exchange}"))?;
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declaring queue {queue}"))?;
        let test_queue = Self {
            exchange,
            queue,
            connection,
            channel,
            others: std::sync::Mutex::default(),
        };
        test_queue
            .bind(&test_queue.queue, test_queue.routing_key())
            .await?;
        Ok(test_queue)
    }

    /// Binds `queue` to the test's exchange under `routing_key`.
    pub async fn bind(&self, queue: &str, routing_key: &str) -> anyhow::Result<()> {
        self.channel
            .queue_bind(
                queue.into(),
                self.exchange.as_str().into(),
                routing_key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("binding {queue} to {} as {routing_key}", self.exchange))
    }

    /// Declares another durable queue of this test, `<queue>.<suffix>`,
    /// deleted with the test's; returns its name.
    pub async fn another_queue(&self, suffix: &str) -> anyhow::Result<String> {
        let name = format!("{}.{suffix}", self.queue);
        self.channel
            .queue_declare(
                name.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declaring queue {name}"))?;
        self.others
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(name.clone());
        Ok(name)
    }

    /// Deletes `queue` with the test's queues (one a program under test
    /// declared).
    pub fn adopt(&self, queue: impl Into<String>) {
        self.others
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(queue.into());
    }

    /// The exchange's name.
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// The queue's name.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The routing key the queue is bound under.
    pub fn routing_key(&self) -> &str {
        "order"
    }

    /// The connection the queue was declared on.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// How many messages wait in `queue`, ready for a consumer (not those
    /// a consumer holds unacknowledged).
    pub async fn ready(&self, queue: &str) -> anyhow::Result<u32> {
        let declared = self
            .channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("reading queue {queue}"))?;
        Ok(declared.message_count())
    }

    /// Publishes `payload` with `properties` to the test's exchange under
    /// `routing_key`, as another program would, and waits until the broker
    /// has it.
    pub async fn publish_raw(
        &self,
        routing_key: &str,
        payload: &[u8],
        properties: lapin::BasicProperties,
    ) -> anyhow::Result<()> {
        let channel = self.connection.create_channel().await?;
        channel
            .confirm_select(lapin::options::ConfirmSelectOptions::default())
            .await?;
        channel
            .basic_publish(
                self.exchange.as_str().into(),
                routing_key.into(),
                lapin::options::BasicPublishOptions::default(),
                payload,
                properties,
            )
            .await?
            .await?;
        Ok(())
    }

    /// Takes every message waiting in `queue` (acknowledging each), in
    /// order.
    pub async fn drain(&self, queue: &str) -> anyhow::Result<Vec<lapin::message::Delivery>> {
        let mut taken = Vec::new();
        while let Some(message) = self
            .channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await?
        {
            taken.push(message.delivery);
        }
        Ok(taken)
    }
}

impl Drop for TestQueue {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "test failed: kept queue {} and exchange {}",
                self.queue, self.exchange
            );
            return;
        }
        let mut queues = std::mem::take(
            &mut *self
                .others
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        queues.push(self.queue.clone());
        let (channel, exchange) = (self.channel.clone(), self.exchange.clone());
        crate::drop_database::run(async move {
            for queue in queues {
                let _ = channel
                    .queue_delete(queue.into(), QueueDeleteOptions::default())
                    .await;
            }
            let _ = channel
                .exchange_delete(exchange.into(), ExchangeDeleteOptions::default())
                .await;
            Ok(())
        });
    }
}
