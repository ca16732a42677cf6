//! `cargo xtask chaos --cluster`: the replicated topologies, each on private
//! servers started for the scenario and stopped by pid afterwards.
//!
//! - `galera`: a three-node MariaDB Galera cluster (multi-primary), a
//!   producer and a relay on every node, one node SIGKILLed and rejoined.
//! - `failover`: a PostgreSQL primary with a streaming standby; the primary
//!   stops (immediate), the standby is promoted, relays follow it through a
//!   multi-host URL without a restart.
//! - `nats-cluster`: three routed `nats-server` nodes, a stream with three
//!   replicas, one node killed and restarted while relays publish.

#[cfg(feature = "postgres")]
mod failover;
#[cfg(feature = "mysql")]
mod galera;
#[cfg(all(feature = "nats", feature = "postgres"))]
mod nats_cluster;

use std::time::Instant;

use super::{progress::Progress, report::Report, run_dir::RunDir};

/// Every cluster scenario, in the order they run.
pub(crate) const ALL: [&str; 3] = ["galera", "failover", "nats-cluster"];

/// What a cluster scenario runs with.
#[derive(Debug)]
pub(crate) struct ClusterCtx<'a> {
    pub(crate) run: &'a RunDir,
    pub(crate) quick: bool,
    pub(crate) progress: Progress,
}

impl ClusterCtx<'_> {
    /// `quick` in a quick run, else `full`.
    pub(crate) fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick { quick } else { full }
    }
}

/// The backend label a scenario reports under.
fn backend_of(name: &str) -> &'static str {
    match name {
        "galera" => "mysql",
        "nats-cluster" => "nats",
        _ => "postgres",
    }
}

/// Runs the cluster scenarios `names`, one after the other.
pub(crate) async fn run_all(
    run: &RunDir,
    names: &[&'static str],
    quick: bool,
) -> anyhow::Result<Vec<Report>> {
    let mut reports = Vec::new();
    for name in names {
        let backend = backend_of(name);
        let mut ctx = ClusterCtx {
            run,
            quick,
            progress: Progress::new(name, backend),
        };
        let mut report = Report::new(name, backend);
        let started = Instant::now();
        let result = match *name {
            #[cfg(feature = "mysql")]
            "galera" => galera::run(&mut ctx, &mut report).await,
            #[cfg(feature = "postgres")]
            "failover" => failover::run(&mut ctx, &mut report).await,
            #[cfg(all(feature = "nats", feature = "postgres"))]
            "nats-cluster" => nats_cluster::run(&mut ctx, &mut report).await,
            _ => Err(anyhow::anyhow!(
                "outbox-chaos was built without what scenario {name} needs"
            )),
        };
        if let Err(error) = result {
            report.error = Some(format!("{error:#}"));
        }
        report.seconds = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
        ctx.progress.finish(report.passed());
        if let Some(error) = &report.error {
            eprintln!("chaos: {name} [{backend}] could not finish: {error}");
        }
        reports.push(report);
    }
    Ok(reports)
}
