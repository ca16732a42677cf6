//! Every published crate packages, and (verified) builds from its package alone.
//!
//! This catches what a workspace build cannot: a file included from outside the
//! crate's folder, a dependency without a version, a dev-dependency cycle.

use std::process::Command;

use anyhow::{Context as _, ensure};

use super::workspace::Members;

pub(crate) fn check(members: &Members, verify: bool) -> anyhow::Result<()> {
    let published: Vec<&str> = members
        .packages
        .iter()
        .filter(|member| member.published())
        .map(|member| member.name.as_str())
        .collect();
    ensure!(
        !published.is_empty(),
        "no published package in the workspace"
    );
    let mut command = Command::new(super::cargo());
    command.arg("package");
    for name in &published {
        command.args(["-p", name]);
    }
    if !verify {
        command.arg("--no-verify");
    }
    let status = command.status().context("running cargo package")?;
    ensure!(status.success(), "cargo package failed for {published:?}");
    eprintln!("ok: packaged {}", published.join(", "));
    Ok(())
}
