//! Batch handlers: one call per claim of a kind, one answer per delivery,
//! under the relay, in rounds and through `send`.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use anyhow::ensure;
use async_trait::async_trait;
use diesel_outbox_core::{
    BatchHandler, Delivery, HandlerError, Maintenance, Registry, Status, TaskId, handler_fn,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{
    relay::{relay_config, spawn_relay},
    support::{KIND, config, enqueue_batch, enqueue_committed, get, task, worker},
};
use crate::TestBackend;

/// How a scripted batch handler answers one call.
type Script = dyn Fn(usize, &[Delivery]) -> Answer + Send + Sync;

/// What a call of the scripted handler does.
enum Answer {
    /// Answers each delivery.
    Each(Vec<Result<(), HandlerError>>),
    /// Panics.
    Panic,
    /// Waits for ever (cut at the handler timeout, or at shutdown).
    Hang,
}

/// A batch handler that records each call's deliveries and answers as its
/// script says; `answered` counts the deliveries it answered `Ok`.
#[derive(Clone)]
struct Scripted {
    calls: Arc<Mutex<Vec<Vec<Delivery>>>>,
    succeeded: Arc<watch::Sender<usize>>,
    started: Arc<watch::Sender<usize>>,
    script: Arc<Script>,
}

impl Scripted {
    fn new(script: impl Fn(usize, &[Delivery]) -> Answer + Send + Sync + 'static) -> Self {
        Self {
            calls: Arc::default(),
            succeeded: Arc::new(watch::channel(0).0),
            started: Arc::new(watch::channel(0).0),
            script: Arc::new(script),
        }
    }

    fn calls(&self) -> Vec<Vec<Delivery>> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    async fn wait_for_successes(&self, n: usize) {
        let _ = self.succeeded.subscribe().wait_for(|&done| done >= n).await;
    }

    async fn wait_for_calls(&self, n: usize) {
        let _ = self.started.subscribe().wait_for(|&done| done >= n).await;
    }
}

#[async_trait]
impl BatchHandler for Scripted {
    async fn handle_batch(&self, deliveries: Vec<Delivery>) -> Vec<Result<(), HandlerError>> {
        let call = {
            let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
            calls.push(deliveries.clone());
            calls.len()
        };
        self.started.send_modify(|n| *n += 1);
        match (self.script)(call, &deliveries) {
            Answer::Each(answers) => {
                let ok = answers.iter().filter(|answer| answer.is_ok()).count();
                self.succeeded.send_modify(|n| *n += ok);
                answers
            }
            Answer::Panic => panic!("batch handler panicked on purpose"),
            Answer::Hang => std::future::pending().await,
        }
    }
}

/// The order number a task of [`task`] carries.
fn order(delivery: &Delivery) -> u64 {
    delivery
        .json::<serde_json::Value>()
        .ok()
        .and_then(|payload| payload.get("order").and_then(serde_json::Value::as_u64))
        .unwrap_or(u64::MAX)
}

/// A registry with `handler` as the batch handler of [`KIND`] version 1.
fn batch_registry(handler: &Scripted) -> anyhow::Result<Registry> {
    Ok(Registry::builder()
        .batch_handler(KIND, 1, handler.clone())
        .build()?)
}

/// A relay hands a batch handler what one claim took of its kind in one
/// call, beside a per-delivery handler of another kind; each answer decides
/// its own task alone: a permanent error fails only its task, a retryable
/// one retries only its task, the rest succeed.
pub async fn a_batch_handler_answers_each_task_of_a_claim<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_batch(db, (0..60).map(task).collect()).await?;
    let shipped = enqueue_committed(
        db,
        (0..5)
            .map(|n| diesel_outbox_core::Task::new("order.shipped", 1, format!("{{\"n\":{n}}}")))
            .collect(),
    )
    .await?;
    // Order n: n % 3 == 1 fails for good, n % 3 == 2 fails once and then
    // succeeds, the others succeed.
    let handler = Scripted::new(|_, deliveries| {
        Answer::Each(
            deliveries
                .iter()
                .map(|delivery| match order(delivery) % 3 {
                    1 => Err(HandlerError::permanent(anyhow::anyhow!("refused for good"))),
                    2 if delivery.attempt == 1 => {
                        Err(HandlerError::retryable(anyhow::anyhow!("not yet")))
                    }
                    _ => Ok(()),
                })
                .collect(),
        )
    });
    let (one_by_one, one_by_one_done) = watch::channel(0usize);
    let one_by_one = Arc::new(one_by_one);
    let registry = Registry::builder()
        .batch_handler(KIND, 1, handler.clone())
        .handler("order.shipped", 1, {
            let one_by_one = Arc::clone(&one_by_one);
            handler_fn(move |_: Delivery| {
                let one_by_one = Arc::clone(&one_by_one);
                async move {
                    one_by_one.send_modify(|n| *n += 1);
                    Ok(())
                }
            })
        })
        .build()?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(
        worker(db, registry, config("batch-relay"))?,
        relay_config(),
        &shutdown,
    )?;
    handler.wait_for_successes(40).await;
    let _ = one_by_one_done.clone().wait_for(|&n| n >= 5).await;
    shutdown.cancel();
    let report = relay.await?;
    ensure!(report.errors == 0, "the relay counted errors: {report:?}");

    let calls = handler.calls();
    let largest = calls.iter().map(Vec::len).max().unwrap_or(0);
    ensure!(
        largest > 1,
        "every call had one delivery: the relay did not batch ({} calls)",
        calls.len()
    );
    ensure!(
        calls.iter().flatten().all(|d| d.task.kind == KIND),
        "the batch handler received another kind's task"
    );
    for (n, &id) in ids.iter().enumerate() {
        let record = get(db, id).await?;
        let expected = match n % 3 {
            1 => (Status::Failed, 1),
            2 => (Status::Succeeded, 2),
            _ => (Status::Succeeded, 1),
        };
        ensure!(
            (record.status, record.attempts) == expected,
            "order {n}: {:?} after {} attempts, expected {expected:?}",
            record.status,
            record.attempts
        );
        if n % 3 == 1 {
            ensure!(
                record.last_error.contains("refused for good"),
                "order {n}'s error: {:?}",
                record.last_error
            );
        }
    }
    for id in shipped {
        ensure!(get(db, id).await?.status == Status::Succeeded);
    }
    Ok(())
}

