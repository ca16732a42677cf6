//! The caller's transaction: checking for one, and running one that sends
//! after commit, on the caller's connection or on one of a pool's.

use std::future::Future;

use deadpool::managed::Pool;
use diesel_async::{AsyncConnection, TransactionManager, pooled_connection::PoolableConnection};
use diesel_outbox_core::{Error, Result, Store, Tx, TxBody, Worker};

use crate::{CloseUnlessReleased, Dialect, SqlStore, Transact, WriteTurn};

/// A store on one of the outbox's SQL backends: [`SqlStore`], whatever its
/// [`Dialect`]. What [`transaction`] and [`transaction_pooled`] accept.
pub trait SqlBacked: Store<Conn = <Self::Dialect as Dialect>::Conn> {
    /// The backend.
    type Dialect: Dialect;

    /// The store's turn to write, where its backend has one
    /// ([`Dialect::write_turn`]).
    fn turn(&self) -> Option<&WriteTurn>;
}

impl<D: Dialect> SqlBacked for SqlStore<D> {
    type Dialect = D;

    fn turn(&self) -> Option<&WriteTurn> {
        self.dialect().write_turn()
    }
}

/// Fails with [`Error::NotTransaction`] unless `conn` is inside a transaction
/// opened through diesel-async (`conn.transaction(...)`).
pub fn require_transaction<C: AsyncConnection>(conn: &mut C) -> Result<()> {
    match C::TransactionManager::transaction_manager_status_mut(conn).transaction_depth() {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Error::NotTransaction),
        Err(e) => Err(crate::error::any_backend_error(e)),
    }
}

/// The caller's connection while the helper's transaction is open on it.
///
/// Dropped before [`disarm`](Self::disarm) (the helper's future was dropped
/// mid-transaction), it puts the connection's transaction manager in its
/// error state: diesel-async then refuses every later transaction on the
/// connection (`BrokenTransactionManager`) instead of opening it as a
/// savepoint inside the abandoned one, where it could never commit, and a
/// pool discards the connection at its next checkout. The connection itself
/// is the caller's and stays open, with the abandoned transaction, until the
/// caller drops it: [`transaction_pooled`] closes it at once instead.
#[derive(Debug)]
pub struct AbandonGuard<'c, C: AsyncConnection> {
    conn: &'c mut C,
    armed: bool,
}

impl<'c, C: AsyncConnection> AbandonGuard<'c, C> {
    /// Guards `conn` until [`disarm`](Self::disarm).
    pub fn new(conn: &'c mut C) -> Self {
        Self { conn, armed: true }
    }

    /// The connection, for the transaction.
    pub fn conn(&mut self) -> &mut C {
        self.conn
    }

    /// The transaction ended (committed or rolled back): nothing to mark.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl<C: AsyncConnection> Drop for AbandonGuard<'_, C> {
    fn drop(&mut self) {
        if self.armed {
            C::TransactionManager::transaction_manager_status_mut(self.conn).set_in_error();
        }
    }
}

/// Runs `body` in a transaction on `conn`; after it commits, every task the
/// body enqueued through its [`Tx`] is sent with [`Worker::send_async`].
///
/// The transaction is the backend's kind for writers: `BEGIN IMMEDIATE` on
/// SQLite (see `diesel_outbox_sqlite` for why), a plain one on PostgreSQL
/// and MySQL. If the body fails or the commit fails, everything rolls back
/// and nothing is sent. A send that fails after commit is retried by the
/// next round.
///
/// On SQLite the transaction first waits for the store's turn to write
/// ([`SqlStore::write_turn`]), which every write of the store queues for
/// too, and holds it until it ends: the process's writers then take the
/// database's one lock in turn instead of polling for it. The wait is
/// bounded like SQLite's own (5 s): past it, the helper fails as a
/// `BEGIN IMMEDIATE` that waited out its busy timeout does, with
/// `database is locked` (the message goes on to say the wait was for the
/// process's turn). So the body must not call a store write (a claim,
/// `send`, `retry_pending`) nor another of these helpers, and neither
/// may an inbox handler, which runs in the inbox's write transaction: it
/// would wait for the turn held around it, and fail after those 5 s.
///
/// Dropped before the transaction ended, the future leaves `conn` marked
/// broken ([`AbandonGuard`]): diesel-async refuses any later transaction on
/// it and a pool discards it at its next checkout. It keeps the abandoned
/// transaction until then, with its locks (SQLite's write lock, which the
/// next writer in the turn then waits for, up to 5 s): in a handler that
/// may be cancelled, prefer [`transaction_pooled`], which closes its
/// connection at once.
///
/// The future is `Send` and borrows only `worker`, `conn` and what `body`
/// captures, so it runs inside `tokio::spawn`, and so inside an axum or tonic
/// handler.
///
/// ```no_run
/// use diesel_outbox_core::{Task, Worker};
/// use diesel_outbox_sql::{SqlBacked, transaction};
///
/// # async fn demo<S: SqlBacked>(worker: Worker<S>, conn: &mut S::Conn) -> anyhow::Result<()> {
/// let order_id = transaction(&worker, conn, async |mut tx| {
///     // diesel::insert_into(orders::table)...execute(tx.conn()).await?;
///     tx.enqueue(Task::json("order.created", 1, &serde_json::json!({ "order": 42 }))?)
///         .await?;
///     anyhow::Ok(42)
/// })
/// .await?;
/// # let _ = order_id;
/// # Ok(())
/// # }
/// ```
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would leave its future's Send to inference at each caller (rust-lang/rust#100013)"
)]
pub fn transaction<'a, S, R, E, F>(
    worker: &'a Worker<S>,
    conn: &'a mut S::Conn,
    body: F,
) -> impl Future<Output = std::result::Result<R, E>> + Send + 'a
where
    S: SqlBacked,
    for<'r> F: AsyncFnOnce(Tx<'r, S>) -> std::result::Result<R, E>
        + TxBody<Tx<'r, S>, std::result::Result<R, E>, Fut: Send>
        + Send
        + 'a,
    E: From<diesel::result::Error> + Send + 'a,
    R: Send + 'a,
{
    async move {
        let mut enqueued = Vec::new();
        let store = worker.store();
        let turn = WriteTurn::take_for_diesel(store.turn()).await?;
        let mut guard = AbandonGuard::new(conn);
        let value =
            Transact::<S::Dialect>::write_transaction::<R, E, _>(guard.conn(), async |conn| {
                body(Tx::new(conn, store, &mut enqueued)).await
            })
            .await;
        guard.disarm();
        drop(turn);
        let value = value?;
        for id in enqueued {
            worker.send_async(id);
        }
        Ok(value)
    }
}

