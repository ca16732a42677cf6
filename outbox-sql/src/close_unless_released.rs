//! [`CloseUnlessReleased`]: a pooled connection (deadpool's, as diesel-async
//! pools them) that an abandoned
//! transaction does not hand back to its pool.

use deadpool::managed::{Manager, Object};

/// A pooled connection that goes back to its pool only through
/// [`release`](CloseUnlessReleased::release). Dropped before that (its
/// transaction abandoned by a timeout or a panic), the connection is closed
/// at once: the server rolls its transaction back and frees its locks,
/// instead of the connection waiting in the pool, transaction open and locks
/// held, until its next checkout.
pub struct CloseUnlessReleased<M: Manager>(Option<Object<M>>);

impl<M: Manager> std::fmt::Debug for CloseUnlessReleased<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CloseUnlessReleased")
    }
}

impl<M: Manager> CloseUnlessReleased<M> {
    /// Guards `conn`.
    pub fn new(conn: Object<M>) -> Self {
        Self(Some(conn))
    }

    /// The connection; `None` only after [`release`](Self::release).
    pub fn get(&mut self) -> Option<&mut M::Type> {
        self.0.as_deref_mut()
    }

    /// Hands the connection back to its pool.
    pub fn release(mut self) {
        drop(self.0.take());
    }
}

impl<M: Manager> Drop for CloseUnlessReleased<M> {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            drop(Object::take(conn));
        }
    }
}
