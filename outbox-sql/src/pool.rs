//! The connection pool a store claims and completes on.

use std::time::Duration;

use deadpool::managed::{Hook, HookError};
use diesel_async::{
    AsyncConnection,
    pooled_connection::{AsyncDieselConnectionManager, ManagerConfig, deadpool::Pool},
};
use diesel_outbox_core::{Error, Result};

/// How long a connection's check (`SELECT 1`) may take before it counts as
/// lost and is closed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `conn` answers `SELECT 1` within [`CHECK_TIMEOUT`]; if not, why
/// (bounded, so a connection a failover left half open fails the check
/// instead of holding its caller until TCP gives up).
pub(crate) async fn still_answers<C: AsyncConnection>(
    conn: &mut C,
) -> std::result::Result<(), String> {
    match tokio::time::timeout(CHECK_TIMEOUT, conn.batch_execute("SELECT 1")).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(format!("failed its check: {error}")),
        Err(_) => Err(format!(
            "gave no answer to its check within {CHECK_TIMEOUT:?}"
        )),
    }
}

/// A deadpool pool of up to `max_size` connections to `database_url` that
/// fails fast (5 s) when the server is unreachable, with `config` for custom
/// connection setup and recycling.
///
/// With `verify_after_idle`, a connection last handed out at least that
/// long ago runs `SELECT 1` before it is handed out again, and one that
/// fails it or gives no answer within 5 s is closed and the next one
/// tried: for a driver that cannot tell when the server closed a
/// connection (MySQL's), this catches what a restart, a failover or the
/// server's idle timeout ended while the connection waited, without a
/// round trip per checkout for connections in steady use. Set `config`'s
/// recycling to `Fast` with it, or the default check runs as well.
pub fn build_pool<C>(
    database_url: &str,
    max_size: usize,
    config: ManagerConfig<C>,
    verify_after_idle: Option<Duration>,
) -> Result<Pool<C>>
where
    C: AsyncConnection + 'static,
    AsyncDieselConnectionManager<C>: deadpool::managed::Manager<Type = C>,
{
    let manager = AsyncDieselConnectionManager::<C>::new_with_config(database_url, config);
    let mut builder = Pool::builder(manager)
        .max_size(max_size)
        .runtime(deadpool::Runtime::Tokio1)
        .create_timeout(Some(Duration::from_secs(5)))
        .wait_timeout(Some(Duration::from_secs(5)));
    if let Some(idle) = verify_after_idle {
        builder = builder.pre_recycle(Hook::async_fn(move |conn: &mut C, metrics| {
            let idle_for = metrics.last_used();
            Box::pin(async move {
                if idle_for < idle {
                    return Ok(());
                }
                still_answers(conn).await.map_err(|why| {
                    HookError::message(format!(
                        "a connection last handed out {idle_for:?} ago {why}"
                    ))
                })
            })
        }));
    }
    builder.build().map_err(|e| Error::Config {
        field: "database_url",
        reason: e.to_string(),
    })
}
