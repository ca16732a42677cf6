//! The relay: several at once, ordering keys under failures, shutdown,
//! retention and operations (issue proofs of the relay).

use std::{collections::HashMap, time::Duration};

use diesel_outbox_core::{
    Delivery, Error, Handler, HandlerError, Maintenance, Registry, Relay, RelayConfig, RelayReport,
    RetryPolicy, Status, Store, Task, TaskId, Worker, handler_fn,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::support::{KIND, config, enqueue_batch, enqueue_committed, get, registry, task, worker};
use crate::{TestBackend, handler};

/// Settings for relays in tests: quick polls, retries due soon.
pub fn relay_config() -> RelayConfig {
    RelayConfig::default().poll_interval(Duration::from_millis(50))
}

/// Starts a relay over `worker` in a task of its own.
pub fn spawn_relay<S: Maintenance>(
    worker: Worker<S>,
    config: RelayConfig,
    shutdown: &CancellationToken,
) -> anyhow::Result<JoinHandle<RelayReport>> {
    let relay = Relay::new(worker, config)?;
    let shutdown = shutdown.clone();
    Ok(tokio::spawn(async move { relay.run(shutdown).await }))
}

/// Three relays in one process over 5,000 tasks: each task is handled
/// exactly once and all succeed.
pub async fn three_relays_deliver_each_task_once<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_batch(db, (0..5000).map(task).collect()).await?;
    let (mock, handle) = handler::recording();
    let registry = registry(mock)?;
    let shutdown = CancellationToken::new();
    let mut relays = Vec::new();
    for n in 0..3 {
        let worker = worker(db, registry.clone(), config(&format!("relay-{n}")))?;
        relays.push(spawn_relay(worker, relay_config(), &shutdown)?);
    }
    handle.wait_for_successes(ids.len()).await;
    shutdown.cancel();
    let mut claimed = Vec::new();
    for relay in relays {
        claimed.push(relay.await?.claimed);
    }
    let mut seen: HashMap<TaskId, usize> = HashMap::new();
    for delivery in handle.deliveries() {
        *seen.entry(delivery.id).or_default() += 1;
    }
    assert_eq!(seen.len(), ids.len());
    assert!(seen.values().all(|&n| n == 1), "a task was handled twice");
    assert_eq!(
        claimed.iter().sum::<u64>(),
        5000,
        "claims per relay: {claimed:?}"
    );
    let stats = db.store().stats().await?;
    assert_eq!((stats.backlog(), stats.succeeded), (0, 5000));
    Ok(())
}

/// Fails a third of its calls at random (retryably), else delegates.
fn flaky(inner: impl Handler) -> impl Handler {
    let inner = std::sync::Arc::new(inner);
    handler_fn(move |delivery: Delivery| {
        let inner = std::sync::Arc::clone(&inner);
        async move {
            if fastrand::u8(..3) == 0 {
                return Err(HandlerError::retryable(anyhow::anyhow!("random failure")));
            }
            inner.handle(delivery).await
        }
    })
}

/// 20 keys × 50 tasks through three relays with a handler failing at random:
/// for every key the successful deliveries come in id order; keyless tasks
/// still flow while a key is blocked by a failed task.
pub async fn ordering_keys_hold_under_random_failures<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for n in 0..50 {
        for key in 0..20 {
            tasks.push(task(n).ordering_key(format!("key-{key}")));
        }
    }
    // A key blocked by a task that fails for good, and keyless tasks.
    tasks.push(Task::new("order.rejected", 1, "{}").ordering_key("blocked"));
    tasks.push(task(0).ordering_key("blocked"));
    tasks.extend((0..100).map(task));
    let ids = enqueue_batch(db, tasks).await?;
    let keyed = &ids[..1000];
    let blocked_behind = ids[1001];

    let (mock, handle) = handler::recording();
    let (rejecting, _) = handler::failing_permanently();
    let registry = Registry::builder()
        .handler(KIND, 1, flaky(mock))
        .handler("order.rejected", 1, rejecting)
        .build()?;
    let fast_retry = RetryPolicy::new(Duration::from_millis(5), Duration::from_millis(20), 0.5)?;
    let shutdown = CancellationToken::new();
    let mut relays = Vec::new();
    for n in 0..3 {
        let config = config(&format!("relay-{n}")).retry(fast_retry);
        relays.push(spawn_relay(
            worker(db, registry.clone(), config)?,
            relay_config(),
            &shutdown,
        )?);
    }
    handle.wait_for_successes(1100).await;
    shutdown.cancel();
    for relay in relays {
        relay.await?;
    }

    let mut by_key: HashMap<String, Vec<TaskId>> = HashMap::new();
    for id in handle.succeeded_ids() {
        let record = get(db, id).await?;
        if let Some(key) = record.task.ordering_key {
            by_key.entry(key).or_default().push(id);
        }
    }
    assert_eq!(by_key.len(), 20, "keys delivered: {:?}", by_key.keys());
    for (key, delivered) in &by_key {
        assert_eq!(delivered.len(), 50, "key {key}");
        assert!(
            delivered.windows(2).all(|w| w[0] < w[1]),
            "key {key} out of order: {delivered:?}"
        );
    }
    assert_eq!(handle.succeeded_ids().len(), 1100);
    assert!(keyed.iter().all(|id| handle.succeeded_ids().contains(id)));
    let waiting = get(db, blocked_behind).await?;
    assert_eq!((waiting.status, waiting.attempts), (Status::Blocked, 0));
    Ok(())
}