/// A batch call that panics, then one cut at the handler timeout, retries
/// every task of the batch; a call that answers only some of its
/// deliveries retries the others; each retry is one more call with the
/// whole batch that is left.
pub async fn a_batch_handler_cut_or_panicking_retries_its_whole_batch<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_batch(db, (0..8).map(task).collect()).await?;
    let handler = Scripted::new(|call, deliveries| match call {
        1 => Answer::Panic,
        2 => Answer::Hang,
        3 => Answer::Each(deliveries.iter().take(5).map(|_| Ok(())).collect()),
        _ => Answer::Each(deliveries.iter().map(|_| Ok(())).collect()),
    });
    let config = config("batch-rounds")
        .handler_timeout(Duration::from_millis(200))
        .lease_duration(Duration::from_secs(5));
    let worker = worker(db, batch_registry(&handler)?, config)?;
    let expect = async |round: usize, error: &str, runs: i64| -> anyhow::Result<()> {
        for &id in &ids {
            let record = get(db, id).await?;
            ensure!(
                record.status != Status::Succeeded && record.attempts == runs,
                "round {round}: task {id} is {:?} after {} attempts",
                record.status,
                record.attempts
            );
            ensure!(
                record.last_error.contains(error),
                "round {round}: task {id}'s error {:?} does not say {error:?}",
                record.last_error
            );
        }
        Ok(())
    };
    let first = worker.retry_pending(32).await?;
    ensure!(
        first.claimed == 8 && first.retried == 8,
        "round 1: {first:?}"
    );
    expect(1, "panicked", 1).await?;
    let second = worker.retry_pending(32).await?;
    ensure!(second.retried == 8, "round 2: {second:?}");
    expect(2, "timed out", 2).await?;
    let third = worker.retry_pending(32).await?;
    ensure!(
        (third.succeeded, third.retried) == (5, 3),
        "round 3: {third:?}"
    );
    let fourth = worker.retry_pending(32).await?;
    ensure!(fourth.succeeded == 3, "round 4: {fourth:?}");
    let sizes: Vec<usize> = handler.calls().iter().map(Vec::len).collect();
    ensure!(sizes == [8, 8, 8, 3], "calls' sizes: {sizes:?}");
    let mut answered_in_third: HashSet<TaskId> = HashSet::new();
    for delivery in handler.calls()[2].iter().take(5) {
        answered_in_third.insert(delivery.id);
    }
    for id in ids {
        let record = get(db, id).await?;
        let runs = if answered_in_third.contains(&id) {
            3
        } else {
            4
        };
        ensure!(
            (record.status, record.attempts) == (Status::Succeeded, runs),
            "task {id}: {:?} after {} attempts, expected {runs}",
            record.status,
            record.attempts
        );
    }
    Ok(())
}

