//! `outbox`: the operator's command for a transactional outbox.
//!
//! See `outbox --help` and [operations.md](https://github.com/outbox-rs/outbox/blob/main/docs/operations.md) for the subcommands, their
//! output and exit codes.

#[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
compile_error!("enable at least one backend feature: postgres, mysql or sqlite");

mod args;
mod backend;
mod commands;
mod duration;
mod failure;
mod migrate;
mod render;
mod serve;

use std::process::ExitCode;

use clap::Parser as _;

use crate::{
    args::{Cli, Command},
    backend::Backend,
    commands::Output,
    failure::Failure,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return report(&Failure::Error(error.into())),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => report(&failure),
    }
}

fn report(failure: &Failure) -> ExitCode {
    eprintln!("outbox: {failure}");
    failure.exit_code()
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let out = Output { json: cli.json };
    let names = cli.names()?;
    if let Command::Migrate(args) = &cli.command
        && args.print
        && let Some(backend) = args.backend
    {
        return migrate::run(backend, "", &names, args, out).await;
    }
    let Some(url) = cli.database_url.as_deref() else {
        return Err(Failure::Usage(
            "no database: pass --database-url or set DATABASE_URL".to_owned(),
        ));
    };
    let backend = Backend::of_url(url)?;
    match cli.command {
        Command::Migrate(args) => migrate::run(backend, url, &names, &args, out).await,
        command => backend.run(url, names, command, out).await,
    }
}
