//! Handlers: [`HandlerKey`], the [`Handler`] trait, closures and [`HandlerError`].

use std::{fmt, future::Future, sync::Arc};

use async_trait::async_trait;

use crate::Delivery;

/// The `(kind, version)` pair a handler is registered for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandlerKey {
    /// The task kind.
    pub kind: String,
    /// The payload protocol version.
    pub version: i32,
}

impl HandlerKey {
    /// The key for `kind` at `version`.
    pub fn new(kind: impl Into<String>, version: i32) -> Self {
        Self {
            kind: kind.into(),
            version,
        }
    }
}

impl fmt::Display for HandlerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kind `{}` version {}", self.kind, self.version)
    }
}

/// Why a handler did not deliver: retry later, or give up.
///
/// `?` on any error inside a handler gives a retryable error; wrap an error
/// with [`HandlerError::permanent`] when retrying cannot help.
#[derive(Debug)]
pub struct HandlerError {
    permanent: bool,
    source: anyhow::Error,
}

impl HandlerError {
    /// A failure that another attempt may fix (the task waits for another attempt).
    pub fn retryable(error: impl Into<anyhow::Error>) -> Self {
        Self {
            permanent: false,
            source: error.into(),
        }
    }

    /// A failure no retry can fix (the task is marked failed).
    pub fn permanent(error: impl Into<anyhow::Error>) -> Self {
        Self {
            permanent: true,
            source: error.into(),
        }
    }

    /// Whether the task should be marked failed without further attempts.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// The underlying error.
    pub fn source_error(&self) -> &anyhow::Error {
        &self.source
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.source)
    }
}

impl<E: Into<anyhow::Error>> From<E> for HandlerError {
    fn from(error: E) -> Self {
        Self::retryable(error)
    }
}

/// Delivers one task: publishes it, calls a webhook, updates a projection...
///
/// Implement it for a type, or wrap an async closure with [`handler_fn`].
/// A handler should finish within the worker's handler timeout; it is cut
/// there and the attempt counts as a retryable failure.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Delivers `delivery`; `Ok` marks the task succeeded.
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError>;
}

#[async_trait]
impl<H: Handler + ?Sized> Handler for Arc<H> {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        (**self).handle(delivery).await
    }
}

/// A [`Handler`] made from an async closure; see [`handler_fn`].
#[derive(Clone)]
pub struct HandlerFn<F>(F);

impl<F> fmt::Debug for HandlerFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HandlerFn")
    }
}

/// Wraps `f` (a closure returning a future) as a [`Handler`].
///
/// ```
/// use diesel_outbox_core::{handler_fn, Delivery, HandlerError};
///
/// let handler = handler_fn(|delivery: Delivery| async move {
///     let order: serde_json::Value = delivery.json()?;
///     if order.get("id").is_none() {
///         return Err(HandlerError::permanent(anyhow::anyhow!("order without id")));
///     }
///     Ok(())
/// });
/// # let _ = handler;
/// ```
pub fn handler_fn<F, Fut>(f: F) -> HandlerFn<F>
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    HandlerFn(f)
}

#[async_trait]
impl<F, Fut> Handler for HandlerFn<F>
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        (self.0)(delivery).await
    }
}