/// Under a relay with some first attempts failing, a batch never holds two
/// tasks of one ordering key, and each key's tasks succeed in id order.
pub async fn a_batch_handler_keeps_ordering_keys<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let tasks = (0..40)
        .map(|n| task(n).ordering_key(format!("customer-{}", n % 4)))
        .collect();
    let ids = enqueue_batch(db, tasks).await?;
    let handler = Scripted::new(|_, deliveries| {
        Answer::Each(
            deliveries
                .iter()
                .map(|delivery| {
                    if order(delivery).is_multiple_of(7) && delivery.attempt == 1 {
                        Err(HandlerError::retryable(anyhow::anyhow!("not yet")))
                    } else {
                        Ok(())
                    }
                })
                .collect(),
        )
    });
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(
        worker(db, batch_registry(&handler)?, config("batch-keys"))?,
        relay_config(),
        &shutdown,
    )?;
    handler.wait_for_successes(ids.len()).await;
    shutdown.cancel();
    relay.await?;
    let mut succeeded: HashMap<String, Vec<TaskId>> = HashMap::new();
    for call in handler.calls() {
        let mut keys = HashSet::new();
        for delivery in &call {
            let key = delivery.task.ordering_key.clone().unwrap_or_default();
            ensure!(
                keys.insert(key.clone()),
                "one batch held two tasks of key {key}"
            );
            let failed_first = order(delivery).is_multiple_of(7) && delivery.attempt == 1;
            if !failed_first {
                succeeded.entry(key).or_default().push(delivery.id);
            }
        }
    }
    for (key, order) in succeeded {
        let mut sorted = order.clone();
        sorted.sort_unstable();
        ensure!(
            order == sorted,
            "key {key} succeeded out of order: {order:?}"
        );
    }
    let stats = db.store().stats().await?;
    ensure!(stats.succeeded == 40, "{stats:?}");
    Ok(())
}

/// A relay shut down while its batch handler hangs cuts the batch at the
/// shutdown deadline and gives every claim of it back (as an interrupted
/// run: no lease left, claimable at once).
pub async fn shutdown_mid_batch_gives_the_batch_back<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_batch(db, (0..10).map(task).collect()).await?;
    let handler = Scripted::new(|_, _| Answer::Hang);
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(
        worker(db, batch_registry(&handler)?, config("batch-shutdown"))?,
        relay_config().shutdown_timeout(Duration::from_millis(200)),
        &shutdown,
    )?;
    handler.wait_for_calls(1).await;
    shutdown.cancel();
    let report = relay.await?;
    let handed: usize = handler.calls().iter().map(Vec::len).sum();
    ensure!(
        report.released == handed as u64,
        "released {} of the {handed} tasks handed to the handler",
        report.released
    );
    for id in ids {
        let record = get(db, id).await?;
        ensure!(
            record.status == Status::Available && record.lease.is_none(),
            "task {id} is {:?} with lease {:?} after shutdown",
            record.status,
            record.lease
        );
    }
    Ok(())
}

