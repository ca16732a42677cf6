//! `outbox-demo relay`: the relay the demo runs in a process of its own, so
//! that it can kill it with SIGKILL mid-run.

use std::sync::Arc;

use diesel_outbox_core::{CancellationToken, Relay};
use diesel_outbox_sql::BackendKind;

use super::{broker::Target, effect, settings};
use crate::raw::Raw;

/// Arguments of the hidden `relay` command.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The demo's backend.
    #[arg(long, value_parser = outbox_tools::backend::parser(&BackendKind::ALL))]
    backend: BackendKind,
    /// The demo database.
    #[arg(long)]
    url: String,
    /// The broker the demo publishes to, if any.
    #[command(flatten)]
    target: Target,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    match args.backend {
        #[cfg(feature = "sqlite")]
        BackendKind::Sqlite => relay::<diesel_outbox_testkit::sqlite::SqliteTestDb>(&args).await,
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => relay::<diesel_outbox_testkit::postgres::PgTestDb>(&args).await,
        #[cfg(feature = "mysql")]
        BackendKind::Mysql => relay::<diesel_outbox_testkit::mysql::MysqlTestDb>(&args).await,
        #[allow(unreachable_patterns)]
        _ => anyhow::bail!("outbox-demo was built without this backend"),
    }
}

async fn relay<B: Raw>(args: &Args) -> anyhow::Result<()> {
    let db = Arc::new(B::attach(&args.url).await?);
    let publisher = args.target.publisher().await?;
    let worker = effect::worker(&db, "demo-relay-child", publisher)?;
    Relay::new(worker, settings::relay())?
        .run(CancellationToken::new())
        .await;
    Ok(())
}
