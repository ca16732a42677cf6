//! Clock skew between relays. The library takes every time that decides
//! anything (leases, due times, backoff, retention) from the database's
//! clock, so relays whose own clocks are wrong behave like the others. Two
//! relays run with a faked wall clock (libfaketime: one an hour ahead, one
//! an hour behind), a third with the true one; every first attempt fails so
//! every task is retried, and the relay ahead is SIGKILLed mid-run. Were any
//! of these times taken from a relay's clock, retries would come at once or
//! an hour late, leases would lapse at once (duplicates) or hold for an
//! hour (lost).

use std::{collections::HashMap, time::Duration};

use diesel_outbox_core::CancellationToken;

use super::{Ctx, pause, quantile, settle, setup, then_stop};
use crate::{
    clock,
    db::ChaosDb,
    producer::{self, Commit, Tally},
    records::{self, Event},
    relays::RelaySpec,
    report::Report,
};

/// Backoff between attempts.
const RETRY_MS: u64 = 500;
/// Offsets of the faked clocks, seconds.
const SKEWS: [(&str, i64); 2] = [("ahead", 3600), ("behind", -3600)];

pub(crate) async fn run<B: ChaosDb>(
    ctx: &mut Ctx<'_, B>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut setup = setup(ctx, "clock").await?;
    let (before, after) = ctx.pick(
        (Duration::from_secs(3), Duration::from_secs(4)),
        (Duration::from_secs(10), Duration::from_secs(10)),
    );
    let spec = RelaySpec {
        work_ms: 300,
        fail_first: true,
        retry_ms: RETRY_MS,
        ..RelaySpec::default()
    };
    let mut relays = Vec::new();
    for (slot, offset) in SKEWS {
        let skewed = RelaySpec {
            clock_offset: Some(format!("{offset:+}")),
            ..spec.clone()
        };
        relays.push(setup.relays.start(slot, &skewed, ctx.run)?);
    }
    relays.push(setup.relays.start("exact", &spec, ctx.run)?);
    let (mono, wall) = (clock::now_us(), clock::wall_ms());

    let tally = Tally::default();
    let stop = CancellationToken::new();
    ctx.progress.phase(
        "relays with clocks an hour ahead, an hour behind, and right; first attempts fail; the one ahead is killed",
    );
    let producing = producer::run(&setup.db, Commit::Plain, 1, 30.0, &tally, &stop);
    let progress = &ctx.progress;
    let dir = setup.dir.clone();
    let committed = || tally.committed().len();
    let ahead = &mut relays[0];
    let killing = then_stop(&stop, async {
        pause(
            progress,
            before,
            "skewed relays delivering",
            committed,
            &dir,
        )
        .await;
        progress.phase(&format!("SIGKILL of {}", ahead.owner));
        ahead.proc.kill().await?;
        let killed = clock::now_us();
        let held = records::read_file(&dir.join(format!("{}.log", ahead.owner)))?.held();
        pause(progress, after, "the others take over", committed, &dir).await;
        anyhow::Ok((killed, held))
    });
    let ((), killed) = tokio::join!(producing, killing);
    let (killed, held) = killed?;
    let delivered = settle(
        &setup.db,
        &setup.dir,
        Duration::from_secs(60),
        &ctx.progress,
        report,
    )
    .await?;

    // The fakes were in effect: each skewed relay's wall clock at its start.
    let mut skews = Vec::new();
    for (relay, (_, offset)) in relays.iter().zip(SKEWS) {
        let log = records::read_file(&setup.dir.join(format!("{}.log", relay.owner)))?;
        if let Some((at, child_wall)) = log.start_wall_ms() {
            // Wall clocks compared at the same instant of the shared monotonic clock.
            let elapsed_ms = (i128::from(at) - i128::from(mono)) / 1000;
            let skew = child_wall - wall - i64::try_from(elapsed_ms).unwrap_or(0);
            skews.push((relay.owner.clone(), offset, skew));
        }
    }
    let faked = skews.len() == SKEWS.len()
        && skews
            .iter()
            .all(|(_, offset, skew)| (skew - offset * 1000).abs() < 5000);
    report.check(
        "relay clocks skewed",
        faked,
        skews
            .iter()
            .map(|(owner, _, skew)| format!("{owner} {:+.1} s", *skew as f64 / 1000.0))
            .collect::<Vec<_>>()
            .join(", "),
    );

    // Retries came after the backoff on the database clock, whoever ran them.
    let mut failed: HashMap<i64, u64> = HashMap::new();
    let mut retried: HashMap<i64, u64> = HashMap::new();
    for log in &delivered.logs {
        for (at, event) in &log.events {
            match event {
                Event::Fail {
                    fence: (_, 1),
                    order,
                } => {
                    failed.insert(*order, *at);
                }
                Event::Begin {
                    fence: (_, 2),
                    order,
                } => {
                    let first = retried.entry(*order).or_insert(*at);
                    *first = (*first).min(*at);
                }
                _ => {}
            }
        }
    }
    let mut gaps: Vec<Duration> = failed
        .iter()
        .filter_map(|(order, at)| retried.get(order).map(|again| clock::between(*at, *again)))
        .collect();
    let (low, high) = (
        Duration::from_millis(RETRY_MS - 50),
        Duration::from_millis(RETRY_MS + spec.lease_ms + 2000),
    );
    let (shortest, longest) = (quantile(&mut gaps, 0.0), quantile(&mut gaps, 1.0));
    report.check(
        "retries after the backoff",
        !gaps.is_empty() && shortest >= low && longest <= high,
        format!(
            "{} retries, {:.0} to {:.0} ms after the failure (backoff {RETRY_MS} ms)",
            gaps.len(),
            clock::ms(shortest),
            clock::ms(longest)
        ),
    );
    report.millis("retry after failure, median", quantile(&mut gaps, 0.5));

    // The killed relay's claims lapsed on the database clock.
    let held_ids: std::collections::HashSet<i64> = held.iter().map(|(id, _)| *id).collect();
    let ahead_owner = &relays[0].owner;
    let mut takeover = Duration::ZERO;
    for log in delivered
        .logs
        .iter()
        .filter(|log| &log.owner != ahead_owner)
    {
        for (at, event) in &log.events {
            if let Event::Claim(fences) = event
                && *at >= killed
                && fences.iter().any(|(id, _)| held_ids.contains(id))
            {
                takeover = takeover.max(clock::between(killed, *at));
            }
        }
    }
    let limit = Duration::from_millis(spec.lease_ms + 3000);
    report.check(
        "killed relay's claims taken over within the lease",
        takeover <= limit,
        format!(
            "{} held tasks, last taken over {:.0} ms after the kill (lease {} ms)",
            held.len(),
            clock::ms(takeover),
            spec.lease_ms
        ),
    );
    let duplicates: usize = delivered
        .deliveries
        .values()
        .filter(|list| list.len() > 1 && list[0].1 != *ahead_owner)
        .map(|list| list.len() - 1)
        .sum();
    report.check(
        "no duplicates beyond the kill",
        duplicates == 0,
        format!("{duplicates} duplicates not first delivered by the killed relay"),
    );
    drop(relays);
    Ok(())
}
