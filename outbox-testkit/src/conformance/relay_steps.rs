//! The relay's maintenance task: scheduled tasks and lapsed leases reach a
//! handler without waiting for the poll.

use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use diesel_outbox_core::{LeaseRequest, RelayConfig, Status, Store};
use tokio_util::sync::CancellationToken;

use super::{
    relay::spawn_relay,
    support::{config, enqueue_committed, get, registry, task, worker},
};
use crate::{TestBackend, handler};

/// A task scheduled 700 ms ahead is delivered soon after it is due though
/// the relay polls every 10 s: its maintenance task sleeps until the next
/// due time, promotes the task and wakes the claim loop. (A task scheduled
/// while a relay sleeps is seen at its next poll, or at once with a store's
/// wake-ups.)
pub async fn relay_delivers_a_scheduled_task_when_due<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let due = Utc::now() + TimeDelta::milliseconds(700);
    let id = enqueue_committed(db, vec![task(1).not_before(due)]).await?[0];
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("relay"))?;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let relay = spawn_relay(
        worker,
        RelayConfig::default().poll_interval(Duration::from_secs(10)),
        &shutdown,
    )?;
    handle.wait_for_successes(1).await;
    let took = started.elapsed();
    shutdown.cancel();
    let report = relay.await?;
    assert!(Utc::now() >= due, "delivered before it was due");
    assert!(
        took < Duration::from_secs(5),
        "waited for the poll: {took:?}"
    );
    assert_eq!(report.promoted, 1, "{report:?}");
    assert_eq!(get(db, id).await?.status, Status::Succeeded);
    Ok(())
}

/// A task whose worker vanished mid-attempt (its lease lapses unwritten) is
/// rescued by a relay's maintenance task and delivered.
pub async fn relay_rescues_a_lapsed_lease<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let id = enqueue_committed(db, vec![task(1)]).await?[0];
    let lease = LeaseRequest {
        owner: "vanished".into(),
        duration: Duration::from_millis(300),
    };
    db.store().claim(id, &lease).await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("relay"))?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(
        worker,
        RelayConfig::default().poll_interval(Duration::from_millis(100)),
        &shutdown,
    )?;
    handle.wait_for_successes(1).await;
    shutdown.cancel();
    let report = relay.await?;
    assert_eq!(report.rescued, 1, "{report:?}");
    let record = get(db, id).await?;
    assert_eq!((record.status, record.attempts), (Status::Succeeded, 2));
    Ok(())
}

/// Finished rows waiting to be purged when the purge backlog test starts.
const PURGE_BACKLOG: u64 = 100_000;

/// A backlog of 100,000 finished rows to purge (retention just switched on,
/// say) does not hold promotion back: a task due 50 ms after the relay
/// starts reaches its handler while most of those rows still wait to be
/// purged, because each maintenance pass purges only a few statements
/// before it promotes and rescues again. A shutdown then does not wait for
/// the rest of the purge.
pub async fn a_purge_backlog_never_holds_promotion_back<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    db.execute_sql(&B::backlog_sql(
        crate::backlog::Backlog::Finished,
        PURGE_BACKLOG,
    ))
    .await?;
    let finished = "outbox_tasks WHERE kind = 'backlog.done'";
    anyhow::ensure!(db.count(finished).await? == i64::try_from(PURGE_BACKLOG)?);
    let id = enqueue_committed(
        db,
        vec![task(1).not_before(Utc::now() + TimeDelta::milliseconds(50))],
    )
    .await?[0];
    let (mock, handle) = handler::blocking();
    let worker = worker(db, registry(mock)?, config("relay"))?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(
        worker,
        RelayConfig::default()
            .poll_interval(Duration::from_millis(20))
            .retention(Duration::from_secs(60))
            .purge_batch(50)
            .shutdown_timeout(Duration::from_secs(5)),
        &shutdown,
    )?;
    handle.wait_for_blocked(1).await;
    let left = db.count(finished).await?;
    handle.release();
    handle.wait_for_successes(1).await;
    let stopping = Instant::now();
    shutdown.cancel();
    let report = relay.await?;
    assert!(
        left > 0,
        "the task was promoted only after the whole purge (rows left: {left})"
    );
    assert_eq!(report.promoted, 1, "{report:?}");
    assert!(
        report.purged < PURGE_BACKLOG,
        "the shutdown waited for the whole purge: {report:?}"
    );
    assert_eq!(report.errors, 0, "{report:?}");
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "the shutdown took {:?}",
        stopping.elapsed()
    );
    assert_eq!(get(db, id).await?.status, Status::Succeeded);
    Ok(())
}

/// Finished rows waiting when the purge pacing test starts: more than its
/// two relays purge in their windows. With 200,000, on PostgreSQL on a
/// fast machine of two cores, the relay keeping up purged about 50,000 in
/// its second and the one behind the other 150,000 before its two seconds
/// ended; three times as many leaves room for a machine faster still.
const PACING_BACKLOG: u64 = 600_000;

/// A purge that keeps up with its cycle pauses between passes as long as
/// each pass took, so it holds the database about half the time and the
/// claims keep the rest; a purge whose cycle has run for a whole
/// `purge_interval` has fallen behind and goes straight on. Two relays in
/// turn, over a backlog of finished rows they cannot purge within their
/// windows; each report gives the time its purge passes took.
pub async fn a_purge_pauses_between_passes_unless_behind<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    db.execute_sql(&B::backlog_sql(
        crate::backlog::Backlog::Finished,
        PACING_BACKLOG,
    ))
    .await?;
    let share = |interval: Duration, window: Duration| async move {
        let (mock, _handle) = handler::recording();
        let worker = worker(db, registry(mock)?, config("relay"))?;
        let shutdown = CancellationToken::new();
        let started = Instant::now();
        let relay = spawn_relay(
            worker,
            RelayConfig::default()
                .retention(Duration::from_secs(60))
                .purge_interval(interval)
                .purge_batch(100),
            &shutdown,
        )?;
        // The window is what is measured, not a wait for an event.
        tokio::time::sleep(window).await;
        shutdown.cancel();
        let report = relay.await?;
        let ran = started.elapsed();
        anyhow::ensure!(report.errors == 0, "{report:?}");
        anyhow::ensure!(report.purged > 0, "nothing purged: {report:?}");
        anyhow::Ok(report.purge_time.as_secs_f64() / ran.as_secs_f64())
    };
    // Keeping up: the next cycle is a minute away.
    let paced = share(Duration::from_secs(60), Duration::from_secs(1)).await?;
    // Behind once its cycle has run 250 ms: straight on after that
    // (the status counts, taken every interval, and each pass's promotion
    // and rescue take the rest of its time).
    let behind = share(Duration::from_millis(250), Duration::from_secs(2)).await?;
    // Rows were left to purge all along, or the shares say nothing: a
    // purge with nothing left to do pauses whatever its schedule.
    let left = db.count("outbox_tasks WHERE kind = 'backlog.done'").await?;
    assert!(
        left > 0,
        "the backlog of {PACING_BACKLOG} was gone before the windows ended"
    );
    assert!(
        paced < 0.6,
        "a purge keeping up held its connection {:.0}% of the time",
        paced * 100.0
    );
    assert!(
        behind > paced * 1.4,
        "a purge behind its cycle held its connection {:.0}% of the time, \
         one keeping up {:.0}%",
        behind * 100.0,
        paced * 100.0
    );
    Ok(())
}
