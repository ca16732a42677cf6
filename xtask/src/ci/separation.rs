//! Backends compile only when chosen: depending on `diesel-outbox-postgres` must not
//! build `mysql_async` or SQLite (`libsqlite3-sys`), `diesel-outbox-mysql` must not
//! build `tokio-postgres` or SQLite, and `diesel-outbox-sqlite` must build neither
//! server driver. The `outbox` command built with one backend feature builds
//! only that backend's driver, and the demo on its default (SQLite) builds
//! no server's client at all. The broker crates bind no C library: no
//! `*-sys` crate in their trees.

use std::process::Command;

use anyhow::{Context as _, bail, ensure};

/// `(package, crate it must not pull in)`.
const SEPARATED: [(&str, &str); 6] = [
    ("diesel-outbox-postgres", "mysql_async"),
    ("diesel-outbox-postgres", "libsqlite3-sys"),
    ("diesel-outbox-mysql", "tokio-postgres"),
    ("diesel-outbox-mysql", "libsqlite3-sys"),
    ("diesel-outbox-sqlite", "tokio-postgres"),
    ("diesel-outbox-sqlite", "mysql_async"),
];

/// `(package, its own driver)`: the check above would pass vacuously if
/// the tree did not list drivers at all.
const DRIVERS: [(&str, &str); 3] = [
    ("diesel-outbox-postgres", "tokio-postgres"),
    ("diesel-outbox-mysql", "mysql_async"),
    ("diesel-outbox-sqlite", "libsqlite3-sys"),
];

/// The command's backend features, each with its own driver.
const CLI_FEATURES: [(&str, &str); 3] = [
    ("postgres", "tokio-postgres"),
    ("mysql", "mysql_async"),
    ("sqlite", "libsqlite3-sys"),
];

/// What `cargo xtask demo` builds by default (SQLite) must not build.
const DEMO_FORBIDDEN: [&str; 3] = ["tokio-postgres", "mysql_async", "async-nats"];

/// The broker crates, each with the client it must list: pure-Rust
/// clients, with no `*-sys` crate (a C library's bindings) in their trees.
const PURE_RUST: [(&str, &str); 4] = [
    ("diesel-outbox-nats", "async-nats"),
    ("diesel-outbox-rabbitmq", "lapin"),
    ("diesel-outbox-redis", "redis"),
    ("diesel-outbox-kafka", "confluent-kafka"),
];

/// Fails when a backend pulls in another backend's driver, or a broker
/// crate binds a C library.
pub(crate) fn check() -> anyhow::Result<()> {
    for (package, client) in PURE_RUST {
        let tree = cargo_tree(package)?;
        ensure!(
            tree.lines()
                .any(|line| line.starts_with(&format!("{client} "))),
            "cargo tree -p {package} does not list its client {client}"
        );
        if let Some(line) = tree.lines().find(|line| {
            line.split(' ')
                .next()
                .is_some_and(|name| name.ends_with("-sys"))
        }) {
            bail!(
                "{package} builds a C library's bindings ({line}); broker clients must be pure Rust"
            );
        }
        eprintln!("ok: {package} binds no C library");
    }
    let demo = cargo_tree_with(
        "outbox-tools",
        &["--no-default-features", "--features", "demo,sqlite"],
    )?;
    for forbidden in DEMO_FORBIDDEN {
        if let Some(line) = demo
            .lines()
            .find(|line| line.starts_with(&format!("{forbidden} ")))
        {
            bail!("the demo on SQLite builds {forbidden} ({line})");
        }
    }
    ensure!(
        demo.lines().any(|line| line.starts_with("libsqlite3-sys ")),
        "the demo's cargo tree does not list libsqlite3-sys"
    );
    eprintln!("ok: the demo on SQLite builds no server's client");
    for (feature, driver) in CLI_FEATURES {
        let tree = cargo_tree_with(
            "diesel-outbox-cli",
            &["--no-default-features", "--features", feature],
        )?;
        for (_, other) in CLI_FEATURES {
            let listed = tree
                .lines()
                .any(|line| line.starts_with(&format!("{other} ")));
            ensure!(
                listed == (other == driver),
                "diesel-outbox-cli with only `{feature}` {} {other}",
                if listed { "builds" } else { "does not build" }
            );
        }
        eprintln!(
            "ok: diesel-outbox-cli with only `{feature}` builds {driver} and no other driver"
        );
    }
    for (package, driver) in DRIVERS {
        let tree = cargo_tree(package)?;
        ensure!(
            tree.lines()
                .any(|line| line.starts_with(&format!("{driver} "))),
            "cargo tree -p {package} does not list its driver {driver}"
        );
    }
    for (package, forbidden) in SEPARATED {
        let tree = cargo_tree(package)?;
        ensure!(
            tree.lines().any(|line| line.starts_with(package)),
            "cargo tree -p {package} did not list {package} itself"
        );
        if let Some(line) = tree
            .lines()
            .find(|line| line.starts_with(&format!("{forbidden} ")))
        {
            bail!(
                "{package} depends on {forbidden} ({line}); backends must compile only when chosen"
            );
        }
        eprintln!("ok: {package} does not depend on {forbidden}");
    }
    Ok(())
}

/// `cargo tree -p package -e normal --prefix none`: one crate per line.
fn cargo_tree(package: &str) -> anyhow::Result<String> {
    cargo_tree_with(package, &[])
}

/// [`cargo_tree`] with more arguments (features).
fn cargo_tree_with(package: &str, extra: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(super::cargo())
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .args(extra)
        .output()
        .context("running cargo tree")?;
    ensure!(
        output.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?)
}
