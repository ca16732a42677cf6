//! The connection pool a store claims and completes on.

use std::time::Duration;

use diesel_async::{
    AsyncConnection,
    pooled_connection::{AsyncDieselConnectionManager, ManagerConfig, deadpool::Pool},
};
use diesel_outbox_core::{Error, Result};

/// A deadpool pool of up to `max_size` connections to `database_url` that
/// fails fast (5 s) when the server is unreachable, with `config` for custom
/// connection setup.
pub fn build_pool<C>(
    database_url: &str,
    max_size: usize,
    config: ManagerConfig<C>,
) -> Result<Pool<C>>
where
    C: AsyncConnection + 'static,
    AsyncDieselConnectionManager<C>: deadpool::managed::Manager,
{
    let manager = AsyncDieselConnectionManager::<C>::new_with_config(database_url, config);
    Pool::builder(manager)
        .max_size(max_size)
        .runtime(deadpool::Runtime::Tokio1)
        .create_timeout(Some(Duration::from_secs(5)))
        .wait_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(|e| Error::Config {
            field: "database_url",
            reason: e.to_string(),
        })
}
