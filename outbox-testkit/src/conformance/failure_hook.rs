//! The failure hook: called once for each task that fails for good, by
//! whichever path failed it, and never for one that did not.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use diesel_outbox_core::{
    ClaimOutcome, Delivery, Error, HandlerError, LeaseRequest, Record, Registry, RelayConfig,
    Status, Store, Task, TaskId, handler_fn, transition,
};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

use super::{
    relay::spawn_relay,
    support::{KIND, config, enqueue_committed, get, worker},
};
use crate::TestBackend;

/// A task whose handler (see [`registry`]) succeeds for the payload `ok`,
/// fails for good for `perm`, and asks for a retry for `retry`.
fn job(payload: &str) -> Task {
    Task::new(KIND, 1, payload.to_owned())
}

/// The handler of [`job`]s, telling `succeeded` of each success, and a
/// failure hook that sends each record it gets to `reported` and then, if
/// `panics`, panics.
fn registry(
    succeeded: UnboundedSender<TaskId>,
    reported: UnboundedSender<Record>,
    panics: bool,
) -> anyhow::Result<Registry> {
    let handler = handler_fn(move |delivery: Delivery| {
        let succeeded = succeeded.clone();
        async move {
            match delivery.payload() {
                b"perm" => Err(HandlerError::permanent(anyhow::anyhow!("refused"))),
                b"retry" => Err(HandlerError::retryable(anyhow::anyhow!("not yet"))),
                _ => {
                    let _ = succeeded.send(delivery.id);
                    Ok(())
                }
            }
        }
    });
    Ok(Registry::builder()
        .handler(KIND, 1, handler)
        .on_failed(move |record: Record| {
            let reported = reported.clone();
            async move {
                let _ = reported.send(record);
                if panics {
                    panic!("the failure hook panics, as a buggy one would");
                }
            }
        })
        .build()?)
}

/// A worker of `owner` whose lease lapses at once: its claims stand for a
/// worker that vanished mid-attempt.
fn vanished() -> LeaseRequest {
    LeaseRequest {
        owner: "vanished".into(),
        duration: Duration::ZERO,
    }
}

/// Everything `reported` holds now, by task id.
fn drain(reported: &mut UnboundedReceiver<Record>) -> Vec<Record> {
    let mut records = Vec::new();
    while let Ok(record) = reported.try_recv() {
        records.push(record);
    }
    records.sort_by_key(|record| record.id);
    records
}

