//! The database restarted twice under load: producers commit orders with
//! their tasks through the backend's `transaction` helper (which sends after
//! commit) while three relays deliver; the server is crashed and started
//! again twice. Nothing is lost, the same relay processes carry on, and the
//! report says how soon results were written again.

use std::time::Duration;

use diesel_outbox_core::{CancellationToken, RetryPolicy, Worker, WorkerConfig};

use super::{Ctx, pause, settle, setup, then_stop};
use crate::{
    clock,
    db::ChaosDb,
    effect::{self, Behaviour},
    producer::{self, Commit, Tally},
    records::{self, Recorder},
    relays::RelaySpec,
    report::Report,
    servers::DbServer,
};

pub(crate) async fn run<B: ChaosDb>(
    ctx: &mut Ctx<'_, B>,
    report: &mut Report,
) -> anyhow::Result<()> {
    let mut setup = setup(ctx, "restart").await?;
    let (load, down) = ctx.pick(
        (Duration::from_secs(3), Duration::from_secs(1)),
        (Duration::from_secs(10), Duration::from_secs(3)),
    );
    let spec = RelaySpec {
        work_ms: 20,
        ..RelaySpec::default()
    };
    let mut relays = Vec::new();
    for slot in ["r1", "r2", "r3"] {
        relays.push(setup.relays.start(slot, &spec, ctx.run)?);
    }
    // The service: sends right after commit, two at a time, so a good share
    // of the tasks is left to the relays, as under a burst.
    let service = Worker::with_config(
        setup.db.store().clone(),
        effect::registry(
            Recorder::open(&setup.dir.join("service.log"))?,
            Behaviour {
                work: Duration::from_millis(20),
                ..Behaviour::default()
            },
        )?,
        WorkerConfig::default()
            .owner("service")
            .concurrency(2)
            .handler_timeout(Duration::from_secs(1))
            .lease_duration(Duration::from_secs(3))
            .retry(RetryPolicy::new(
                Duration::from_millis(200),
                Duration::from_millis(200),
                0.0,
            )?),
    )?;
    let tally = Tally::default();
    let stop = CancellationToken::new();
    let committed = || tally.committed().len();
    ctx.progress.phase(&format!(
        "4 producers through `transaction`, 3 relays; {} twice",
        B::Server::CRASH
    ));
    let producing = producer::run(&setup.db, Commit::Helper(&service), 4, 200.0, &tally, &stop);
    let progress = &ctx.progress;
    let dir = setup.dir.clone();
    let server = &mut *ctx.server;
    let run = ctx.run;
    let faults = then_stop(&stop, async {
        let mut outages = Vec::new();
        for round in 1..=2 {
            pause(progress, load, "under load", committed, &dir).await;
            progress.phase(&format!("crash {round}: {}", B::Server::CRASH));
            let crashed = clock::now_us();
            server.crash().await?;
            pause(progress, down, "server down", committed, &dir).await;
            server.restart(run).await?;
            let back = clock::now_us();
            progress.phase(&format!(
                "server back after {:.0} ms",
                clock::ms(clock::between(crashed, back))
            ));
            outages.push((crashed, back));
        }
        pause(progress, load, "under load", committed, &dir).await;
        anyhow::Ok(outages)
    });
    let ((), outages) = tokio::join!(producing, faults);
    let outages = outages?;
    service.wait_idle().await;

    let delivered = settle(
        &setup.db,
        &setup.dir,
        Duration::from_secs(90),
        &ctx.progress,
        report,
    )
    .await?;

    // Every commit that returned Ok is in the database; some that returned
    // an error are too (the connection broke after the server committed).
    let orders: std::collections::HashSet<i64> = delivered.orders.iter().copied().collect();
    let ok = tally.committed();
    let vanished = ok
        .iter()
        .filter(|(order, _, _)| !orders.contains(order))
        .count();
    report.check(
        "every Ok commit kept",
        vanished == 0,
        format!(
            "{vanished} of {} orders whose commit returned Ok are missing",
            ok.len()
        ),
    );
    let errors = tally.errors();
    let committed_anyway = errors
        .iter()
        .filter(|(order, _)| orders.contains(order))
        .count();
    report.figure("commits that returned an error", errors.len(), "");
    report.figure("... of which committed all the same", committed_anyway, "");

    // The same relay processes wrote results again after each return.
    let mut recovered = true;
    for (round, (crashed, back)) in outages.iter().enumerate() {
        let mut firsts = Vec::new();
        for relay in &mut relays {
            let log = records::read_file(&setup.dir.join(format!("{}.log", relay.owner)))?;
            let alive = relay.proc.running();
            match log.first_write_after(*back) {
                Some(at) if alive => firsts.push(clock::between(*back, at)),
                _ => recovered = false,
            }
        }
        let n = round + 1;
        report.millis(
            &format!("restart {n}: server down"),
            clock::between(*crashed, *back),
        );
        if let (Some(first), Some(last)) = (firsts.iter().min(), firsts.iter().max()) {
            report.millis(
                &format!("restart {n}: return to first write-back, first relay"),
                *first,
            );
            report.millis(
                &format!("restart {n}: return to first write-back, last relay"),
                *last,
            );
        }
    }
    report.check(
        "relays recover without a restart",
        recovered,
        if recovered {
            "all 3 relay processes wrote results after each return".to_owned()
        } else {
            "a relay process exited or wrote nothing after a return".to_owned()
        },
    );
    Ok(())
}
