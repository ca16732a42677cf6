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
/// default names; a store with other names notifies on its tasks table's
/// name as its statements write it (`billing_outbox_tasks`,
/// `"billing".outbox_tasks`), so each outbox wakes only its own relays.
pub const CHANNEL: &str = "outbox_tasks";

/// `LISTEN` on the channel `enqueue` notifies on with `names`: the tasks
/// table's name as the notifying statement writes it, a bare identifier
/// (`LISTEN outbox_tasks`), or with a schema, whose quotes it holds, a quoted
/// one (`LISTEN """billing"".outbox_tasks"`).
fn listen_sql(names: &Names) -> String {
    let channel = names.render(CHANNEL);
    match channel.contains('"') {
        false => format!("LISTEN {channel}"),
        true => format!("LISTEN \"{}\"", channel.replace('"', "\"\"")),
    }
}

/// A stream that yields once per notification burst, on a connection taken
/// from `pool` for as long as the stream lives; it ends when the
/// connection fails.
pub(crate) async fn wakeups(pool: &Pool<AsyncPgConnection>, names: &Names) -> Result<Wakeups> {
    let mut conn = diesel_async::pooled_connection::deadpool::Object::take(
        pool.get().await.map_err(postgres_pool_error)?,
    );
    conn.batch_execute(&listen_sql(names))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_channel_is_the_one_the_notifying_statement_names() {
        assert_eq!(listen_sql(&Names::default()), "LISTEN outbox_tasks");
        let billing = Names::default().with_schema("billing").unwrap();
        assert_eq!(listen_sql(&billing), r#"LISTEN """billing"".outbox_tasks""#);
        assert_eq!(
            &*billing.sql(crate::statements::NOTIFY),
            r#"SELECT pg_notify('"billing".outbox_tasks', '')"#
        );
    }
}