/// Shutdown while 10 handlers are blocked: `run` returns once they finish,
/// having written their results.
pub async fn shutdown_waits_for_running_handlers<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_committed(db, (0..10).map(task).collect()).await?;
    let (mock, handle) = handler::blocking();
    let worker = worker(db, registry(mock)?, config("relay"))?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(worker, relay_config(), &shutdown)?;
    handle.wait_for_blocked(10).await;
    shutdown.cancel();
    assert!(
        !relay.is_finished(),
        "run returned with handlers still running"
    );
    handle.release();
    let report = relay.await?;
    assert_eq!((report.claimed, report.succeeded), (10, 10));
    for id in ids {
        assert_eq!(get(db, id).await?.status, Status::Succeeded);
    }
    Ok(())
}

/// A handler that blocks its thread holds up the deliveries that share its
/// task, not the relay's loop: the results of the claim's other task are
/// written while it blocks. On a runtime of two threads a claim of four runs
/// as two tasks of two, in claim order, and only the first holds a handler
/// that blocks. (Needs two worker threads or more: with one, the blocked
/// thread would stop the test's own timer. The handler tasks' letting the
/// loop run after each message is not exercised here: that race does not
/// come on demand.)
pub async fn a_handler_blocking_its_thread_does_not_stop_the_relay<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        tokio::runtime::Handle::current().metrics().num_workers() >= 2,
        "needs a runtime of two worker threads or more"
    );
    let tasks =
        ["returns", "blocks", "returns", "returns"].map(|payload| Task::new(KIND, 1, payload));
    let ids = enqueue_committed(db, tasks.to_vec()).await?;
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Arc::new(std::sync::Mutex::new(released));
    let blocking = handler_fn(move |delivery: Delivery| {
        let released = std::sync::Arc::clone(&released);
        async move {
            if delivery.payload() == b"blocks" {
                // A synchronous call: nothing else runs on this thread
                // until the test lets it return.
                let _ = released.lock().map(|released| released.recv());
            }
            Ok::<(), HandlerError>(())
        }
    });
    let worker = worker(db, registry(blocking)?, config("relay"))?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(worker, relay_config(), &shutdown)?;
    let written = tokio::time::timeout(
        Duration::from_secs(10),
        crate::wait::eventually(async || {
            for id in [ids[2], ids[3]] {
                if get(db, id).await?.status != Status::Succeeded {
                    return Ok(false);
                }
            }
            Ok(true)
        }),
    )
    .await;
    // The one that returned before the handler that blocks, in the same
    // task, waits with it.
    let held_up = get(db, ids[0]).await?.status;
    let _ = release.send(());
    shutdown.cancel();
    let report = relay.await?;
    written.map_err(|_| {
        anyhow::anyhow!("no result was written in 10 s while one handler blocked its thread")
    })??;
    assert_eq!(held_up, Status::Running);
    assert_eq!((report.claimed, report.succeeded), (4, 4));
    for id in ids {
        assert_eq!(get(db, id).await?.status, Status::Succeeded);
    }
    Ok(())
}

/// Shutdown while 10 handlers hang: `run` returns at the deadline and gives
/// every claim back, so no lease it took outlives its return.
pub async fn shutdown_deadline_gives_claims_back<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_committed(db, (0..10).map(task).collect()).await?;
    let (mock, handle) = handler::blocking();
    let worker = worker(db, registry(mock)?, config("relay"))?;
    let shutdown = CancellationToken::new();
    let relay_config = relay_config().shutdown_timeout(Duration::from_millis(200));
    let relay = spawn_relay(worker, relay_config, &shutdown)?;
    handle.wait_for_blocked(10).await;
    let cancelled = std::time::Instant::now();
    shutdown.cancel();
    let report = relay.await?;
    let took = cancelled.elapsed();
    assert!(
        took >= Duration::from_millis(200),
        "returned before the deadline: {took:?}"
    );
    assert!(
        took < Duration::from_secs(4),
        "returned long after the deadline: {took:?}"
    );
    assert_eq!(report.released, 10);
    for id in ids {
        let record = get(db, id).await?;
        assert_eq!((record.status, record.attempts), (Status::Available, 1));
        assert!(
            record.lease.is_none(),
            "task {id} kept its lease after run returned"
        );
    }
    assert_eq!(handle.blocked(), 0, "a cut handler is still running");
    Ok(())
}

