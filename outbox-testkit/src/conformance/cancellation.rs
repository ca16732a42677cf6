//! Callers that give up: every public operation that writes, dropped after
//! 1, 2, 3, ... polls, leaves no transaction open, no row locked, and its
//! tasks in states the lifecycle allows.
//!
//! A web handler awaiting the outbox is dropped when its client
//! disconnects; a timeout drops what it wraps; an aborted task drops
//! everything it was awaiting. Each sweep below runs one operation on fresh
//! tasks of an ordering key of its own, polls it `n` times and drops it, for
//! `n` = 1, 2, 3, ... until the operation finishes before the `n`-th poll,
//! and after each drop checks:
//!
//! - no session is left idle inside a transaction (SQLite: another
//!   connection takes the write lock at once), within a few seconds of the
//!   drop: the server rolls back as soon as it sees the connection close;
//! - the key's row is not locked: the key's next enqueue commits at once;
//! - no task row is locked: a task left running is rescued once its lease
//!   lapsed (rescues skip locked rows, so a locked one would stay running);
//! - the key's tasks are in states the lifecycle allows: the lowest
//!   unfinished task heads the key, every later one is blocked, and the
//!   key's count of open tasks is exactly the number of unfinished tasks.

use std::{
    future::Future,
    pin::pin,
    task::Poll,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use diesel_async::AsyncConnection;
use diesel_outbox_core::{
    CancellationToken, Inbox, Maintenance, PageRequest, Relay, RelayConfig, Status, Store, Task,
    TaskFilter, TaskId, Worker, WorkerConfig,
};

use super::support::{KIND, enqueue_committed, immediate_retry, registry};
use crate::{TestBackend, handler};

/// Polls before a sweep gives up on an operation ever finishing.
const MAX_POLLS: usize = 400;

/// How long the checks after a drop may take: the server's rollback of a
/// closed connection, a lease lapsing, a rescue.
const SETTLE: Duration = Duration::from_secs(10);

/// Polls `future` until it has returned `Pending` `polls` times, then drops
/// it; `Some(output)` when it finished first. Each poll after the first
/// happens when the future's own waker asks for it, so every await point
/// the future reaches is a place it can be dropped at.
pub async fn poll_then_drop<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = pin!(future);
    let mut pending = 0;
    std::future::poll_fn(|cx| match future.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending => {
            pending += 1;
            if pending >= polls {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        }
    })
    .await
}

/// A worker whose leases lapse soon after a drop, so that the checks can
/// rescue what a dropped send left running.
fn short_lease_worker<B: TestBackend>(db: &B, owner: &str) -> anyhow::Result<Worker<B::Store>> {
    let (mock, _) = handler::recording();
    let config = WorkerConfig::default()
        .owner(owner)
        .retry(immediate_retry())
        .handler_timeout(Duration::from_millis(100))
        .lease_duration(Duration::from_millis(300));
    Ok(Worker::with_config(
        db.store().clone(),
        registry(mock)?,
        config,
    )?)
}

/// Two tasks of `key`, committed: the head and one blocked behind it.
async fn head_and_next<B: TestBackend>(db: &B, key: &str) -> anyhow::Result<(TaskId, TaskId)> {
    let ids = enqueue_committed(
        db,
        vec![
            Task::new(KIND, 1, "{}").ordering_key(key),
            Task::new(KIND, 1, "{}").ordering_key(key),
        ],
    )
    .await?;
    Ok((ids[0], ids[1]))
}

