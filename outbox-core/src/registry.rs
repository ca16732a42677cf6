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
    /// Each registered kind's metric keys, built once, and its handlers by
    /// version: what an attempt looks up, in one lookup by the kind's text.
    kinds: Arc<HashMap<String, Kind>>,
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
        self.resolve(kind, 0).1
    }

    /// The handler of `kind` at `version`, if any, and the metric keys of
    /// `kind` (as [`kind_keys`](Self::kind_keys)), found with one lookup
    /// and no copy of the kind.
    pub(crate) fn resolve(&self, kind: &str, version: i32) -> (Option<&Handling>, Arc<KindKeys>) {
        match self.kinds.get(kind) {
            Some(known) => (
                known
                    .versions
                    .iter()
                    .find(|(registered, _)| *registered == version)
                    .map(|(_, handling)| handling),
                Arc::clone(&known.keys),
            ),
            None => (None, Arc::new(KindKeys::new(kind))),
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

/// A registered kind: its metric keys and its handlers by version.
#[derive(Clone)]
struct Kind {
    keys: Arc<KindKeys>,
    versions: Vec<(i32, Handling)>,
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
        let mut kinds: HashMap<String, Kind> = HashMap::new();
        for (key, handling) in &self.handlers {
            kinds
                .entry(key.kind.clone())
                .or_insert_with(|| Kind {
                    keys: Arc::new(KindKeys::new(&key.kind)),
                    versions: Vec::new(),
                })
                .versions
                .push((key.version, handling.clone()));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Delivery, handler_fn};

    #[test]
    fn one_lookup_finds_the_version_and_the_kinds_metric_keys() -> Result<()> {
        let registry = Registry::builder()
            .handler(
                "order.created",
                1,
                handler_fn(|_: Delivery| async { Ok(()) }),
            )
            .batch_handler(
                "order.created",
                2,
                crate::batch_handler_fn(|deliveries: Vec<Delivery>| async move {
                    deliveries.iter().map(|_| Ok(())).collect()
                }),
            )
            .build()?;
        let (one, keys) = registry.resolve("order.created", 1);
        assert!(matches!(one, Some(Handling::One(_))));
        let (batch, same_keys) = registry.resolve("order.created", 2);
        assert!(matches!(batch, Some(Handling::Batch(_))));
        assert!(Arc::ptr_eq(&keys, &same_keys), "one set of keys per kind");
        let (missing, kind_keys) = registry.resolve("order.created", 3);
        assert!(missing.is_none());
        assert!(Arc::ptr_eq(&keys, &kind_keys));
        assert!(registry.resolve("order.cancelled", 1).0.is_none());
        assert_eq!(
            registry
                .get(&HandlerKey::new("order.created", 2))
                .map(Handling::is_batch),
            Some(true)
        );
        Ok(())
    }
}
