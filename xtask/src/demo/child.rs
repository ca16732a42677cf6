//! `xtask demo-relay`: the relay the demo runs in a process of its own, so
//! that it can kill it with SIGKILL mid-run.

use std::sync::Arc;

use diesel_outbox_core::{CancellationToken, Relay};

use super::{Backend, effect, settings};
use crate::bench::raw::Raw;

/// Arguments of the hidden `demo-relay` command.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The demo's backend.
    #[arg(long, value_enum)]
    backend: Backend,
    /// The demo database.
    #[arg(long)]
    url: String,
    /// The demo's JetStream subject prefix, when publishing.
    #[arg(long)]
    nats_prefix: Option<String>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    match args.backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => relay::<diesel_outbox_testkit::sqlite::SqliteTestDb>(&args).await,
        #[cfg(feature = "postgres")]
        Backend::Postgres => relay::<diesel_outbox_testkit::postgres::PgTestDb>(&args).await,
        #[cfg(feature = "mysql")]
        Backend::Mysql => relay::<diesel_outbox_testkit::mysql::MysqlTestDb>(&args).await,
        #[allow(unreachable_patterns)]
        _ => anyhow::bail!("xtask was built without this backend"),
    }
}

async fn relay<B: Raw>(args: &Args) -> anyhow::Result<()> {
    let db = Arc::new(B::attach(&args.url).await?);
    #[cfg(feature = "nats")]
    let publisher = match &args.nats_prefix {
        Some(prefix) => Some(Arc::new(super::publisher(prefix).await?)),
        None => None,
    };
    let worker = effect::worker(
        &db,
        "demo-relay-child",
        #[cfg(feature = "nats")]
        publisher,
    )?;
    Relay::new(worker, settings::relay())?
        .run(CancellationToken::new())
        .await;
    Ok(())
}
