//! The workspace's packages, as `cargo metadata` describes them.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, ensure};

/// One workspace member.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) version: String,
    /// `Some([])` when the manifest says `publish = false`.
    publish: Option<Vec<String>>,
    pub(crate) manifest_path: PathBuf,
}

impl Member {
    /// Whether this package is meant for crates.io.
    pub(crate) fn published(&self) -> bool {
        self.publish
            .as_ref()
            .is_none_or(|registries| !registries.is_empty())
    }
}

#[derive(Debug, serde::Deserialize)]
struct Metadata {
    packages: Vec<Member>,
    workspace_root: PathBuf,
    target_directory: PathBuf,
}

/// The workspace's members and its root folder.
#[derive(Debug)]
pub(crate) struct Members {
    pub(crate) packages: Vec<Member>,
    pub(crate) root: PathBuf,
    /// Where cargo builds (`CARGO_TARGET_DIR`, or the root's `target`).
    pub(crate) target: PathBuf,
}

impl Members {
    pub(crate) fn get(&self, name: &str) -> Option<&Member> {
        self.packages.iter().find(|member| member.name == name)
    }
}

/// `cargo metadata --no-deps`.
pub(crate) fn members() -> anyhow::Result<Members> {
    let output = Command::new(super::cargo())
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .context("running cargo metadata")?;
    ensure!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Metadata =
        serde_json::from_slice(&output.stdout).context("reading cargo metadata")?;
    Ok(Members {
        packages: metadata.packages,
        target: metadata.target_directory,
        root: metadata.workspace_root,
    })
}
