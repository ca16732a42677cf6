//! A trickle with overlapping handlers: one order every 200 ms, handlers
//! that take 1.5 s, three relays polling every 100 ms. Several handlers
//! always run at once, each while others claim; no task is delivered twice.

use std::{collections::HashMap, time::Duration};

use diesel_outbox_core::CancellationToken;

use super::{Ctx, pause, quantile, settle, setup, then_stop};
use crate::{
    clock,
    db::ChaosDb,
    producer::{self, Commit, Tally},
    records::Event,
    relays::RelaySpec,
    report::Report,
};

pub(crate) async fn run<B: ChaosDb>(
    ctx: &mut Ctx<'_, B>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut setup = setup(ctx, "trickle").await?;
    let length = ctx.pick(Duration::from_secs(10), Duration::from_secs(60));
    let spec = RelaySpec {
        work_ms: 1500,
        timeout_ms: 3000,
        lease_ms: 6000,
        ..RelaySpec::default()
    };
    let mut relays = Vec::new();
    for slot in ["r1", "r2", "r3"] {
        relays.push(setup.relays.start(slot, &spec, ctx.run)?);
    }
    let tally = Tally::default();
    let stop = CancellationToken::new();
    ctx.progress
        .phase("one order every 200 ms, 1.5 s handlers, 3 relays polling every 100 ms");
    let producing = producer::run(&setup.db, Commit::Plain, 1, 5.0, &tally, &stop);
    let trickling = then_stop(&stop, async {
        pause(
            &ctx.progress,
            length,
            "trickling",
            || tally.committed().len(),
            &setup.dir,
        )
        .await;
        stop.cancel();
    });
    tokio::join!(producing, trickling);
    let delivered = settle(
        &setup.db,
        &setup.dir,
        Duration::from_secs(60),
        &ctx.progress,
        report,
    )
    .await?;
    let duplicates = delivered.duplicates();
    report.check(
        "duplicates 0",
        duplicates == 0,
        format!("{duplicates} tasks delivered more than once"),
    );

    // How many handlers ran at once, and how soon each started after its commit.
    let mut edges = Vec::new();
    let mut started: HashMap<i64, u64> = HashMap::new();
    for log in &delivered.logs {
        for (at, event) in &log.events {
            match event {
                Event::Begin { order, .. } => {
                    edges.push((*at, 1i64));
                    let first = started.entry(*order).or_insert(*at);
                    *first = (*first).min(*at);
                }
                Event::Done { .. } | Event::Fail { .. } => edges.push((*at, -1)),
                _ => {}
            }
        }
    }
    edges.sort_unstable();
    let (mut running, mut most) = (0i64, 0i64);
    for (_, step) in edges {
        running += step;
        most = most.max(running);
    }
    let mut waits: Vec<Duration> = tally
        .committed()
        .iter()
        .filter_map(|(order, _, at)| started.get(order).map(|begin| clock::between(*at, *begin)))
        .collect();
    report.figure("most handlers running at once", most, "");
    report.millis("commit to handler start, median", quantile(&mut waits, 0.5));
    report.millis("commit to handler start, max", quantile(&mut waits, 1.0));
    drop(relays);
    Ok(())
}
