//! Enqueue-then-send in one call: [`Tx`], the handle a transaction body gets.
//!
//! Backends wrap their own transaction API around it (for example
//! `diesel_outbox_postgres::transaction`): the body enqueues through the [`Tx`], and
//! only after the commit succeeded are the collected ids sent. Sending before
//! commit cannot be written, because the ids are not handed out until then.

use std::future::Future;

use crate::{Result, Store, Task, TaskId};

/// The caller's connection inside an open transaction, plus the outbox.
#[derive(Debug)]
pub struct Tx<'r, S: Store> {
    conn: &'r mut S::Conn,
    store: &'r S,
    enqueued: &'r mut Vec<TaskId>,
}

impl<'r, S: Store> Tx<'r, S> {
    /// Wraps a connection that is inside a transaction. Backends call this;
    /// `enqueued` collects the ids to send after commit.
    pub fn new(conn: &'r mut S::Conn, store: &'r S, enqueued: &'r mut Vec<TaskId>) -> Self {
        Self {
            conn,
            store,
            enqueued,
        }
    }

    /// The connection, for the business statements of the same transaction.
    pub fn conn(&mut self) -> &mut S::Conn {
        self.conn
    }

    /// Enqueues `task` in this transaction; it is sent after commit.
    pub async fn enqueue(&mut self, task: Task) -> Result<TaskId> {
        let id = self.store.enqueue(self.conn, task).await?;
        self.enqueued.push(id);
        Ok(id)
    }

    /// Enqueues several tasks in one statement; they are sent after commit.
    pub async fn enqueue_many(&mut self, tasks: Vec<Task>) -> Result<Vec<TaskId>> {
        let ids = self.store.enqueue_many(self.conn, tasks).await?;
        self.enqueued.extend_from_slice(&ids);
        Ok(ids)
    }
}

/// An async closure taking `T` whose future's type can be named, so that
/// backends can require it to be `Send` (the same device diesel-async uses for
/// its own transactions). Implemented for every such closure; never
/// implement it yourself.
pub trait TxBody<T, R>: AsyncFnOnce(T) -> R + FnOnce(T) -> <Self as TxBody<T, R>>::Fut {
    /// The closure's future.
    type Fut: Future<Output = R>;
}

impl<F, T, Fut, R> TxBody<T, R> for F
where
    F: AsyncFnOnce(T) -> R + FnOnce(T) -> Fut,
    Fut: Future<Output = R>,
{
    type Fut = Fut;
}
