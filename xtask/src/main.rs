//! Project tasks, run as `cargo xtask <command>`.
//!
//! - `test [ARGS]`: every test of the workspace, after checking (and
//!   starting, when they are down) the services the tests talk to,
//!   installing what the browser test needs and starting a private Kafka
//!   broker (tansu, installed once per machine); `ARGS` go to `cargo test`.
//! - `ci`: checks beyond the tests, such as backends compiling only when chosen.
//! - `demo [--backend sqlite|postgres|mysql] [--orders N] [--nats | --rabbitmq]`:
//!   an order service on SQLite (default, nothing to start) or the local
//!   servers, with failures injected, and a summary; with a broker, a
//!   shipping service consumes its messages through the inbox (`outbox-demo`
//!   in `tools/`, built with only the backend and the broker it runs).
//! - `bench [--backend postgres|mysql|sqlite|all] [--scenario NAME,...] [--quick] [--no-nats] [--json PATH] [--write-docs [DIR]] [--soak [--soak-minutes N]]`:
//!   the library against hand-written SQL in the same run, as ratios
//!   (`outbox-bench` in `tools/`, optimised and built with only what it
//!   measures; with `--quick`, the debug build chaos shares);
//!   `--write-docs` rewrites the results of `docs/benchmarks.md` and its plots;
//!   `--soak` runs steady traffic for minutes instead, sampled as it ages the tables.
//! - `chaos [--backend postgres|mysql] [--scenario NAME] [--quick] [--json]`:
//!   faults injected into private servers, each scenario's invariants
//!   checked and its figures reported; with `--cluster`, the replicated
//!   topologies (`outbox-chaos` in `tools/`, one debug build of every tool,
//!   backend and broker, which `bench --quick` shares).
//!
//! Migrations are the `outbox` command's: `cargo run -p diesel-outbox-cli --
//! migrate` (with `--inbox`, `--print`, `--revert`).

use clap::{Parser, Subcommand};

mod ci;
mod kafka;
mod packages;
mod services;
mod tool;

#[derive(Debug, Parser)]
#[command(name = "xtask", about = "Tasks for the outbox workspace")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check (and start) the services, install what the browser test
    /// needs, then run every test: `cargo test --workspace ARGS`.
    Test(Passed),
    /// Checks beyond the tests (dependency separation of the backends, packaging).
    Ci(ci::Args),
    /// Run an order service on the outbox, with failures injected, and summarise.
    Demo(Passed),
    /// Measure the library against hand-written SQL; prints ratios.
    Bench(Passed),
    /// Inject faults into private servers and check that nothing is lost.
    Chaos(Passed),
}

/// Arguments handed on unchanged (see each tool's `--help`).
#[derive(Debug, clap::Args)]
struct Passed {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Test(passed) => test(&passed.args),
        Command::Ci(args) => ci::run(args),
        Command::Demo(passed) => tool::demo(&passed.args),
        Command::Bench(passed) => tool::bench(&passed.args),
        Command::Chaos(passed) => tool::chaos(&passed.args),
    }
}

/// `cargo xtask test`: what the tests need, then the tests. The Kafka
/// tests get a private broker of the run's own unless
/// `OUTBOX_KAFKA_BOOTSTRAP` names one.
fn test(args: &[String]) -> anyhow::Result<()> {
    services::ensure_all()?;
    packages::ensure(&packages::BROWSER)?;
    packages::ensure(&packages::PROMTOOL)?;
    let broker = match std::env::var_os(kafka::BOOTSTRAP_VAR) {
        Some(_) => None,
        None => Some(kafka::PrivateBroker::start()?),
    };
    let env: Vec<(&str, &str)> = broker
        .iter()
        .map(|broker| (kafka::BOOTSTRAP_VAR, broker.bootstrap()))
        .collect();
    tool::cargo_with_env(&["test", "--workspace"], args, &env)
}
