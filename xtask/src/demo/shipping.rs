//! The demo's shipping service: consumes `order.created` from JetStream
//! through the inbox, in a database of its own, and records one shipment
//! per order.

use std::time::Duration;

use async_nats::jetstream::consumer::{PullConsumer, pull};
use diesel_async::AsyncConnection;
use diesel_outbox_core::{CancellationToken, HandlerError, RetryPolicy};
use diesel_outbox_nats::{ConsumeHandler, ConsumerReport, InboxConsumer, Incoming};
use diesel_outbox_testkit::{TestBackend, nats::TestStream};
use tokio::task::JoinHandle;

/// Records the order's shipment in the consumer's transaction.
struct Ship;

#[async_trait::async_trait]
impl<C: AsyncConnection + Send + 'static> ConsumeHandler<C> for Ship {
    async fn handle(&self, conn: &mut C, incoming: &Incoming) -> Result<(), HandlerError> {
        let order: serde_json::Value = incoming.json()?;
        let order = order["order"]
            .as_i64()
            .ok_or_else(|| HandlerError::permanent(anyhow::anyhow!("order without a number")))?;
        conn.batch_execute(&format!(
            "INSERT INTO shipments (order_id) VALUES ({order})"
        ))
        .await?;
        Ok(())
    }
}

/// The running shipping service.
pub(crate) struct Shipping<B: TestBackend> {
    db: B,
    durable: PullConsumer,
    shutdown: CancellationToken,
    running: JoinHandle<Result<ConsumerReport, diesel_outbox_nats::NatsError>>,
}

/// What the shipping service did.
pub(crate) struct ShippingSummary {
    /// Distinct orders shipped.
    pub(crate) shipped: i64,
    /// Orders with exactly one shipment.
    pub(crate) once: i64,
    /// Deliveries the inbox recognised and acknowledged without shipping.
    pub(crate) duplicates: u64,
}

impl<B: TestBackend> Shipping<B> {
    /// Creates the service's database (the inbox and `shipments`) and starts
    /// consuming `stream` with a durable consumer.
    pub(crate) async fn start(stream: &TestStream) -> anyhow::Result<Self> {
        let db = B::create("demo_shipping").await?;
        db.migrate_inbox().await?;
        db.execute_sql("CREATE TABLE shipments (order_id BIGINT NOT NULL)")
            .await?;
        let durable = stream
            .jetstream()
            .get_stream(stream.name())
            .await?
            .create_consumer(pull::Config {
                durable_name: Some("shipping".into()),
                ack_wait: Duration::from_secs(5),
                ..Default::default()
            })
            .await?;
        let consumer = InboxConsumer::builder(db.store().clone(), durable.clone(), Ship)
            .concurrency(8)
            .retry(RetryPolicy::new(
                Duration::from_millis(100),
                Duration::from_secs(1),
                0.2,
            )?)
            .build()?;
        let shutdown = CancellationToken::new();
        let running = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { consumer.run(shutdown).await }
        });
        Ok(Self {
            db,
            durable,
            shutdown,
            running,
        })
    }

    /// Waits until the stream's messages are all acknowledged, stops, and
    /// counts.
    pub(crate) async fn finish(mut self) -> anyhow::Result<ShippingSummary> {
        loop {
            let info = self.durable.info().await?;
            if info.num_pending == 0 && info.num_ack_pending == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.shutdown.cancel();
        let report = self.running.await??;
        Ok(ShippingSummary {
            shipped: self
                .db
                .count("(SELECT DISTINCT order_id FROM shipments) AS shipped")
                .await?,
            once: self
                .db
                .count(
                    "(SELECT order_id FROM shipments GROUP BY order_id HAVING COUNT(*) = 1) AS once",
                )
                .await?,
            duplicates: report.duplicates,
        })
    }
}