/// `send` and `send_async` hand a batch handler a batch of one.
pub async fn send_hands_a_batch_handler_a_batch_of_one<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_committed(db, vec![task(1), task(2)]).await?;
    let handler =
        Scripted::new(|_, deliveries| Answer::Each(deliveries.iter().map(|_| Ok(())).collect()));
    let worker = worker(db, batch_registry(&handler)?, config("batch-send"))?;
    worker.send(ids[0]).await?;
    worker.send_async(ids[1]).await??;
    let sizes: Vec<usize> = handler.calls().iter().map(Vec::len).collect();
    ensure!(sizes == [1, 1], "calls' sizes: {sizes:?}");
    for id in ids {
        ensure!(get(db, id).await?.status == Status::Succeeded);
    }
    Ok(())
}

/// While a batch runs with every slot taken, the relay claims the next one,
/// which starts once the first is done: the claim's round trip hides
/// behind the batch in flight. Nothing claimed ahead is lost or run twice.
pub async fn the_next_batch_is_claimed_while_one_runs<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_batch(db, (0..12).map(task).collect()).await?;
    let (open, gate) = watch::channel(false);
    let calls = Arc::new(Mutex::new(Vec::<Vec<TaskId>>::new()));
    let handler = {
        let calls = Arc::clone(&calls);
        diesel_outbox_core::batch_handler_fn(move |deliveries: Vec<Delivery>| {
            let (calls, mut gate) = (Arc::clone(&calls), gate.clone());
            async move {
                let first = {
                    let mut calls = calls.lock().unwrap_or_else(PoisonError::into_inner);
                    calls.push(deliveries.iter().map(|d| d.id).collect());
                    calls.len() == 1
                };
                if first {
                    let _ = gate.wait_for(|open| *open).await;
                }
                deliveries.iter().map(|_| Ok(())).collect()
            }
        })
    };
    let registry = Registry::builder()
        .batch_handler(KIND, 1, handler)
        .build()?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(
        worker(db, registry, config("batch-ahead").concurrency(4))?,
        relay_config().batch_size(4),
        &shutdown,
    )?;
    // The first batch holds every slot; the next four are claimed beside it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let running = db.store().stats().await?.running;
        if running == 8 {
            break;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{running} tasks running while the first batch waits; expected its 4 and the 4 claimed ahead"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ensure!(
        calls.lock().unwrap_or_else(PoisonError::into_inner).len() == 1,
        "the batch claimed ahead started before a slot was free"
    );
    open.send_replace(true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while db.store().stats().await?.succeeded < 12 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "not every task succeeded"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    let report = relay.await?;
    ensure!(report.errors == 0, "{report:?}");
    let handed: Vec<TaskId> = calls
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .flatten()
        .copied()
        .collect();
    let unique: HashSet<TaskId> = handed.iter().copied().collect();
    ensure!(
        handed.len() == ids.len() && unique.len() == ids.len(),
        "{} deliveries of {} tasks",
        handed.len(),
        unique.len()
    );
    Ok(())
}

/// A relay shut down while a claim taken ahead waits for the batch before
/// it gives that claim back unstarted: not a run, no lease, claimable at
/// once.
pub async fn a_claim_taken_ahead_is_given_back_at_shutdown<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_batch(db, (0..8).map(task).collect()).await?;
    let handler = Scripted::new(|_, _| Answer::Hang);
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(
        worker(
            db,
            batch_registry(&handler)?,
            config("batch-queued").concurrency(4),
        )?,
        relay_config()
            .batch_size(4)
            .shutdown_timeout(Duration::from_millis(200)),
        &shutdown,
    )?;
    handler.wait_for_calls(1).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while db.store().stats().await?.running < 8 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the relay did not claim ahead"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    relay.await?;
    ensure!(handler.calls().len() == 1, "the claim taken ahead started");
    let handed: HashSet<TaskId> = handler.calls()[0].iter().map(|d| d.id).collect();
    for id in ids {
        let record = get(db, id).await?;
        ensure!(
            record.status == Status::Available && record.lease.is_none(),
            "task {id} is {:?} with lease {:?} after shutdown",
            record.status,
            record.lease
        );
        if !handed.contains(&id) {
            ensure!(
                record.attempts - record.released == 0,
                "task {id}, claimed ahead and never started, counts as a run"
            );
        }
    }
    Ok(())
}
