//! The demo's shipping service: consumes `order.created` from the broker
//! through the inbox, in a database of its own, and records one shipment
//! per order.

use std::time::{Duration, Instant};

use diesel_async::AsyncConnection;
use diesel_outbox_core::{
    CancellationToken, HandlerError,
    consume::{ConsumeHandler, Incoming},
};
use diesel_outbox_testkit::TestBackend;

use crate::broker::{Broker, Consuming};

/// How many messages the service applies at once, each in a transaction
/// of its own.
const CONCURRENCY: u16 = 8;

/// How long the shipping service may go without progress, while orders
/// are still unshipped, before the demo stops waiting and counts them lost.
const STALL: Duration = Duration::from_secs(15);

/// How long the broker must stay drained, with every order shipped, before
/// the service stops: time for the messages in the consumer's hands (which
/// RabbitMQ does not count) to be applied.
const SETTLE: Duration = Duration::from_millis(300);

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
    shutdown: CancellationToken,
    running: Consuming,
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
    /// consuming the demo's messages on `broker`.
    pub(crate) async fn start(broker: &Broker) -> anyhow::Result<Self> {
        let db = B::create("demo_shipping").await?;
        db.migrate_inbox().await?;
        db.execute_sql("CREATE TABLE shipments (order_id BIGINT NOT NULL)")
            .await?;
        let shutdown = CancellationToken::new();
        let running = broker
            .consume(db.store().clone(), Ship, CONCURRENCY, shutdown.clone())
            .await?;
        Ok(Self {
            db,
            shutdown,
            running,
        })
    }

    /// Waits until `broker` holds nothing for the service and all `orders`
    /// are shipped (or nothing moved for [`STALL`]), stops, and counts.
    pub(crate) async fn finish(
        self,
        broker: &Broker,
        orders: i64,
    ) -> anyhow::Result<ShippingSummary> {
        let Self {
            db,
            shutdown,
            running,
        } = self;
        let mut last = None;
        let mut since = Instant::now();
        while !running.is_finished() {
            let now = (broker.unconsumed().await?, shipped(&db).await?);
            if last != Some(now) {
                (last, since) = (Some(now), Instant::now());
            }
            let done = now == (0, orders);
            if (done && since.elapsed() >= SETTLE) || since.elapsed() >= STALL {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        shutdown.cancel();
        let report = running.await??;
        Ok(ShippingSummary {
            shipped: shipped(&db).await?,
            once: db
                .count(
                    "(SELECT order_id FROM shipments GROUP BY order_id HAVING COUNT(*) = 1) AS once",
                )
                .await?,
            duplicates: report.duplicates,
        })
    }
}

/// Distinct orders `db` has shipped so far.
async fn shipped(db: &impl TestBackend) -> anyhow::Result<i64> {
    db.count("(SELECT DISTINCT order_id FROM shipments) AS shipped")
        .await
}
