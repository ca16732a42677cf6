//! The handler table: [`Registry`], built once, duplicates rejected.

use std::{
    collections::{HashMap, hash_map::Entry},
    fmt,
    sync::Arc,
};

use crate::{Error, Handler, HandlerKey, Result};

/// Maps each `(kind, version)` to its handler. Immutable once built.
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
    handlers: Arc<HashMap<HandlerKey, Arc<dyn Handler>>>,
}

impl Registry {
    /// Starts an empty registry.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// The handler for `key`, if one is registered.
    pub fn get(&self, key: &HandlerKey) -> Option<&Arc<dyn Handler>> {
        self.handlers.get(key)
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
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("keys", &self.keys())
            .finish()
    }
}

/// Collects handlers for a [`Registry`]; [`build`](RegistryBuilder::build)
/// rejects a key registered twice.
#[derive(Default)]
pub struct RegistryBuilder {
    handlers: HashMap<HandlerKey, Arc<dyn Handler>>,
    duplicate: Option<HandlerKey>,
}

impl RegistryBuilder {
    /// Registers `handler` for `kind` at `version`.
    pub fn handler(mut self, kind: impl Into<String>, version: i32, handler: impl Handler) -> Self {
        match self.handlers.entry(HandlerKey::new(kind, version)) {
            Entry::Occupied(entry) => {
                self.duplicate.get_or_insert_with(|| entry.key().clone());
            }
            Entry::Vacant(entry) => {
                entry.insert(Arc::new(handler));
            }
        }
        self
    }

    /// Builds the registry, or names the first key registered twice.
    pub fn build(self) -> Result<Registry> {
        if let Some(key) = self.duplicate {
            return Err(Error::DuplicateHandler(key));
        }
        Ok(Registry {
            handlers: Arc::new(self.handlers),
        })
    }
}

impl fmt::Debug for RegistryBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryBuilder")
            .field("handlers", &self.handlers.len())
            .finish()
    }
}
