//! Project tasks, run as `cargo xtask <command>`.
//!
//! - `migrate --database-url URL [--revert]`: apply (or revert) the outbox
//!   migrations, the same embedded set `run_migrations` applies.

use clap::{Parser, Subcommand};

mod migrate;

#[derive(Debug, Parser)]
#[command(name = "xtask", about = "Tasks for the outbox workspace")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the outbox migrations to a database (or revert them).
    Migrate(migrate::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Migrate(args) => migrate::run(args).await,
        }
    })
}
