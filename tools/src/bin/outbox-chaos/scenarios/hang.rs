//! A handler that hangs past its lease on one relay of three: it blocks
//! its thread, so its timeout cannot cut it. Another relay takes the task
//! over when the lease lapses and delivers it; when the hung handler finally
//! fails, its late result is fenced out and changes nothing.

use std::time::Duration;

use diesel_outbox_core::{CancellationToken, Store};

use super::{Ctx, pause, settle, setup, then_stop};
use crate::{
    clock,
    db::{self, ChaosDb},
    producer::{self, Commit, Tally},
    records::{self, Event},
    relays::RelaySpec,
    report::Report,
    servers::wait_until,
};

pub(crate) async fn run<B: ChaosDb>(
    ctx: &mut Ctx<'_, B>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut setup = setup(ctx, "hang").await?;
    let load = ctx.pick(Duration::from_secs(4), Duration::from_secs(10));
    let spec = RelaySpec::default();
    let hanging = setup.relays.start(
        "hang",
        // One handler slot: while its handler hangs, this relay claims
        // nothing, not even the task it is still running once its lease
        // lapsed (with free slots it might, and hang on it again).
        &RelaySpec {
            hang: true,
            concurrency: 1,
            ..spec.clone()
        },
        ctx.run,
    )?;
    // The order the hanging relay will take, before the others start.
    let mut conn = setup.db.connect().await?;
    let task = db::enqueue_order::<B>(setup.db.store(), &mut conn, 0, true).await?;
    let id = task.get();
    let hang_log = setup.dir.join(format!("{}.log", hanging.owner));
    ctx.progress.phase(&format!(
        "relay {} hangs on task {id} past its {} ms lease",
        hanging.owner, spec.lease_ms
    ));
    wait_until(
        "the hanging relay's claim",
        Duration::from_secs(30),
        || async {
            let log = records::read_file(&hang_log)?;
            let began = log
                .events
                .iter()
                .any(|(_, e)| matches!(e, Event::Begin { fence: (t, _), .. } if *t == id));
            anyhow::ensure!(began, "not begun");
            Ok(())
        },
    )
    .await?;
    let mut relays = vec![hanging];
    for slot in ["r2", "r3"] {
        relays.push(setup.relays.start(slot, &spec, ctx.run)?);
    }

    let tally = Tally::default();
    let stop = CancellationToken::new();
    let producing = producer::run(&setup.db, Commit::Plain, 1, 50.0, &tally, &stop);
    let watching = then_stop(&stop, async {
        let started = tokio::time::Instant::now();
        // The late result: the hung relay's write of the task, after the hang.
        let late = wait_until(
            "the hung handler's late write",
            Duration::from_secs(60),
            || async {
                let log = records::read_file(&hang_log)?;
                let written = log.events.iter().any(|(_, e)| {
                matches!(e, Event::Write { fences, .. } if fences.iter().any(|(t, _)| *t == id))
            });
                anyhow::ensure!(written, "not written yet");
                Ok(())
            },
        )
        .await;
        // What the table says right after it (well within the 200 ms
        // backoff a late failure would set): the takeover's success.
        let record = setup.db.store().get(task).await;
        let rest = load.saturating_sub(started.elapsed());
        pause(
            &ctx.progress,
            rest,
            "other relays delivering",
            || tally.committed().len(),
            &setup.dir,
        )
        .await;
        (late, record)
    });
    let ((), (late, record)) = tokio::join!(producing, watching);
    late?;
    let record = record?;
    let delivered = settle(
        &setup.db,
        &setup.dir,
        Duration::from_secs(60),
        &ctx.progress,
        report,
    )
    .await?;

    let hang_owner = relays[0].owner.clone();
    let mut began = None;
    let mut late_write = None;
    for (at, event) in &records::read_file(&hang_log)?.events {
        match event {
            Event::Begin { fence: (t, _), .. } if *t == id => began = began.or(Some(*at)),
            Event::Write { applied, fences } if fences.iter().any(|(t, _)| *t == id) => {
                late_write = late_write.or(Some((*at, *applied, fences.len())));
            }
            _ => {}
        }
    }
    let effects = delivered.deliveries.get(&0).cloned().unwrap_or_default();
    let by_others: Vec<_> = effects
        .iter()
        .filter(|(_, owner, _)| *owner != hang_owner)
        .collect();
    report.check(
        "taken over and delivered by another relay",
        effects.len() == 1 && by_others.len() == 1,
        format!(
            "delivered {} times, {} by another relay",
            effects.len(),
            by_others.len()
        ),
    );
    let fenced = record.finished_at.is_some() && !record.last_error.contains("hung");
    report.check(
        "late result fenced out",
        fenced,
        if fenced {
            "the task stayed finished after the hung handler's write".to_owned()
        } else {
            format!(
                "the late failure was applied: last_error {:?}",
                record.last_error
            )
        },
    );
    if let (Some(began), Some((at, applied, results))) = (began, late_write) {
        report.millis("handler hung for", clock::between(began, at));
        report.figure(
            "late write: results / rows applied",
            format!("{results} / {applied}"),
            "",
        );
        if let Some((taken, _, _)) = by_others.first() {
            report.millis(
                "hang start to delivery by another relay",
                clock::between(began, *taken),
            );
        }
    }
    drop(relays);
    Ok(())
}