/// Runs the operation `make` builds (from the key and what `setup`
/// returned) for `n` = 1, 2, ... polls, each on a key of its own prepared
/// by `setup`, checking what each drop left; ends once an operation
/// finished within its polls, and returns how many polls that took.
async fn sweep<B, S, SF, M, MF, T>(
    db: &B,
    name: &str,
    mut setup: S,
    mut make: M,
) -> anyhow::Result<usize>
where
    B: TestBackend,
    S: FnMut(String) -> SF,
    SF: Future<Output = anyhow::Result<Vec<TaskId>>>,
    M: FnMut(String, Vec<TaskId>) -> MF,
    MF: Future<Output = T>,
{
    for polls in 1..=MAX_POLLS {
        let key = format!("{name}-{polls}");
        let ids = setup(key.clone()).await?;
        let finished = poll_then_drop(make(key.clone(), ids), polls)
            .await
            .is_some();
        settled(db, &key)
            .await
            .with_context(|| format!("{name} dropped after {polls} polls"))?;
        if finished {
            return Ok(polls);
        }
    }
    bail!("{name} did not finish within {MAX_POLLS} polls")
}

/// The checks after one drop (see the module documentation).
async fn settled<B: TestBackend>(db: &B, key: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let open = db.abandoned_transactions().await?;
        if open == 0 {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{open} session(s) still idle in a transaction {SETTLE:?} after the drop"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The key's row is free: the next enqueue of the key commits at once.
    tokio::time::timeout(
        Duration::from_secs(3),
        enqueue_committed(db, vec![Task::new(KIND, 1, "{}").ordering_key(key)]),
    )
    .await
    .context("the key's next enqueue waited: its row is still locked")??;
    // No task row is locked: whatever is running is rescued once its
    // lease lapsed.
    loop {
        let tasks = tasks_of(db, key).await?;
        if !tasks.iter().any(|(_, status)| *status == Status::Running) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "a running task of the key was not rescued {SETTLE:?} after the drop: its row is locked"
        );
        db.store().rescue(100).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lifecycle_holds(db, key).await
}

/// The key's tasks, lowest id first.
async fn tasks_of<B: TestBackend>(db: &B, key: &str) -> anyhow::Result<Vec<(TaskId, Status)>> {
    let page = db
        .store()
        .list(
            &TaskFilter::new().ordering_key(key),
            &PageRequest::first(PageRequest::MAX_LIMIT)?
                .order(diesel_outbox_core::Order::OldestFirst),
        )
        .await?;
    Ok(page
        .records
        .into_iter()
        .map(|record| (record.id, record.status))
        .collect())
}

/// The lowest unfinished task of `key` heads it, every later one is
/// blocked, and the key's count is the number of unfinished tasks.
async fn lifecycle_holds<B: TestBackend>(db: &B, key: &str) -> anyhow::Result<()> {
    let tasks = tasks_of(db, key).await?;
    let unfinished: Vec<&(TaskId, Status)> = tasks
        .iter()
        .filter(|(_, status)| !matches!(status, Status::Succeeded | Status::Discarded))
        .collect();
    if let Some(((_, head), rest)) = unfinished.split_first().map(|(h, r)| (*h, r)) {
        ensure!(
            *head != Status::Blocked,
            "the key's first unfinished task is blocked: {tasks:?}"
        );
        ensure!(
            rest.iter().all(|(_, status)| *status == Status::Blocked),
            "a task behind the key's head is not blocked: {tasks:?}"
        );
    }
    let open = unfinished.len();
    let rows = db
        .count(&format!(
            "outbox_ordering_keys WHERE ordering_key = '{key}' AND open_tasks = {open}"
        ))
        .await?;
    let all_rows = db
        .count(&format!(
            "outbox_ordering_keys WHERE ordering_key = '{key}'"
        ))
        .await?;
    ensure!(
        (rows, all_rows) == (i64::from(open > 0), i64::from(open > 0)),
        "the key's count row does not say {open} open tasks (rows matching: {rows} of {all_rows}): {tasks:?}"
    );
    Ok(())
}

/// `send` of a key's head, dropped at every await point.
pub async fn cancelled_sends_leave_nothing_behind<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let worker = short_lease_worker(db, "sweep-send")?;
    let polls = sweep(
        db,
        "send",
        |key| async move { Ok(vec![head_and_next(db, &key).await?.0]) },
        |_, ids| {
            let worker = worker.clone();
            async move { worker.send(ids[0]).await }
        },
    )
    .await?;
    ensure!(
        polls > 1,
        "send finished at its first poll: nothing was swept"
    );
    Ok(())
}

