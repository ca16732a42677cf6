//! Running the project's tools (the programs of `tools/`) through cargo.
//!
//! The demo and the optimised bench are built with only the features the
//! command line asks for, so a first demo on SQLite builds no server's
//! client and a bench of one backend compiles only that backend. The debug
//! builds that need every server anyway (chaos, and the bench's `--quick`
//! smoke check) share one build with the package's default features, every
//! tool and every backend: built once, each runs from it, where a build per
//! feature set would compile the dependencies again for each.

use std::process::Command;

use anyhow::{Context as _, ensure};

/// The cargo that runs this xtask, so tools build with the same toolchain.
pub(crate) fn cargo_program() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// Runs `cargo FIRST... -- REST...` (no `--` when `rest` is empty) and fails
/// when it fails.
pub(crate) fn cargo(first: &[&str], rest: &[String]) -> anyhow::Result<()> {
    cargo_with_env(first, rest, &[])
}

/// [`cargo`], with `env` set for it.
pub(crate) fn cargo_with_env(
    first: &[&str],
    rest: &[String],
    env: &[(&str, &str)],
) -> anyhow::Result<()> {
    let mut command = Command::new(cargo_program());
    command.args(first);
    command.args(rest);
    command.envs(env.iter().copied());
    let status = command
        .status()
        .with_context(|| format!("running cargo {}", first.join(" ")))?;
    ensure!(
        status.success(),
        "cargo {} failed: {status}",
        first.join(" ")
    );
    Ok(())
}

/// How a tool is built.
enum Build<'a> {
    /// Without the default features: the tool's own feature and
    /// `features` only, optimised when `release`.
    Only {
        features: &'a [&'a str],
        release: bool,
    },
    /// A debug build with the package's default features (every tool,
    /// backend and broker), the one every such run shares.
    Shared,
}

/// Runs the tool `program` (a binary of `outbox-tools`, whose feature is
/// `tool`), built as `build` says, with `args`.
fn run(program: &str, tool: &str, build: Build<'_>, args: &[String]) -> anyhow::Result<()> {
    let mut first = vec![
        "run",
        "--quiet",
        "--package",
        "outbox-tools",
        "--bin",
        program,
    ];
    let features;
    if let Build::Only {
        features: only,
        release,
    } = build
    {
        features = std::iter::once(tool)
            .chain(only.iter().copied())
            .collect::<Vec<_>>()
            .join(",");
        first.extend(["--no-default-features", "--features", &features]);
        if release {
            first.push("--release");
        }
    }
    first.push("--");
    cargo(&first, args)
}

/// The value of `--NAME VALUE` or `--NAME=VALUE` in `args`.
fn value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let flag = format!("--{name}");
    let inline = format!("--{name}=");
    args.iter().enumerate().find_map(|(i, arg)| {
        if *arg == flag {
            args.get(i + 1).map(String::as_str)
        } else {
            arg.strip_prefix(&inline)
        }
    })
}

fn has(args: &[String], flag: &str) -> bool {
    args.iter().any(|arg| arg == flag)
}

/// `cargo xtask demo`: the demo with the one backend it runs on (SQLite by
/// default), and a broker only when asked for.
pub(crate) fn demo(args: &[String]) -> anyhow::Result<()> {
    let mut features = vec![value(args, "backend").unwrap_or("sqlite")];
    if has(args, "--nats") {
        features.push("nats");
    }
    if has(args, "--rabbitmq") {
        features.push("rabbitmq");
    }
    let build = Build::Only {
        features: &features,
        release: false,
    };
    run("outbox-demo", "demo", build, args)
}

/// `cargo xtask bench`: optimised, with the backends `--backend` names (all
/// by default) and each broker unless `--no-nats`, `--no-rabbitmq`,
/// `--no-redis` or `--no-kafka` leaves it out (Kafka's broker, tansu, is
/// installed first when missing); with `--quick` (a smoke check), the
/// shared debug build. The bench is told it ran as `cargo xtask bench`,
/// the command `--write-docs` records.
pub(crate) fn bench(args: &[String]) -> anyhow::Result<()> {
    let mut features = match value(args, "backend").unwrap_or("all") {
        "all" => vec!["postgres", "mysql", "sqlite"],
        one => vec![one],
    };
    if !has(args, "--no-nats") {
        features.push("nats");
    }
    if !has(args, "--no-rabbitmq") {
        features.push("rabbitmq");
    }
    if !has(args, "--no-redis") {
        features.push("redis");
    }
    if !has(args, "--no-kafka") {
        crate::kafka::ensure_installed()?;
        features.push("kafka");
    }
    let mut passed = args.to_vec();
    passed.push("--invoked-as=cargo xtask bench".to_owned());
    let build = match has(args, "--quick") {
        true => Build::Shared,
        false => Build::Only {
            features: &features,
            release: true,
        },
    };
    run("outbox-bench", "bench", build, &passed)
}

/// `cargo xtask chaos`: the shared debug build (the scenarios use every
/// backend and broker), after installing the packages (and Kafka's broker,
/// tansu) the scenarios need.
pub(crate) fn chaos(args: &[String]) -> anyhow::Result<()> {
    crate::packages::ensure(&crate::packages::FAKETIME)?;
    if has(args, "--cluster") {
        crate::packages::ensure(&crate::packages::GALERA)?;
    } else {
        crate::kafka::ensure_installed()?;
    }
    run("outbox-chaos", "chaos", Build::Shared, args)
}

#[cfg(test)]
mod tests {
    use super::value;

    #[test]
    fn values_are_read_in_both_spellings() {
        let args: Vec<String> = ["--orders", "3", "--backend=mysql"]
            .map(String::from)
            .to_vec();
        assert_eq!(value(&args, "backend"), Some("mysql"));
        assert_eq!(value(&args, "orders"), Some("3"));
        assert_eq!(value(&args, "nats"), None);
    }
}
