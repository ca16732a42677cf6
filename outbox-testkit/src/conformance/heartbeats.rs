//! Relays that say they are alive: heartbeats in `outbox_relays`, read
//! back with their ages, expired when they stop coming, deleted when their
//! relay stops.

use std::time::Duration;

use diesel_outbox_core::{Heartbeat, Maintenance as _, RelaySeen};
use tokio_util::sync::CancellationToken;

use super::{
    relay::{relay_config, spawn_relay},
    support::{config, enqueue_committed, registry, task, worker},
};
use crate::{TestBackend, handler, wait::eventually};

/// Whether `age` is `expected` within two seconds (the database's clock
/// reads them, a moment after the test's).
fn about(age: Option<Duration>, expected: Duration) -> bool {
    age.is_some_and(|age| age.abs_diff(expected) < Duration::from_secs(2))
}

fn seen<'a>(relays: &'a [RelaySeen], owner: &str) -> Option<&'a RelaySeen> {
    relays.iter().find(|relay| relay.owner == owner)
}

/// A heartbeat is one row per relay, read back with its ages; one whose
/// time to live passed is not live; a stopped relay's row is deleted, and
/// a row whose heartbeats stopped a day ago goes with the next heartbeat.
pub async fn heartbeats_record_live_relays_and_forget_stopped_ones<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let store = db.store();
    assert!(store.relays().await?.is_empty());
    let mut alive = Heartbeat::new("relay-a", Duration::from_secs(60));
    alive.since_claim = Some(Duration::from_secs(2));
    store.beat(&alive).await?;
    let mut dead = Heartbeat::new("relay-b", Duration::from_secs(600));
    dead.ttl = Duration::ZERO;
    store.beat(&dead).await?;

    let relays = store.relays().await?;
    assert_eq!(relays.len(), 2, "{relays:?}");
    let a = seen(&relays, "relay-a").expect("relay-a");
    assert!(a.live, "{a:?}");
    assert_eq!(
        (a.pid, a.version.as_str()),
        (i64::from(alive.pid), alive.version.as_str())
    );
    assert_eq!(a.host, alive.host);
    assert!(about(Some(a.started), Duration::from_secs(60)), "{a:?}");
    assert!(about(Some(a.since_beat), Duration::ZERO), "{a:?}");
    assert!(about(a.since_claim, Duration::from_secs(2)), "{a:?}");
    assert_eq!(a.since_write, None);
    let b = seen(&relays, "relay-b").expect("relay-b");
    assert!(!b.live, "its time to live passed: {b:?}");
    assert_eq!(db.store().stats().await?.live_relays, 1);

    // Beating again writes the same row anew.
    alive.pid += 1;
    alive.since_write = Some(Duration::from_secs(1));
    store.beat(&alive).await?;
    let relays = store.relays().await?;
    assert_eq!(relays.len(), 2, "{relays:?}");
    let a = seen(&relays, "relay-a").expect("relay-a");
    assert_eq!(a.pid, i64::from(alive.pid));
    assert!(about(a.since_write, Duration::from_secs(1)), "{a:?}");

    store.forget_relay("relay-a").await?;
    let relays = store.relays().await?;
    assert_eq!(relays.len(), 1, "{relays:?}");
    assert!(seen(&relays, "relay-a").is_none());

    // Two days without a heartbeat: gone with the next relay's beat.
    let two_days_ago = B::instant_sql(chrono::Utc::now() - chrono::Duration::days(2));
    db.execute_sql(&format!(
        "UPDATE outbox_relays SET expires_at = {two_days_ago} WHERE owner = 'relay-b'"
    ))
    .await?;
    assert!(
        store.relays().await?.is_empty(),
        "a row older than a day is not shown"
    );
    store
        .beat(&Heartbeat::new("relay-c", Duration::ZERO))
        .await?;
    assert_eq!(db.count("outbox_relays").await?, 1);
    Ok(())
}

/// A running relay writes its heartbeat, with when it last claimed and
/// wrote, and deletes it when it stops.
pub async fn a_relay_beats_while_it_runs_and_forgets_its_row_when_stopped<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    enqueue_committed(db, (0..3).map(task).collect()).await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("relay-beats"))?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(worker, relay_config(), &shutdown)?;
    handle.wait_for_successes(3).await;
    // Written by the relay's maintenance task, every few seconds: no
    // signal announces a heartbeat.
    eventually(async || {
        let relays = db.store().relays().await?;
        Ok(seen(&relays, "relay-beats").is_some_and(|relay| {
            relay.live && relay.since_claim.is_some() && relay.since_write.is_some()
        }))
    })
    .await?;
    assert_eq!(db.store().stats().await?.live_relays, 1);
    shutdown.cancel();
    let report = relay.await?;
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(
        db.store().relays().await?.is_empty(),
        "the stopped relay's row is gone"
    );
    Ok(())
}

/// A worker delivering with `retry_pending` rounds writes its heartbeat
/// when asked: live for the time to live it gives, with its last claim and
/// write once a round (or a `send`) has run tasks; a time to live of zero
/// is refused by name, and writes nothing.
pub async fn a_worker_beats_beside_its_rounds<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("rounds-1"))?;
    let refused = worker
        .beat(Duration::ZERO)
        .await
        .err()
        .ok_or_else(|| anyhow::anyhow!("a time to live of zero was taken"))?;
    assert_eq!(refused.field(), Some("ttl"), "{refused}");
    assert!(db.store().relays().await?.is_empty());

    worker.beat(Duration::from_secs(60)).await?;
    let relays = db.store().relays().await?;
    let idle = seen(&relays, "rounds-1").expect("the worker's row");
    assert!(idle.live, "{idle:?}");
    assert_eq!((idle.since_claim, idle.since_write), (None, None));

    enqueue_committed(db, vec![task(1), task(2)]).await?;
    let report = worker.retry_pending(10).await?;
    assert_eq!(report.succeeded, 2);
    assert_eq!(handle.succeeded_ids().len(), 2);
    worker.beat(Duration::from_secs(60)).await?;
    let relays = db.store().relays().await?;
    let busy = seen(&relays, "rounds-1").expect("the worker's row");
    assert!(about(busy.since_claim, Duration::ZERO), "{busy:?}");
    assert!(about(busy.since_write, Duration::ZERO), "{busy:?}");
    assert_eq!(db.store().stats().await?.live_relays, 1);

    // A worker that only sends right after commit beats with that send's
    // claim and write.
    let (mock, _handle) = handler::recording();
    let sender = super::support::worker(db, registry(mock)?, config("sender-1"))?;
    let ids = enqueue_committed(db, vec![task(3)]).await?;
    sender.send(ids[0]).await?;
    sender.beat(Duration::from_secs(60)).await?;
    let relays = db.store().relays().await?;
    let sent = seen(&relays, "sender-1").expect("the sender's row");
    assert!(about(sent.since_claim, Duration::ZERO), "{sent:?}");
    assert!(about(sent.since_write, Duration::ZERO), "{sent:?}");

    db.store().forget_relay(&worker.config().owner).await?;
    db.store().forget_relay(&sender.config().owner).await?;
    assert!(db.store().relays().await?.is_empty());
    Ok(())
}
