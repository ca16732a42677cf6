//! The handler table: [`Registry`], built once, duplicates rejected; and the
//! failure hook beside it.

use std::{
    collections::{HashMap, hash_map::Entry},
    fmt,
    future::Future,
    sync::Arc,
};

use crate::{
    BatchHandler, Error, Handler, HandlerKey, Handling, OnFailed, Record, Result,
    telemetry::KindKeys,
};

/// Maps each `(kind, version)` to its handler, one delivery per call
/// ([`handler`](RegistryBuilder::handler)) or many
/// ([`batch_handler`](RegistryBuilder::batch_handler)). Immutable once
/// built.
///
/// ```
/// use diesel_outbox_core::{handler_fn, Delivery, Registry};
///
/// let registry = Registry::builder()
///     .handler("order.created", 1, handler_fn(|_: Delivery| async { Ok(()) }))
///     .handler("order.created", 2, handler_fn(|_: Delivery| async { Ok(()) }))
///     .build()?;
/// assert_eq!(registry.len(), 2);
///
/// let duplicate = Registry::builder()
///     .handler("order.created", 1, handler_fn(|_: Delivery| async { Ok(()) }))
///     .handler("order.created", 1, handler_fn(|_: Delivery| async { Ok(()) }))
///     .build();
/// assert!(matches!(duplicate, Err(diesel_outbox_core::Error::DuplicateHandler(_))));
/// # Ok::<(), diesel_outbox_core::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    handlers: Arc<HashMap<HandlerKey, Handling>>,
    /// The metric keys of each registered kind, built once.
    kinds: Arc<HashMap<String, Arc<KindKeys>>>,
    /// Whether any handler takes batches.
    batched: bool,
    on_failed: Option<OnFailed>,
}

impl Registry {
    /// Starts an empty registry.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// The handler for `key`, if one is registered, and how it takes its
    /// deliveries.
    pub fn get(&self, key: &HandlerKey) -> Option<&Handling> {
        self.handlers.get(key)
    }

    /// The metric keys labelled with `kind`: built with the registry for
    /// a registered kind, built here for any other (whose tasks fail for
    /// want of a handler).
    pub(crate) fn kind_keys(&self, kind: &str) -> Arc<KindKeys> {
        match self.kinds.get(kind) {
            Some(keys) => Arc::clone(keys),
            None => Arc::new(KindKeys::new(kind)),
        }
    }

    /// Whether any kind is registered with a batch handler.
    pub(crate) fn has_batch_handlers(&self) -> bool {
        self.batched
    }

    /// The registered keys, sorted.
    pub fn keys(&self) -> Vec<HandlerKey> {
        let mut keys: Vec<_> = self.handlers.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// How many handlers are registered.
    pub fn len(&self) -> usize {
        self.handlers.len()
    }

    /// Whether no handler is registered.
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    /// The failure hook, if one is registered.
    pub fn on_failed(&self) -> Option<&OnFailed> {
        self.on_failed.as_ref()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("keys", &self.keys())
            .field("on_failed", &self.on_failed.is_some())
            .finish()
    }
}

/// Collects handlers for a [`Registry`]; [`build`](RegistryBuilder::build)
/// rejects a key registered twice.
#[derive(Default)]
pub struct RegistryBuilder {
    handlers: HashMap<HandlerKey, Handling>,
    duplicate: Option<HandlerKey>,
    on_failed: Option<OnFailed>,
}

impl RegistryBuilder {
    /// Registers `handler` for `kind` at `version`: one delivery per call.
    pub fn handler(self, kind: impl Into<String>, version: i32, handler: impl Handler) -> Self {
        self.register(kind, version, Handling::One(Arc::new(handler)))
    }

    /// Registers `handler` for `kind` at `version`: the deliveries of one
    /// claim together, in one call (see [`BatchHandler`]). A kind has one
    /// handler, of either sort.
    pub fn batch_handler(
        self,
        kind: impl Into<String>,
        version: i32,
        handler: impl BatchHandler,
    ) -> Self {
        self.register(kind, version, Handling::Batch(Arc::new(handler)))
    }

    /// Registers `handler` as the batch handler of every key of `keys` (a
    /// publisher's routed kinds and versions).
    pub fn batch_handler_for<'a, H: BatchHandler + Clone>(
        self,
        keys: impl IntoIterator<Item = &'a HandlerKey>,
        handler: &H,
    ) -> Self {
        keys.into_iter().fold(self, |registry, key| {
            registry.batch_handler(key.kind.clone(), key.version, handler.clone())
        })
    }

    fn register(mut self, kind: impl Into<String>, version: i32, handling: Handling) -> Self {
        match self.handlers.entry(HandlerKey::new(kind, version)) {
            Entry::Occupied(entry) => {
                self.duplicate.get_or_insert_with(|| entry.key().clone());
            }
            Entry::Vacant(entry) => {
                entry.insert(handling);
            }
        }
        self
    }

    /// Registers the failure hook: `hook` is called once with the record of
    /// each task that fails for good, whatever its kind (a permanent error,
    /// its attempts used up, its deadline passed), after the write that
    /// failed it committed. It runs in a tokio task of its own; a panic in it
    /// is caught and logged, and never stops delivery. A second call replaces
    /// the first hook.
    ///
    /// ```
    /// use diesel_outbox_core::{Record, Registry};
    ///
    /// let (dead_letters, _inbox) = tokio::sync::mpsc::unbounded_channel::<Record>();
    /// let registry = Registry::builder()
    ///     .on_failed(move |record: Record| {
    ///         let dead_letters = dead_letters.clone();
    ///         async move {
    ///             // Route the dead letter on, or raise an alert.
    ///             let _ = dead_letters.send(record);
    ///         }
    ///     })
    ///     .build()?;
    /// assert!(registry.on_failed().is_some());
    /// # Ok::<(), diesel_outbox_core::Error>(())
    /// ```
    pub fn on_failed<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Record) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.on_failed = Some(OnFailed::new(hook));
        self
    }

    /// Builds the registry, or names the first key registered twice.
    pub fn build(self) -> Result<Registry> {
        if let Some(key) = self.duplicate {
            return Err(Error::DuplicateHandler(key));
        }
        let kinds = self
            .handlers
            .keys()
            .map(|key| (key.kind.clone(), Arc::new(KindKeys::new(&key.kind))))
            .collect();
        let batched = self.handlers.values().any(Handling::is_batch);
        Ok(Registry {
            batched,
            handlers: Arc::new(self.handlers),
            kinds: Arc::new(kinds),
            on_failed: self.on_failed,
        })
    }
}

impl fmt::Debug for RegistryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryBuilder")
            .field("handlers", &self.handlers.len())
            .field("on_failed", &self.on_failed.is_some())
            .finish()
    }
}