/// 2020-01-01 00:00:00 UTC in the backend's time columns.
fn long_ago<B: TestBackend>() -> String {
    B::instant_sql(
        chrono::DateTime::<chrono::Utc>::from_timestamp(1_577_836_800, 0).unwrap_or_default(),
    )
}

/// Purge removes only finished rows older than the retention, in batches;
/// pending and recent rows stay. A relay applies retention on its own.
pub async fn purge_keeps_unfinished_and_recent_rows<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_committed(db, (0..6).map(task).collect()).await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    for &id in &ids[..4] {
        worker.send(id).await?;
    }
    // Tasks 0..3 are succeeded; 0 and 1 finished long ago, 2 and 3 just now.
    let old = format!(
        "UPDATE outbox_tasks SET finished_at = {} WHERE id IN ({}, {})",
        long_ago::<B>(),
        ids[0],
        ids[1]
    );
    db.execute_sql(&old).await?;
    let day = Duration::from_secs(24 * 3600);
    assert_eq!(db.store().purge_finished(day, 1).await?, 2);
    assert_eq!(db.count_tasks().await?, 4);
    for &id in &ids[2..] {
        assert!(db.store().get(id).await.is_ok(), "task {id} was purged");
    }
    let zero = db.store().purge_finished(day, 0).await;
    assert_eq!(zero.err().and_then(|e| e.field()), Some("batch"));

    // The relay purges at its retention on its own: make 2 and 3 old too.
    db.execute_sql(&format!(
        "UPDATE outbox_tasks SET finished_at = {} WHERE id IN ({}, {})",
        long_ago::<B>(),
        ids[2],
        ids[3]
    ))
    .await?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(worker, relay_config().retention(day), &shutdown)?;
    // The first pass purges before it claims, so once task 4 is handled the
    // purge has run.
    handle.wait_for_successes(5).await;
    shutdown.cancel();
    let report = relay.await?;
    assert_eq!(report.purged, 2);
    assert!(matches!(
        db.store().get(ids[2]).await,
        Err(Error::NotFound(_))
    ));
    assert!(
        db.store().get(ids[4]).await.is_ok(),
        "a just-finished task was purged"
    );
    Ok(())
}

/// `stats` ages the task due longest (available, or waiting past its due
/// time and not yet promoted, whichever waited longer) and the running task
/// whose lease ends first, from rows set by hand as a stalled outbox leaves
/// them; both are `None` when no task is due or running.
pub async fn stats_age_the_oldest_due_and_running_tasks<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let fresh = db.store().stats().await?;
    assert_eq!(
        (fresh.oldest_due_age, fresh.oldest_running_age),
        (None, None)
    );
    let ids = enqueue_committed(db, (0..3).map(task).collect()).await?;
    let ago =
        |minutes: i64| B::instant_sql(chrono::Utc::now() - chrono::Duration::minutes(minutes));
    let set = |id: TaskId, columns: String| {
        format!("UPDATE outbox_tasks SET {columns} WHERE id = {}", id.get())
    };
    db.execute_sql(&set(ids[0], format!("next_attempt_at = {}", ago(10))))
        .await?;
    db.execute_sql(&set(
        ids[1],
        format!("status = 'waiting', next_attempt_at = {}", ago(60)),
    ))
    .await?;
    db.execute_sql(&set(
        ids[2],
        format!(
            "status = 'running', attempts = 1, lease_owner = 'stalled', \
             lease_expires_at = {}, updated_at = {}",
            ago(-5),
            ago(30)
        ),
    ))
    .await?;
    let minutes = |age: Option<Duration>| age.map(|age| age.as_secs_f64() / 60.0);
    let near = |age: Option<Duration>, expected: f64| {
        minutes(age).is_some_and(|m| (m - expected).abs() < 2.0)
    };
    let stats = db.store().stats().await?;
    assert!(
        near(stats.oldest_due_age, 60.0),
        "the overdue waiting task waited longest: {stats:?}"
    );
    assert!(near(stats.oldest_running_age, 30.0), "{stats:?}");
    let ages = db.store().ages().await?;
    assert!(
        near(ages.oldest_due, 60.0) && near(ages.oldest_running, 30.0),
        "{ages:?}"
    );

    // Not due yet, the waiting task is left out: the available one remains.
    let in_an_hour = B::instant_sql(chrono::Utc::now() + chrono::Duration::hours(1));
    db.execute_sql(&set(ids[1], format!("next_attempt_at = {in_an_hour}")))
        .await?;
    let stats = db.store().stats().await?;
    assert!(near(stats.oldest_due_age, 10.0), "{stats:?}");
    Ok(())
}

