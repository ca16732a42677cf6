//! [`MigrationLock`]: the session lock that keeps migration runs on one
//! database from overlapping.

use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_outbox_core::Result;

/// The blocking connection migrations run on: diesel's migration harness is
/// synchronous, so it drives the caller's async connection through this
/// wrapper on tokio's blocking pool.
pub type MigrationConnection<C> = AsyncConnectionWrapper<C>;

/// A lock held by one session for a whole migration run, so that runs
/// started at once on one database (one per instance, say) take turns
/// instead of creating the same table twice.
///
/// It is taken and released on the connection the migrations run on, from a
/// thread of tokio's blocking pool, so both methods may block. Each backend
/// implements it with its session-level lock: an advisory lock on
/// PostgreSQL, `GET_LOCK` on MySQL/MariaDB.
pub trait MigrationLock<C>: Send + 'static {
    /// Waits until this session holds the lock; an error if it cannot be had.
    fn acquire(&mut self, conn: &mut C) -> Result<()>;

    /// Releases the lock [`MigrationLock::acquire`] took.
    fn release(&mut self, conn: &mut C) -> Result<()>;
}