/// [`transaction`] on a connection taken from `pool` for this transaction
/// alone: dropped before the transaction ended (a client that disconnects
/// cancels an axum handler, say), the future closes that connection, so the
/// database rolls the transaction back and frees its locks at once. The way
/// to enqueue from a request handler that may be cancelled when its client
/// goes away. A failure to get a connection comes back as `E::from(Error)`.
/// After a transaction that failed, the connection goes back to the pool
/// only if it still answers a `SELECT 1`: the failure may have been its
/// session ending, and a pool that hands connections out unchecked would
/// hand it out again.
///
/// On SQLite it takes the store's turn to write, as [`transaction`] does,
/// once it has its connection, in the order the store's own writes take
/// them.
///
/// ```no_run
/// use deadpool::managed::Pool;
/// use diesel_outbox_core::{Task, Worker};
/// use diesel_outbox_sql::{Dialect, SqlBacked, transaction_pooled};
///
/// # async fn demo<S: SqlBacked>(worker: Worker<S>, pool: Pool<<S::Dialect as Dialect>::Manager>) -> anyhow::Result<()> {
/// transaction_pooled(&worker, &pool, async |mut tx| {
///     // diesel::insert_into(orders::table)...execute(tx.conn()).await?;
///     tx.enqueue(Task::json("order.created", 1, &serde_json::json!({ "order": 42 }))?)
///         .await?;
///     anyhow::Ok(())
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would leave its future's Send to inference at each caller (rust-lang/rust#100013)"
)]
pub fn transaction_pooled<'a, S, R, E, F>(
    worker: &'a Worker<S>,
    pool: &'a Pool<<S::Dialect as Dialect>::Manager>,
    body: F,
) -> impl Future<Output = std::result::Result<R, E>> + Send + 'a
where
    S: SqlBacked,
    for<'r> F: AsyncFnOnce(Tx<'r, S>) -> std::result::Result<R, E>
        + TxBody<Tx<'r, S>, std::result::Result<R, E>, Fut: Send>
        + Send
        + 'a,
    E: From<diesel::result::Error> + From<Error> + Send + 'a,
    R: Send + 'a,
{
    async move {
        let conn = pool
            .get()
            .await
            .map_err(|e| E::from(S::Dialect::pool_error(e)))?;
        let mut guard = CloseUnlessReleased::new(conn);
        let store = worker.store();
        let turn = match WriteTurn::take_for_diesel(store.turn()).await {
            Ok(turn) => turn,
            Err(late) => {
                // Nothing ran on the connection: it goes back as it came.
                guard.release();
                return Err(E::from(late));
            }
        };
        let Some(conn) = guard.get() else {
            return Err(E::from(Error::Config {
                field: "pool",
                reason: "a released connection was used".into(),
            }));
        };
        let mut enqueued = Vec::new();
        let value = Transact::<S::Dialect>::write_transaction::<R, E, _>(conn, async |conn| {
            body(Tx::new(conn, store, &mut enqueued)).await
        })
        .await;
        drop(turn);
        // A transaction that failed may have lost its connection, which a
        // pool that hands connections out unchecked would hand out again:
        // after a failure the connection goes back only if it still answers.
        let answers = value.is_ok() || crate::pool::still_answers(conn).await.is_ok();
        if answers && !conn.is_broken() {
            guard.release();
        }
        let value = value?;
        for id in enqueued {
            worker.send_async(id);
        }
        Ok(value)
    }
}
