//! Wake-ups at commit: a connection listening on the tasks table's channel
//! ([`CHANNEL`](crate::CHANNEL) by default) for the notifications enqueues
//! send when the store opted in to them.

use diesel_async::{AsyncPgConnection, SimpleAsyncConnection, pooled_connection::deadpool::Pool};
use diesel_outbox_core::{Result, Wakeups};
use diesel_outbox_sql::{Names, postgres_error, postgres_pool_error};
use futures_util::StreamExt;
use tokio::sync::mpsc;

/// The channel `enqueue` notifies on when the store opted in to `NOTIFY`
/// ([`with_notify`](diesel_outbox_sql::SqlStore::with_notify)), under the
/// default names; a store with a table prefix notifies on its tasks table's
/// name (`billing_outbox_tasks`), so each outbox wakes only its own relays.
pub const CHANNEL: &str = "outbox_tasks";

/// A stream that yields once per notification burst, on a connection taken
/// from `pool` for as long as the stream lives; it ends when the
/// connection fails.
pub(crate) async fn wakeups(pool: &Pool<AsyncPgConnection>, names: &Names) -> Result<Wakeups> {
    let mut conn = diesel_async::pooled_connection::deadpool::Object::take(
        pool.get().await.map_err(postgres_pool_error)?,
    );
    conn.batch_execute(&format!("LISTEN {}", names.table(CHANNEL)))
        .await
        .map_err(postgres_error)?;
    let (sender, receiver) = mpsc::channel::<()>(1);
    tokio::spawn(async move {
        let notifications = conn.notifications_stream();
        tokio::pin!(notifications);
        loop {
            tokio::select! {
                notification = notifications.next() => match notification {
                    // A full channel already holds a wake-up: coalesce.
                    Some(Ok(_)) => { let _ = sender.try_send(()); }
                    Some(Err(error)) => {
                        tracing::warn!(%error, "LISTEN connection failed");
                        break;
                    }
                    None => break,
                },
                () = sender.closed() => break,
            }
        }
    });
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|()| ((), receiver))
    });
    Ok(Box::pin(stream))
}
