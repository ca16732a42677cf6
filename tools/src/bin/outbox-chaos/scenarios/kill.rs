//! Relays SIGKILLed every 2 s and started again, while producers commit:
//! nothing is lost, and each kill costs at most what the killed relay held
//! (tasks it claimed whose results it had not written) in duplicates.

use std::{collections::HashMap, time::Duration};

use diesel_outbox_core::CancellationToken;

use super::{Ctx, pause, settle, setup, then_stop};
use crate::{
    clock,
    db::ChaosDb,
    producer::{self, Commit, Tally},
    records,
    relays::RelaySpec,
    report::Report,
};

pub(crate) async fn run<B: ChaosDb>(
    ctx: &mut Ctx<'_, B>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut setup = setup(ctx, "kill").await?;
    let kills = ctx.pick(5, 20);
    // The effect halfway through the handler: a kill after it and before
    // the result is written makes it happen twice.
    let spec = RelaySpec {
        work_ms: 10,
        linger_ms: 10,
        ..RelaySpec::default()
    };
    let slots = ["r1", "r2", "r3"];
    let mut relays = Vec::new();
    for slot in slots {
        relays.push(setup.relays.start(slot, &spec, ctx.run)?);
    }
    let tally = Tally::default();
    let stop = CancellationToken::new();
    let committed = || tally.committed().len();
    ctx.progress.phase(&format!(
        "2 producers, 3 relays; one relay SIGKILLed every 2 s, {kills} times"
    ));
    let producing = producer::run(&setup.db, Commit::Plain, 2, 300.0, &tally, &stop);
    let progress = &ctx.progress;
    let (dir, run) = (setup.dir.clone(), ctx.run);
    let relays_ref = &mut relays;
    let starter = &mut setup.relays;
    let killing = then_stop(&stop, async {
        // (owner, what it held when killed)
        let mut held = Vec::new();
        for kill in 0..kills {
            pause(
                progress,
                Duration::from_secs(2),
                "killing relays",
                committed,
                &dir,
            )
            .await;
            let slot = kill % slots.len();
            let victim = &mut relays_ref[slot];
            victim.proc.kill().await?;
            let log = records::read_file(&dir.join(format!("{}.log", victim.owner)))?;
            held.push((victim.owner.clone(), log.held()));
            relays_ref[slot] = starter.start(slots[slot], &spec, run)?;
        }
        pause(
            progress,
            Duration::from_secs(1),
            "last relays running",
            committed,
            &dir,
        )
        .await;
        anyhow::Ok(held)
    });
    let ((), held) = tokio::join!(producing, killing);
    let held = held?;
    let started = clock::now_us();
    let delivered = settle(
        &setup.db,
        &setup.dir,
        Duration::from_secs(90),
        &ctx.progress,
        report,
    )
    .await?;

    // A duplicate belongs to whoever delivered first.
    let mut duplicates_of: HashMap<&str, usize> = HashMap::new();
    for list in delivered.deliveries.values() {
        if let Some((_, first, _)) = list.first() {
            *duplicates_of.entry(first.as_str()).or_default() += list.len() - 1;
        }
    }
    let mut per_kill = Vec::new();
    for (owner, fences) in &held {
        let duplicates = duplicates_of.remove(owner.as_str()).unwrap_or(0);
        per_kill.push((duplicates, fences.len()));
    }
    let over = per_kill.iter().filter(|(dup, held)| dup > held).count();
    let (total_held, from_kills) = per_kill
        .iter()
        .fold((0, 0), |(h, d), (dup, held)| (h + held, d + dup));
    report.check(
        "duplicates per kill <= held",
        over == 0,
        format!(
            "{over} of {} kills over; duplicates/held per kill: {}",
            per_kill.len(),
            per_kill
                .iter()
                .map(|(dup, held)| format!("{dup}/{held}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    );
    report.figure("relays killed", held.len(), "");
    report.figure("tasks the killed relays held", total_held, "");
    report.figure("duplicates after kills", from_kills, "");
    report.figure(
        "other duplicates",
        duplicates_of.values().sum::<usize>(),
        "",
    );
    report.millis(
        "drain after the last kill",
        clock::between(started, clock::now_us()),
    );
    drop(relays);
    Ok(())
}
