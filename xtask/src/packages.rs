//! Debian packages some tests need beyond the services: installed with
//! `apt-get` when a file they provide is missing.

use std::{path::Path, process::Command};

use anyhow::{Context as _, ensure};

/// A set of packages, and the files that show they are installed.
#[derive(Debug)]
pub(crate) struct Packages {
    /// What needs them, for the log.
    pub(crate) purpose: &'static str,
    /// Debian package names.
    pub(crate) names: &'static [&'static str],
    /// Files the packages install; a `*` stands for any one folder name
    /// (an architecture's library folder, say).
    pub(crate) files: &'static [&'static str],
}

/// Headless Chromium and its WebDriver, for the dashboard's browser test.
pub(crate) const BROWSER: Packages = Packages {
    purpose: "the dashboard's browser test",
    names: &["chromium", "chromium-driver"],
    files: &["/usr/bin/chromium", "/usr/bin/chromedriver"],
};

/// Prometheus's `promtool`, which checks and unit-tests the alert rules.
pub(crate) const PROMTOOL: Packages = Packages {
    purpose: "the alert rules' checks",
    names: &["prometheus"],
    files: &["/usr/bin/promtool"],
};

/// libfaketime, which the chaos scenarios fake one relay's clock with.
pub(crate) const FAKETIME: Packages = Packages {
    purpose: "the chaos scenarios' skewed clock",
    names: &["libfaketime"],
    files: &["/usr/lib/*/faketime/libfaketimeMT.so.1"],
};

/// The Galera provider, for the replicated MariaDB of `chaos --cluster`.
pub(crate) const GALERA: Packages = Packages {
    purpose: "the Galera scenario of `chaos --cluster`",
    names: &["galera-4"],
    files: &["/usr/lib/galera/libgalera_smm.so"],
};

/// Installs `packages` unless every file they provide is there.
pub(crate) fn ensure(packages: &Packages) -> anyhow::Result<()> {
    if packages.files.iter().all(|file| exists(file)) {
        return Ok(());
    }
    let names = packages.names.join(" ");
    eprintln!("xtask: installing {names} for {}", packages.purpose);
    run(&["apt-get", "update", "-qq"])?;
    let mut install = vec!["apt-get", "install", "-y", "-qq"];
    install.extend_from_slice(packages.names);
    run(&install)?;
    for file in packages.files {
        ensure!(
            exists(file),
            "{file} is still missing after installing {names}"
        );
    }
    Ok(())
}

fn run(command: &[&str]) -> anyhow::Result<()> {
    let status = Command::new(command[0])
        .args(&command[1..])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .with_context(|| format!("running `{}`", command.join(" ")))?;
    ensure!(status.success(), "`{}` failed: {status}", command.join(" "));
    Ok(())
}

/// Whether `pattern` names a file, `*` matching any one folder name.
fn exists(pattern: &str) -> bool {
    let Some((before, after)) = pattern.split_once("/*/") else {
        return Path::new(pattern).exists();
    };
    std::fs::read_dir(before).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|entry| exists(&format!("{}/{after}", entry.path().display())))
    })
}

#[cfg(test)]
mod tests {
    use super::exists;

    #[test]
    fn a_star_matches_one_folder() {
        let dir = std::env::temp_dir().join(format!("xtask-exists-{}", std::process::id()));
        let file = dir.join("arch").join("lib.so");
        std::fs::create_dir_all(file.parent().unwrap_or(&dir)).ok();
        std::fs::write(&file, b"").ok();
        let root = dir.display();
        assert!(exists(&format!("{root}/*/lib.so")));
        assert!(!exists(&format!("{root}/*/other.so")));
        std::fs::remove_dir_all(&dir).ok();
    }
}