/// `stats` counts per status and ages the oldest due task; `requeue` gives
/// a failed task another chance with its attempts kept, and refuses others.
pub async fn stats_and_requeue<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_committed(db, (0..4).map(task).collect()).await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    worker.send(ids[0]).await?;
    handle.fail_permanently();
    assert!(worker.send(ids[1]).await.is_err());
    let stats = db.store().stats().await?;
    assert_eq!(
        (
            stats.available,
            stats.succeeded,
            stats.failed,
            stats.backlog()
        ),
        (2, 1, 1, 2)
    );
    assert!(stats.oldest_due_age.is_some(), "two tasks are due");

    let store = db.store();
    store.requeue(ids[1]).await?;
    let requeued = get(db, ids[1]).await?;
    assert_eq!((requeued.status, requeued.attempts), (Status::Available, 1));
    assert!(requeued.finished_at.is_none());
    assert!(
        requeued
            .last_error
            .contains(handler::INJECTED_PERMANENT_FAILURE)
    );
    handle.succeed();
    worker.send(ids[1]).await?;
    let sent = get(db, ids[1]).await?;
    assert_eq!(
        (sent.status, sent.attempts, sent.last_error.as_str()),
        (Status::Succeeded, 2, "")
    );

    let not_failed = store.requeue(ids[2]).await;
    assert!(
        matches!(
            not_failed,
            Err(Error::NotFailed {
                status: Status::Available,
                ..
            })
        ),
        "{not_failed:?}"
    );
    let missing = store.requeue(TaskId::new(987_654_321)).await;
    assert!(matches!(missing, Err(Error::NotFound(_))), "{missing:?}");
    Ok(())
}

/// The relay sleeps until the next retry is due rather than a whole poll
/// interval: a retry due in 300 ms is delivered long before a 10 s poll.
pub async fn relay_wakes_for_the_next_due_retry<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let id = enqueue_committed(db, vec![task(1)]).await?[0];
    let (mock, handle) = handler::failing(1);
    let retry = RetryPolicy::new(Duration::from_millis(300), Duration::from_millis(300), 0.0)?;
    let worker = worker(db, registry(mock)?, config("relay").retry(retry))?;
    let shutdown = CancellationToken::new();
    let started = std::time::Instant::now();
    let relay = spawn_relay(
        worker,
        RelayConfig::default().poll_interval(Duration::from_secs(10)),
        &shutdown,
    )?;
    handle.wait_for_successes(1).await;
    let took = started.elapsed();
    shutdown.cancel();
    relay.await?;
    assert!(
        took < Duration::from_secs(5),
        "the retry waited for the poll: {took:?}"
    );
    assert_eq!(get(db, id).await?.attempts, 2);
    Ok(())
}

/// A relay claims only as many tasks as it has free handler slots, so no
/// claim waits unstarted while its lease runs down; on shutdown the tasks it
/// never claimed are untouched.
pub async fn relay_claims_only_what_it_can_start<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_committed(db, (0..10).map(task).collect()).await?;
    let (mock, handle) = handler::blocking();
    let config = config("relay").concurrency(2);
    let worker = worker(db, registry(mock)?, config)?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(worker, relay_config(), &shutdown)?;
    handle.wait_for_blocked(2).await;
    // Two slots, two claims: the other eight stay free for other relays.
    let leased = db.count("outbox_tasks WHERE lease_owner = 'relay'").await?;
    assert_eq!(leased, 2, "the relay claimed more than it could start");
    shutdown.cancel();
    handle.release();
    let report = relay.await?;
    assert_eq!(
        (report.claimed, report.succeeded, report.released),
        (2, 2, 0)
    );
    let mut started = 0;
    for id in ids {
        let record = get(db, id).await?;
        assert!(record.lease.is_none(), "task {id} kept its lease");
        match record.status {
            Status::Succeeded => started += 1,
            Status::Available => assert_eq!(record.attempts, 0),
            other => panic!("task {id} is {other}"),
        }
    }
    assert_eq!(started, 2);
    assert_eq!(handle.calls(), 2);
    Ok(())
}
