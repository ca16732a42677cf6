//! What the demo's order.created handler does: record (or publish) the
//! delivery, failing now and then like a real downstream.

use std::sync::Arc;

use diesel_outbox_core::{Delivery, Handler, HandlerError, handler_fn};

use crate::{broker::Publisher, raw::Raw};

/// The kind the order service enqueues.
pub(crate) const ORDER_CREATED: &str = "order.created";

/// A handler that fails `failure_percent` of its calls (retryably), and
/// otherwise records the delivery in `deliveries`, after publishing it to
/// the broker when a publisher is given.
pub(crate) fn order_created<B: Raw>(
    db: Arc<B>,
    failure_percent: u8,
    publisher: Option<Publisher>,
) -> impl Handler {
    handler_fn(move |delivery: Delivery| {
        let db = Arc::clone(&db);
        let publisher = publisher.clone();
        async move {
            if fastrand::u8(..100) < failure_percent {
                return Err(HandlerError::retryable(anyhow::anyhow!(
                    "shipping is briefly unavailable"
                )));
            }
            let duplicate = match &publisher {
                Some(publisher) => publisher.publish(&delivery).await?,
                None => false,
            };
            db.execute_sql(&format!(
                "INSERT INTO deliveries (task_id, attempt, duplicate, delivered_at) \
                 VALUES ({}, {}, {}, {})",
                delivery.id,
                delivery.attempt,
                if duplicate { 1 } else { 0 },
                B::NOW
            ))
            .await?;
            Ok(())
        }
    })
}

/// The demo's worker: the order.created handler (failing
/// [`FAILURE_PERCENT`](super::settings::FAILURE_PERCENT) of its calls) on
/// `db`'s store, under `owner`.
pub(crate) fn worker<B: Raw>(
    db: &Arc<B>,
    owner: &str,
    publisher: Option<Publisher>,
) -> anyhow::Result<diesel_outbox_core::Worker<B::Store>> {
    let handler = order_created(Arc::clone(db), super::settings::FAILURE_PERCENT, publisher);
    let registry = diesel_outbox_core::Registry::builder()
        .handler(ORDER_CREATED, 1, handler)
        .build()?;
    Ok(diesel_outbox_core::Worker::with_config(
        db.store().clone(),
        registry,
        super::settings::worker(owner),
    )?)
}
