//! Where a kind's messages go: [`Route`], an exchange and a routing key.

use lapin::types::ShortString;

/// How a message's routing key is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoutingKey {
    /// The same key for every message of the kind.
    Fixed(String),
    /// The task's ordering key (for a consistent-hash exchange, or one
    /// queue per key), or `fallback` for a task without one.
    OrderingKey {
        /// The key of a task without an ordering key.
        fallback: String,
    },
}

/// The exchange and routing key of one `(kind, version)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The exchange (`""` is the default exchange, which routes by queue
    /// name).
    pub exchange: String,
    /// How the routing key is chosen.
    pub routing_key: RoutingKey,
}

impl Route {
    /// The routing key of a task with `ordering_key`; `None` when it is
    /// longer than AMQP carries (255 bytes).
    pub(crate) fn key_for(&self, ordering_key: Option<&str>) -> Option<ShortString> {
        let key = match (&self.routing_key, ordering_key) {
            (RoutingKey::Fixed(key), _) => key.as_str(),
            (RoutingKey::OrderingKey { .. }, Some(key)) => key,
            (RoutingKey::OrderingKey { fallback }, None) => fallback.as_str(),
        };
        ShortString::try_new(key).ok()
    }

    /// Why the route cannot be used, if it cannot: a name longer than AMQP
    /// carries.
    pub(crate) fn check(&self) -> Result<(), String> {
        let fixed = match &self.routing_key {
            RoutingKey::Fixed(key) => key,
            RoutingKey::OrderingKey { fallback } => fallback,
        };
        for (what, name) in [("exchange", &self.exchange), ("routing key", fixed)] {
            if ShortString::try_new(name.as_str()).is_err() {
                return Err(format!("the {what} `{name}` is longer than 255 bytes"));
            }
        }
        Ok(())
    }
}
