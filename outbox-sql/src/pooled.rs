//! [`with_conn`]: the one way a store takes a connection from its pool, so
//! that a caller who gives up mid-call (a dropped future) never leaves a
//! transaction, a lock or a statement behind on a pooled connection.

use deadpool::managed::{Manager, Pool, PoolError};
use diesel_async::pooled_connection::PoolableConnection;
use diesel_outbox_core::{DatabaseErrorKind, Error, Result, TxBody};

use crate::CloseUnlessReleased;

/// Runs `body` on a connection of `pool` and hands the connection back only
/// when `body` finished.
///
/// Dropped before that, at any await point (the caller's request was
/// cancelled, a timeout fired, a task was aborted), the future closes the
/// connection instead: the server rolls back whatever transaction was open
/// and frees every lock it held at once, rather than the connection waiting
/// in the pool, transaction open, until its next checkout. A connection
/// that `body` left unusable (inside a transaction whose rollback failed, or
/// with its transaction manager in error) is closed too, and so is one whose
/// work failed with a lost connection ([`DatabaseErrorKind::Connection`]):
/// a pool that hands connections out without a check would hand it out
/// again. Every operation of the stores goes through here, transactions
/// and single statements alike.
///
/// `pool_error` turns the pool's error into the outbox's (the backend's
/// classification).
pub async fn with_conn<M, C, T, F>(
    pool: &Pool<M>,
    pool_error: impl FnOnce(PoolError<M::Error>) -> Error,
    body: F,
) -> Result<T>
where
    M: Manager<Type = C>,
    C: PoolableConnection + 'static,
    F: for<'c> AsyncFnOnce(&'c mut C) -> Result<T> + Send,
    for<'c> F: TxBody<&'c mut C, Result<T>, Fut: Send>,
    T: Send,
{
    let mut guard = CloseUnlessReleased::new(pool.get().await.map_err(pool_error)?);
    let Some(conn) = guard.get() else {
        return Err(Error::Config {
            field: "pool",
            reason: "a released connection was used".into(),
        });
    };
    let result = body(conn).await;
    let lost = result
        .as_ref()
        .is_err_and(|error| error.database_kind() == Some(DatabaseErrorKind::Connection));
    if !lost && !conn.is_broken() {
        guard.release();
    }
    result
}
