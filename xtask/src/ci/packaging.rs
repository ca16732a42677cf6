//! Every published crate packages, and (verified) builds from its package alone.
//!
//! This catches what a workspace build cannot: a file included from outside the
//! crate's folder, a dependency without a version, a dev-dependency cycle.

use std::process::Command;

use anyhow::{Context as _, ensure};

use super::workspace::{Member, Members};

/// Removes cargo's extracted copies of our packages (`$CARGO_HOME/registry/src/*/NAME-VERSION`),
/// and the fingerprints of what was built from them in `target`.
///
/// Verification builds each package against the others through a local
/// registry, and cargo extracts each `.crate` there once per name and
/// version: a later run with changed sources but the same version would
/// otherwise verify against the first run's copy. Cargo also takes a build
/// of a registry package to be fresh while its version is the same, so a
/// changed package would be verified against the last run's compiled
/// copy: its fingerprint goes too, and it is built again.
fn forget_extracted(published: &[&Member], target: &std::path::Path) -> anyhow::Result<()> {
    forget_builds(published, target)?;
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

/// Removes the fingerprint of every build in `target` made from an extracted
/// copy of one of `published` (its dep-info names a file under
/// `registry/src/*/NAME-VERSION/`).
fn forget_builds(published: &[&Member], target: &std::path::Path) -> anyhow::Result<()> {
    for profile in ["debug", "release"] {
        let deps = target.join(profile).join("deps");
        let Ok(entries) = std::fs::read_dir(&deps) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
                continue;
            };
            let Some(stem) = file.strip_suffix(".d") else {
                continue;
            };
            for member in published {
                let crate_name = member.name.replace('-', "_");
                let Some(hash) = stem.strip_prefix(&format!("{crate_name}-")) else {
                    continue;
                };
                let extracted = format!("{}-{}/", member.name, member.version);
                let from_package = std::fs::read_to_string(&path).is_ok_and(|info| {
                    info.lines()
                        .any(|line| line.contains("/registry/src/") && line.contains(&extracted))
                });
                let fingerprint = target
                    .join(profile)
                    .join(".fingerprint")
                    .join(format!("{}-{hash}", member.name));
                if from_package && fingerprint.is_dir() {
                    std::fs::remove_dir_all(&fingerprint)
                        .with_context(|| format!("removing {}", fingerprint.display()))?;
                }
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
        forget_extracted(&published, &members.target)?;
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

#[cfg(test)]
mod tests {
    use super::{Member, forget_builds};

    /// A build made from an extracted copy loses its fingerprint (so cargo
    /// builds it again); the workspace's own build of the same crate keeps
    /// its one.
    #[test]
    fn builds_from_extracted_copies_are_forgotten() -> anyhow::Result<()> {
        let target = std::env::temp_dir().join(format!("xtask-forget-{}", std::process::id()));
        let (deps, fingerprints) = (target.join("debug/deps"), target.join("debug/.fingerprint"));
        std::fs::create_dir_all(&deps)?;
        for hash in ["aaa", "bbb"] {
            std::fs::create_dir_all(fingerprints.join(format!("diesel-outbox-core-{hash}")))?;
        }
        std::fs::write(
            deps.join("diesel_outbox_core-aaa.d"),
            "/home/u/.cargo/registry/src/-14cd/diesel-outbox-core-0.1.0/src/lib.rs:\n",
        )?;
        std::fs::write(
            deps.join("diesel_outbox_core-bbb.d"),
            "/work/outbox-core/src/lib.rs:\n",
        )?;
        let member: Member = serde_json::from_value(serde_json::json!({
            "name": "diesel-outbox-core",
            "version": "0.1.0",
            "publish": null,
            "manifest_path": "/work/outbox-core/Cargo.toml",
        }))?;
        forget_builds(&[&member], &target)?;
        assert!(!fingerprints.join("diesel-outbox-core-aaa").exists());
        assert!(fingerprints.join("diesel-outbox-core-bbb").exists());
        std::fs::remove_dir_all(&target)?;
        Ok(())
    }
}