/// A `retry_pending` round, dropped at every await point.
pub async fn cancelled_rounds_leave_nothing_behind<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let worker = short_lease_worker(db, "sweep-round")?;
    sweep(
        db,
        "round",
        |key| async move {
            // Every earlier sweep's tasks are finished or rescued: the round
            // sees this key's two tasks and the settle checks' own.
            let (head, next) = head_and_next(db, &key).await?;
            Ok(vec![head, next])
        },
        |_, _| {
            let worker = worker.clone();
            async move { worker.retry_pending(10).await }
        },
    )
    .await?;
    Ok(())
}

/// Discards of one head and of a key's tasks in bulk, dropped at every
/// await point.
pub async fn cancelled_discards_leave_nothing_behind<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    sweep(
        db,
        "discard",
        |key| async move { Ok(vec![head_and_next(db, &key).await?.0]) },
        |_, ids| async move { db.store().discard(ids[0]).await },
    )
    .await?;
    sweep(
        db,
        "discard-many",
        |key| async move {
            head_and_next(db, &key).await?;
            Ok(Vec::new())
        },
        |key, _| async move {
            db.store()
                .discard_matching(&TaskFilter::new().ordering_key(key), 10)
                .await
        },
    )
    .await?;
    Ok(())
}

/// A requeue of a failed head, dropped at every await point.
pub async fn cancelled_requeues_leave_nothing_behind<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (failing, _) = handler::failing_permanently();
    let failer = Worker::with_config(
        db.store().clone(),
        registry(failing)?,
        WorkerConfig::default().owner("sweep-failer"),
    )?;
    sweep(
        db,
        "requeue",
        |key| {
            let failer = failer.clone();
            async move {
                let (head, _) = head_and_next(db, &key).await?;
                ensure!(
                    failer.send(head).await.is_err(),
                    "the failing handler succeeded"
                );
                ensure!(db.store().get(head).await?.status == Status::Failed);
                Ok(vec![head])
            }
        },
        |_, ids| async move { db.store().requeue(ids[0]).await },
    )
    .await?;
    Ok(())
}

/// An inbox record in the store's own transaction, dropped at every await
/// point: no transaction stays open, and the message can be recorded again
/// at once (once, if the dropped one had committed).
pub async fn cancelled_inbox_records_leave_nothing_behind<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    db.migrate_inbox().await?;
    let store = db.store().clone();
    sweep(
        db,
        "inbox",
        |_| async move { Ok(Vec::new()) },
        |_, _| {
            let store = store.clone();
            async move {
                let recorder = store.clone();
                store
                    .transaction::<_, diesel_outbox_core::Error, _>(move |conn| {
                        Box::pin(async move { recorder.record(conn, "sweeper", "m-1").await })
                    })
                    .await
            }
        },
    )
    .await?;
    let receipt = tokio::time::timeout(
        Duration::from_secs(3),
        store.transaction::<_, diesel_outbox_core::Error, _>({
            let recorder = store.clone();
            move |conn| Box::pin(async move { recorder.record(conn, "sweeper", "m-1").await })
        }),
    )
    .await
    .context("recording again waited on a lock")??;
    ensure!(
        receipt == diesel_outbox_core::Receipt::Duplicate,
        "the sweep's last record committed, so the message is a duplicate now"
    );
    Ok(())
}

