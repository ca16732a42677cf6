//! A tiny order service on the transactional outbox.
//!
//! Placing an order inserts its row into `orders` and enqueues an
//! `order.created` task in the same database transaction. After the commit
//! the task is sent to the shipping handler; whatever is not delivered then
//! is retried later by `retry_pending` or a relay. If the order cannot be
//! inserted, nothing is enqueued and nothing is sent.
//!
//! ```no_run
//! use diesel_async::{AsyncConnection, AsyncPgConnection};
//! use order_service::{Order, OrderCreated, postgres, registry, shipping_handler};
//! use diesel_outbox_postgres::{PgStore, outbox::Worker};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let url = "postgres://postgres@127.0.0.1:5432/shop";
//! postgres::migrate(url).await?;
//!
//! // The shipping side listens on a channel, standing in for a broker.
//! let (to_shipping, mut shipping) = tokio::sync::mpsc::unbounded_channel();
//! let worker = Worker::new(PgStore::connect(url, 8)?, registry(shipping_handler(to_shipping))?)?;
//!
//! let mut conn = AsyncPgConnection::establish(url).await?;
//! let order = Order { id: 42, customer: "ada".into(), total_cents: 1999 };
//! postgres::place_order(&worker, &mut conn, &order).await?;
//!
//! assert_eq!(shipping.recv().await, Some(OrderCreated::of(&order)));
//! # Ok(())
//! # }
//! ```
//!
//! The guide in `docs/` is compiled here as doctests, one item per file.

use diesel_outbox_postgres::outbox::{
    self, Delivery, Handler, HandlerError, Registry, Task, handler_fn,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;

pub mod http;
pub mod mysql;
pub mod postgres;
pub mod schema;

/// The task kind announcing a new order.
pub const ORDER_CREATED: &str = "order.created";

/// The payload version of [`ORDER_CREATED`] this service writes and reads.
pub const ORDER_CREATED_VERSION: i32 = 1;

/// The identity of an order, chosen by the caller (an idempotency key of the
/// checkout, say), so placing the same order twice fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OrderId(pub i64);

/// An order as the service stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, diesel::Insertable)]
#[diesel(table_name = schema::orders)]
pub struct Order {
    /// The order's id (see [`OrderId`]).
    pub id: i64,
    /// Who placed it.
    pub customer: String,
    /// What it costs, in cents.
    pub total_cents: i64,
}

/// The JSON payload of an `order.created` task, version 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderCreated {
    /// The new order; consumers deduplicate on it (delivery is at least once).
    pub order_id: OrderId,
    /// Who placed it.
    pub customer: String,
    /// What it costs, in cents.
    pub total_cents: i64,
}

impl OrderCreated {
    /// The announcement of `order`.
    pub fn of(order: &Order) -> Self {
        Self {
            order_id: OrderId(order.id),
            customer: order.customer.clone(),
            total_cents: order.total_cents,
        }
    }
}

/// The `order.created` task for `order`, with the order id as a header so
/// logs and brokers can correlate without decoding the payload.
pub fn order_created_task(order: &Order) -> outbox::Result<Task> {
    Ok(Task::json(
        ORDER_CREATED,
        ORDER_CREATED_VERSION,
        &OrderCreated::of(order),
    )?
    .header("order-id", order.id.to_string()))
}

/// The handler that tells shipping about new orders, here through a channel.
///
/// A payload that does not decode never will, so that is a permanent error;
/// a closed channel may reopen after a restart, so that one is retried.
pub fn shipping_handler(shipping: UnboundedSender<OrderCreated>) -> impl Handler {
    handler_fn(move |delivery: Delivery| {
        let shipping = shipping.clone();
        async move {
            let created: OrderCreated = delivery.json()?;
            shipping
                .send(created)
                .map_err(|_| HandlerError::retryable(anyhow::anyhow!("shipping is not listening")))
        }
    })
}

/// The service's handler table: `handler` for `order.created` version 1.
pub fn registry(handler: impl Handler) -> outbox::Result<Registry> {
    Registry::builder()
        .handler(ORDER_CREATED, ORDER_CREATED_VERSION, handler)
        .build()
}

/// `docs/README.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/README.md")]
pub struct GuideIndex;

/// `docs/getting-started.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/getting-started.md")]
pub struct GettingStarted;

/// `docs/semantics.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/semantics.md")]
pub struct Semantics;

/// `docs/operations.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/operations.md")]
pub struct Operations;

/// `docs/consuming.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/consuming.md")]
pub struct Consuming;

/// `docs/kafka.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/kafka.md")]
pub struct Kafka;

/// `docs/redis.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/redis.md")]
pub struct Redis;

/// `docs/scaling.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/scaling.md")]
pub struct Scaling;

/// `docs/testing.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/testing.md")]
pub struct Testing;

/// `docs/coming-from-go.md`, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/coming-from-go.md")]
pub struct ComingFromGo;
