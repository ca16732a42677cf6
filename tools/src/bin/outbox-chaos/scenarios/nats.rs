//! NATS down for more than 10 s while three relays publish every task to
//! JetStream through `diesel-outbox-nats`: afterwards the stream holds exactly one
//! message per task id (replays were dropped by `Nats-Msg-Id`).

use std::{collections::HashSet, time::Duration};

use anyhow::Context as _;
use diesel_outbox_core::CancellationToken;
use diesel_outbox_nats::StreamSpec;

use super::{Ctx, pause, settle, setup, then_stop};
use crate::{
    clock,
    db::{self, ChaosDb},
    effect::{STREAM, publisher},
    producer::{self, Commit, Tally},
    records::Event,
    relays::RelaySpec,
    report::Report,
};

/// Every message in the stream: how many, and their task ids.
async fn stream_ids(url: &str) -> anyhow::Result<(u64, Vec<i64>)> {
    let jetstream = async_nats::jetstream::new(crate::effect::connect(url).await?);
    let mut stream = jetstream.get_stream(STREAM).await?;
    let state = stream.info().await?.state.clone();
    let mut ids = Vec::new();
    if state.messages > 0 {
        for sequence in state.first_sequence..=state.last_sequence {
            let message = stream.get_raw_message(sequence).await?;
            let received =
                diesel_outbox_nats::decode_parts(Some(&message.headers), &message.payload)?;
            ids.push(received.id.get());
        }
    }
    Ok((state.messages, ids))
}

/// Checks that the stream holds exactly one message per task id of `db`:
/// as many messages as tasks, and every task id among them.
pub(crate) async fn check_one_per_task<B: ChaosDb>(
    db: &B,
    url: &str,
    report: &mut Report,
) -> anyhow::Result<()> {
    let tasks: HashSet<i64> = db::task_ids(db)
        .await?
        .into_iter()
        .map(|id| id.get())
        .collect();
    let (messages, ids) = stream_ids(url).await?;
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    let exact = distinct == tasks && ids.len() == tasks.len();
    report.check(
        "one message per task id",
        exact,
        format!(
            "{messages} messages, {} distinct task ids, {} tasks",
            distinct.len(),
            tasks.len()
        ),
    );
    Ok(())
}

pub(crate) async fn run<B: ChaosDb>(
    ctx: &mut Ctx<'_, B>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut setup = setup(ctx, "nats").await?;
    let down = ctx.pick(Duration::from_secs(11), Duration::from_secs(20));
    let load = ctx.pick(Duration::from_secs(3), Duration::from_secs(10));
    let nats = ctx
        .nats
        .as_deref_mut()
        .context("the NATS scenario runs without a NATS server")?;
    let url = nats.url();
    // A fresh stream: task ids start again on each backend's database.
    let jetstream = async_nats::jetstream::new(async_nats::connect(&url).await?);
    let _ = jetstream.delete_stream(STREAM).await;
    StreamSpec::for_publisher(STREAM, &publisher(&url).await?)
        .ensure(&jetstream)
        .await?;
    drop(jetstream);

    let spec = RelaySpec {
        work_ms: 0,
        timeout_ms: 2000,
        lease_ms: 6000,
        retry_ms: 500,
        nats_url: Some(url.clone()),
        ..RelaySpec::default()
    };
    let mut relays = Vec::new();
    for slot in ["r1", "r2", "r3"] {
        relays.push(setup.relays.start(slot, &spec, ctx.run)?);
    }
    let tally = Tally::default();
    let stop = CancellationToken::new();
    let committed = || tally.committed().len();
    ctx.progress.phase(&format!(
        "a producer, 3 relays publishing to JetStream; NATS killed for {} s",
        down.as_secs()
    ));
    let producing = producer::run(&setup.db, Commit::Plain, 1, 100.0, &tally, &stop);
    let progress = &ctx.progress;
    let (dir, run) = (setup.dir.clone(), ctx.run);
    let outage = then_stop(&stop, async {
        pause(progress, load, "publishing", committed, &dir).await;
        progress.phase("NATS killed (SIGKILL)");
        let killed = clock::now_us();
        nats.kill().await?;
        pause(progress, down, "NATS down", committed, &dir).await;
        nats.restart(run).await?;
        let back = clock::now_us();
        progress.phase("NATS back");
        pause(progress, load, "publishing", committed, &dir).await;
        anyhow::Ok((killed, back))
    });
    let ((), outage) = tokio::join!(producing, outage);
    let (killed, back) = outage?;
    let delivered = settle(
        &setup.db,
        &setup.dir,
        Duration::from_secs(90),
        &ctx.progress,
        report,
    )
    .await?;

    check_one_per_task(&setup.db, &url, report).await?;
    let (mut begun, mut done) = (0usize, 0usize);
    let mut replays = 0;
    let mut first_after = None::<u64>;
    for log in &delivered.logs {
        for (at, event) in &log.events {
            match event {
                Event::Begin { .. } => begun += 1,
                Event::Done { replay, .. } => {
                    done += 1;
                    replays += usize::from(*replay);
                    if *at >= back {
                        first_after = Some(first_after.map_or(*at, |first| first.min(*at)));
                    }
                }
                _ => {}
            }
        }
    }
    report.millis("NATS down", clock::between(killed, back));
    report.figure(
        "attempts that did not publish (failed or cut at the timeout, retried)",
        begun.saturating_sub(done),
        "",
    );
    report.figure("replays JetStream dropped by Nats-Msg-Id", replays, "");
    if let Some(first) = first_after {
        report.millis(
            "NATS return to first acknowledged publish",
            clock::between(back, first),
        );
    }
    drop(relays);
    Ok(())
}