/// The `transaction` helpers, dropped at every await point: on a pool's
/// connection the transaction is gone at once; on the caller's own
/// connection, once the transaction began, the connection refuses any
/// further transaction (instead of nesting it in the abandoned one), and
/// once the caller drops it too, as a cancelled request handler does,
/// nothing is left open. Dropped before it began (while it waited for
/// SQLite's turn to write), the helper leaves the connection as it was.
pub async fn cancelled_transaction_helpers_leave_nothing_behind<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let worker = short_lease_worker(db, "sweep-helper")?;
    sweep(
        db,
        "pooled-helper",
        |key| async move {
            head_and_next(db, &key).await?;
            Ok(Vec::new())
        },
        |key, _| {
            let worker = worker.clone();
            async move {
                // A third task of the key: its enqueue locks the key's row.
                diesel_outbox_sql::transaction_pooled(&worker, db.pool(), async |mut tx| {
                    tx.enqueue(Task::new(KIND, 1, "{}").ordering_key(key))
                        .await?;
                    anyhow::Ok(())
                })
                .await
            }
        },
    )
    .await?;
    for polls in 1..=MAX_POLLS {
        let key = format!("borrowed-helper-{polls}");
        head_and_next(db, &key).await?;
        let mut conn = db.connect().await?;
        let finished = poll_then_drop(
            diesel_outbox_sql::transaction(&worker, &mut conn, async |mut tx| {
                tx.enqueue(Task::new(KIND, 1, "{}").ordering_key(key.as_str()))
                    .await?;
                anyhow::Ok(())
            }),
            polls,
        )
        .await
        .is_some();
        if !finished {
            match diesel_outbox_sql::require_transaction(&mut conn) {
                // Dropped before its transaction began (waiting for the
                // store's turn to write, on SQLite): nothing was opened, so
                // the connection's next transaction is a top-level one.
                Err(diesel_outbox_core::Error::NotTransaction) => {
                    conn.transaction::<_, anyhow::Error, _>(async |conn| {
                        Ok(diesel_outbox_sql::require_transaction(conn)?)
                    })
                    .await
                    .with_context(|| {
                        format!("a transaction after a helper dropped unbegun ({polls} polls)")
                    })?;
                }
                _ => {
                    let refused = conn
                        .transaction::<_, diesel::result::Error, _>(async |_| Ok(()))
                        .await;
                    ensure!(
                        refused.is_err(),
                        "a transaction on a connection whose helper was dropped after {polls} \
                         polls was let through (it would nest in the abandoned one)"
                    );
                }
            }
        }
        drop(conn);
        settled(db, &key)
            .await
            .with_context(|| format!("the borrowed helper dropped after {polls} polls"))?;
        if finished {
            return Ok(());
        }
    }
    bail!("the borrowed helper did not finish within {MAX_POLLS} polls")
}

/// A relay shut down while it writes results, its `run` then dropped after
/// 1, 2, 3, ... more polls: the writes it was making are abandoned, never
/// left open.
pub async fn cancelled_relay_shutdowns_leave_nothing_behind<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let (mock, handle) = handler::recording();
    let config = WorkerConfig::default()
        .owner("sweep-relay")
        .retry(immediate_retry())
        .handler_timeout(Duration::from_millis(100))
        .lease_duration(Duration::from_millis(300));
    let worker = Worker::with_config(db.store().clone(), registry(mock)?, config)?;
    let relay_config = RelayConfig::default()
        .poll_interval(Duration::from_millis(10))
        .write_delay(Duration::from_millis(1))
        .shutdown_timeout(Duration::from_secs(2));
    for polls in 1..=MAX_POLLS {
        let key = format!("relay-{polls}");
        let before = handle.calls();
        head_and_next(db, &key).await?;
        let relay = Relay::new(worker.clone(), relay_config.clone())?;
        let shutdown = CancellationToken::new();
        // Boxed, so that handing it to `poll_then_drop` drops it there.
        let mut running = Box::pin(relay.run(shutdown.clone()));
        // Run until the relay has started a handler, then ask it to stop
        // and drop it `polls` polls later.
        let started = async {
            loop {
                if handle.calls() > before {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::select! {
            _ = running.as_mut() => bail!("the relay stopped before it was asked to"),
            () = started => {}
        }
        shutdown.cancel();
        let finished = poll_then_drop(running, polls).await.is_some();
        settled(db, &key)
            .await
            .with_context(|| format!("a relay dropped {polls} polls after its shutdown"))?;
        if finished {
            return Ok(());
        }
    }
    bail!("the relay's shutdown did not finish within {MAX_POLLS} polls")
}