/// Every way a worker fails a task calls the hook once, with the failed
/// record: a permanent error and used-up attempts (in a round and in
/// `send`), expiry (in a round and in `send`), and a lapsed lease at the last
/// attempt, a failure written through `Worker::write_results`. Two workers run their rounds at once and a
/// third round finds nothing more; a failure written again under a fence
/// that no longer holds, a retried task and a delivered one are never
/// reported.
pub async fn failure_hook_runs_once_for_each_task_failed_for_good<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let past = Utc::now() - TimeDelta::seconds(1);
    let ids = enqueue_committed(
        db,
        vec![
            job("perm"),                    // 0: permanent error in a round
            job("retry").max_attempts(1),   // 1: attempts used up in a round
            job("retry").max_attempts(100), // 2: retried, not failed
            job("ok"),                      // 3: delivered
            job("ok").expires_at(past),     // 4: expired in a round
            job("ok").expires_at(past),     // 5: expired in `send`
            job("perm"),                    // 6: permanent error in `send`
            job("ok").max_attempts(1),      // 7: lease lapsed at its last attempt
            job("ok"),                      // 8: failed by a written result, twice
        ],
    )
    .await?;
    db.store().claim(ids[7], &vanished()).await?;
    let (succeeded, _) = unbounded_channel();
    let (reporter, mut reported) = unbounded_channel();
    let registry = registry(succeeded, reporter, false)?;
    let a = worker(db, registry.clone(), config("a"))?;
    let b = worker(db, registry, config("b"))?;
    // Task 8 is held by a claim of worker a's that the rounds leave alone.
    let claim = LeaseRequest {
        owner: a.config().owner.clone(),
        duration: Duration::from_secs(30),
    };
    let ClaimOutcome::Claimed(claimed) = db.store().claim(ids[8], &claim).await? else {
        anyhow::bail!("task 8 was not claimed");
    };

    assert!(matches!(a.send(ids[5]).await, Err(Error::Expired(_))));
    assert!(matches!(
        a.send(ids[6]).await,
        Err(Error::Handler {
            will_retry: false,
            ..
        })
    ));
    let (round_a, round_b) = tokio::join!(a.retry_pending(10), b.retry_pending(10));
    round_a?;
    round_b?;
    a.retry_pending(10).await?;

    // A failure written under a current claim is reported; written again,
    // its fence no longer holds and nothing is reported. So is a stale
    // failure of a delivered task.
    let fence = transition::Fence {
        id: claimed.id,
        owner: claim.owner.as_str().into(),
        attempt: claimed.attempts,
        ordering_key: None,
    };
    let failure = transition::fail(fence.clone(), "given up by the test");
    assert_eq!(
        a.write_results(std::slice::from_ref(&failure))
            .await?
            .applied,
        1
    );
    assert_eq!(a.write_results(&[failure]).await?.applied, 0);
    let stale = transition::fail(
        transition::Fence {
            id: ids[3],
            ..fence
        },
        "stale",
    );
    assert_eq!(a.write_results(&[stale]).await?.applied, 0);
    a.wait_idle().await;
    b.wait_idle().await;

    let records = drain(&mut reported);
    let failed = [ids[0], ids[1], ids[4], ids[5], ids[6], ids[7], ids[8]];
    assert_eq!(
        records.iter().map(|record| record.id).collect::<Vec<_>>(),
        failed,
        "{records:#?}"
    );
    for record in &records {
        assert_eq!(record.status, Status::Failed, "{record:?}");
        assert!(!record.last_error.is_empty(), "{record:?}");
    }
    for id in ids {
        let status = get(db, id).await?.status;
        assert_eq!(
            status == Status::Failed,
            failed.contains(&id),
            "{id}: {status:?}"
        );
    }
    Ok(())
}

/// Under a relay the hook is called once for each task it fails (a
/// permanent error, used-up attempts, expiry, a lapsed lease at the last
/// attempt), though the hook panics every time: delivery goes on.
pub async fn failure_hook_runs_once_under_a_relay_and_its_panics_stop_nothing<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let past = Utc::now() - TimeDelta::seconds(1);
    let ids = enqueue_committed(
        db,
        vec![
            job("perm"),                  // 0
            job("retry").max_attempts(2), // 1: fails at its second run
            job("ok").expires_at(past),   // 2
            job("ok").max_attempts(1),    // 3: lease lapsed at its last attempt
            job("ok"),                    // 4: delivered
            job("perm"),                  // 5
        ],
    )
    .await?;
    db.store().claim(ids[3], &vanished()).await?;
    let (succeeded, mut successes) = unbounded_channel();
    let (reporter, mut reported) = unbounded_channel();
    let worker = worker(db, registry(succeeded, reporter, true)?, config("relay"))?;
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(worker.clone(), RelayConfig::default(), &shutdown)?;

    let failed = [ids[0], ids[1], ids[2], ids[3], ids[5]];
    let mut seen = Vec::new();
    for _ in failed {
        let record = reported
            .recv()
            .await
            .ok_or_else(|| anyhow::anyhow!("the hook's channel closed"))?;
        seen.push(record);
    }
    assert_eq!(successes.recv().await, Some(ids[4]));
    shutdown.cancel();
    let report = relay.await?;
    worker.wait_idle().await;

    seen.extend(drain(&mut reported));
    seen.sort_by_key(|record| record.id);
    assert_eq!(
        seen.iter().map(|record| record.id).collect::<Vec<_>>(),
        failed,
        "{report:?}"
    );
    assert!(seen.iter().all(|record| record.status == Status::Failed));
    assert_eq!(get(db, ids[4]).await?.status, Status::Succeeded);
    assert_eq!((report.failed, report.expired), (3, 1), "{report:?}");
    Ok(())
}
