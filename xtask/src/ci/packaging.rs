//! Every published crate packages, and (verified) builds from its package alone.
//!
//! This catches what a workspace build cannot: a file included from outside the
//! crate's folder, a dependency without a version, a dev-dependency cycle.

use std::process::Command;

use anyhow::{Context as _, ensure};

use super::workspace::{Member, Members};

/// Removes cargo's extracted copies of our packages (`$CARGO_HOME/registry/src/*/NAME-VERSION`).
///
/// Verification builds each package against the others through a local
/// registry, and cargo extracts each `.crate` there once per name and
/// version: a later run with changed sources but the same version would
/// otherwise verify against the first run's copy.
fn forget_extracted(published: &[&Member]) -> anyhow::Result<()> {
    let cargo_home = match std::env::var_os("CARGO_HOME") {
        Some(home) => std::path::PathBuf::from(home),
        None => std::path::PathBuf::from(std::env::var_os("HOME").context("HOME is unset")?)
            .join(".cargo"),
    };
    let Ok(registries) = std::fs::read_dir(cargo_home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries {
        let registry = registry?.path();
        for member in published {
            let extracted = registry.join(format!("{}-{}", member.name, member.version));
            if extracted.is_dir() {
                std::fs::remove_dir_all(&extracted)
                    .with_context(|| format!("removing {}", extracted.display()))?;
            }
        }
    }
    Ok(())
}

pub(crate) fn check(members: &Members, verify: bool) -> anyhow::Result<()> {
    let published: Vec<&Member> = members
        .packages
        .iter()
        .filter(|member| member.published())
        .collect();
    if verify {
        forget_extracted(&published)?;
    }
    let published: Vec<&str> = published
        .iter()
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
