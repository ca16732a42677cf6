//! `cargo xtask ci`: checks that plain `cargo test` cannot make.

mod guide_names;
mod packaging;
mod separation;
mod workspace;

/// Arguments of `ci`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Package without building each package on its own (faster, proves less).
    #[arg(long)]
    no_verify: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    separation::check()?;
    let members = workspace::members()?;
    guide_names::check(&members)?;
    packaging::check(&members, !args.no_verify)
}

/// The cargo that runs this xtask, so checks use the same toolchain.
fn cargo() -> String {
    crate::tool::cargo_program()
}
