//! Project tasks, run as `cargo xtask <command>`.
//!
//! - `migrate --database-url URL [--revert]`: apply (or revert) the outbox
//!   migrations, the same embedded set `run_migrations` applies;
//!   `migrate --print [--revert] [--backend postgres|mysql|sqlite]` prints their SQL.
//! - `ci`: checks beyond the tests, such as backends compiling only when chosen.
//! - `bench [--backend postgres|mysql|sqlite|all] [--scenario NAME,...] [--quick] [--json PATH]`:
//!   the library against hand-written SQL in the same run, as ratios.
//! - `demo [--backend sqlite|postgres|mysql] [--orders N] [--nats]`: an order
//!   service on SQLite (default, nothing to start) or the local servers, with
//!   failures injected, and a summary.
//! - `chaos [--backend postgres|mysql] [--scenario NAME] [--quick] [--json]`:
//!   faults injected into private servers (restarts, killed relays, NATS
//!   down, pool exhaustion, overlapping handlers, clock skew, a hung
//!   handler), each scenario's invariants checked and its figures reported;
//!   with `--cluster`, the replicated topologies (Galera, PostgreSQL
//!   failover, a JetStream cluster) instead.

use clap::{Parser, Subcommand};

mod bench;
mod chaos;
mod ci;
mod demo;
mod migrate;

#[derive(Debug, Parser)]
#[command(name = "xtask", about = "Tasks for the outbox workspace")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the outbox migrations to a database, revert them, or print their SQL.
    Migrate(migrate::Args),
    /// Checks beyond the tests (dependency separation of the backends).
    Ci(ci::Args),
    /// Measure the library against hand-written SQL; prints ratios.
    Bench(bench::Args),
    /// Run an order service on the outbox, with failures injected, and summarise.
    Demo(demo::Args),
    /// The demo's relay process (started by `demo`).
    #[command(hide = true)]
    DemoRelay(demo::ChildArgs),
    /// Inject faults into private servers and check that nothing is lost.
    Chaos(chaos::Args),
    /// A chaos scenario's relay process (started by `chaos`).
    #[command(hide = true)]
    ChaosRelay(chaos::ChildArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Migrate(args) => runtime()?.block_on(migrate::run(args)),
        Command::Ci(args) => ci::run(args),
        Command::Bench(args) => runtime()?.block_on(bench::run(args)),
        Command::Demo(args) => runtime()?.block_on(demo::run(args)),
        Command::DemoRelay(args) => runtime()?.block_on(demo::run_child(args)),
        Command::Chaos(args) => runtime()?.block_on(chaos::run(args)),
        Command::ChaosRelay(args) => runtime()?.block_on(chaos::run_child(args)),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
