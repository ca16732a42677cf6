//! Project tasks, run as `cargo xtask <command>`.
//!
//! - `migrate --database-url URL [--revert]`: apply (or revert) the outbox
//!   migrations, the same embedded set `run_migrations` applies.
//! - `ci`: checks beyond the tests, such as backends compiling only when chosen.
//! - `bench [--backend postgres|mysql|all] [--quick] [--json PATH]`: the
//!   library against hand-written SQL in the same run, as ratios.

use clap::{Parser, Subcommand};

mod bench;
mod ci;
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
    /// Checks beyond the tests (dependency separation of the backends).
    Ci(ci::Args),
    /// Measure the library against hand-written SQL; prints ratios.
    Bench(bench::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Migrate(args) => runtime()?.block_on(migrate::run(args)),
        Command::Ci(args) => ci::run(args),
        Command::Bench(args) => runtime()?.block_on(bench::run(args)),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
