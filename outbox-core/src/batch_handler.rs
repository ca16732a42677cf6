//! Handlers that take many deliveries at once: [`BatchHandler`],
//! [`batch_handler_fn`], and [`Handling`], which says how a registered
//! kind is handled.

use std::{fmt, future::Future, sync::Arc};

use async_trait::async_trait;

use crate::{Delivery, Handler, HandlerError};

/// Delivers the tasks of one `(kind, version)` together: publishes them with
/// their acknowledgements in flight, writes them in one request, ...
///
/// The relay hands a batch handler every task of its kind that one claim
/// took (at most the relay's `batch_size`), in one call, instead of one
/// handler call per delivery; [`Worker::send`](crate::Worker::send) hands it
/// a batch of one. It answers one result per delivery, in the order given:
/// `Ok` marks that task succeeded, an error retries or fails that task
/// alone, so a partial failure fails only its own tasks. A delivery without
/// an answer (fewer answers than deliveries) is retried.
///
/// The whole call shares the worker's handler timeout: cut there, or if it
/// panics, every delivery of the batch is retried. Each delivery holds its
/// own claim and keeps its ordering key: a batch never holds two tasks of
/// one key, as only a key's oldest open task is ever claimed. Under a relay
/// each delivery takes one of the worker's `concurrency` slots; in a round
/// (`retry_pending`) a batch counts as one of its concurrent calls.
#[async_trait]
pub trait BatchHandler: Send + Sync + 'static {
    /// Delivers `deliveries`; answers one result per delivery, in order.
    async fn handle_batch(&self, deliveries: Vec<Delivery>) -> Vec<Result<(), HandlerError>>;
}

#[async_trait]
impl<H: BatchHandler + ?Sized> BatchHandler for Arc<H> {
    async fn handle_batch(&self, deliveries: Vec<Delivery>) -> Vec<Result<(), HandlerError>> {
        (**self).handle_batch(deliveries).await
    }
}

/// A [`BatchHandler`] made from an async closure; see [`batch_handler_fn`].
#[derive(Clone)]
pub struct BatchHandlerFn<F>(F);

impl<F> fmt::Debug for BatchHandlerFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BatchHandlerFn")
    }
}

/// Wraps `f` (a closure taking the deliveries and returning a future of
/// one result per delivery) as a [`BatchHandler`].
///
/// ```
/// use diesel_outbox_core::{batch_handler_fn, Delivery, HandlerError, Registry};
///
/// let registry = Registry::builder()
///     .batch_handler(
///         "order.created",
///         1,
///         batch_handler_fn(|deliveries: Vec<Delivery>| async move {
///             // One request for the whole batch, then one answer each.
///             deliveries
///                 .iter()
///                 .map(|delivery| match delivery.task.payload.is_empty() {
///                     true => Err(HandlerError::permanent(anyhow::anyhow!("empty payload"))),
///                     false => Ok(()),
///                 })
///                 .collect()
///         }),
///     )
///     .build()?;
/// assert_eq!(registry.len(), 1);
/// # Ok::<(), diesel_outbox_core::Error>(())
/// ```
pub fn batch_handler_fn<F, Fut>(f: F) -> BatchHandlerFn<F>
where
    F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<Result<(), HandlerError>>> + Send + 'static,
{
    BatchHandlerFn(f)
}

#[async_trait]
impl<F, Fut> BatchHandler for BatchHandlerFn<F>
where
    F: Fn(Vec<Delivery>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<Result<(), HandlerError>>> + Send + 'static,
{
    async fn handle_batch(&self, deliveries: Vec<Delivery>) -> Vec<Result<(), HandlerError>> {
        (self.0)(deliveries).await
    }
}

/// How the tasks of a registered `(kind, version)` are handled: what
/// [`Registry::get`](crate::Registry::get) returns.
#[derive(Clone)]
pub enum Handling {
    /// One delivery per call.
    One(Arc<dyn Handler>),
    /// The deliveries of one claim together, in one call.
    Batch(Arc<dyn BatchHandler>),
}

impl Handling {
    /// Whether deliveries go to the handler in batches.
    pub fn is_batch(&self) -> bool {
        matches!(self, Self::Batch(_))
    }
}

impl fmt::Debug for Handling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::One(_) => "Handling::One",
            Self::Batch(_) => "Handling::Batch",
        })
    }
}
