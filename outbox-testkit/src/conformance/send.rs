//! `send`: every outcome of one attempt right after commit (issue proof 4).

use std::time::Duration;

use chrono::Utc;
use diesel_outbox_core::{Error, RetryPolicy, Status, Task, TaskId};

use super::support::{KIND, config, enqueue_one, get, registry, task, worker};
use crate::{TestBackend, handler};

/// Success marks the task succeeded; a second `send` does not call the handler.
pub async fn send_success_marks_succeeded_once<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = enqueue_one(db, task(1)).await?;
    worker.send(id).await?;
    let record = get(db, id).await?;
    assert_eq!(record.status, Status::Succeeded);
    assert_eq!(record.attempts, 1);
    assert!(record.finished_at.is_some());
    assert_eq!(record.last_error, "");
    assert!(record.lease.is_none());

    worker.send(id).await?;
    assert_eq!(handle.calls(), 1, "a succeeded task was handled again");
    assert_eq!(get(db, id).await?.attempts, 1);
    Ok(())
}

/// A retryable error leaves the task waiting with `last_error` and a
/// `next_attempt_at` the retry policy gives.
pub async fn send_retryable_error_schedules_a_retry<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, _handle) = handler::failing(1);
    let policy = RetryPolicy::new(Duration::from_secs(60), Duration::from_secs(600), 0.5)?;
    let config = config("w").retry(policy);
    let worker = worker(db, registry(mock)?, config)?;
    let id = enqueue_one(db, task(1)).await?;
    let err = worker.send(id).await.err();
    assert!(
        matches!(
            err,
            Some(Error::Handler {
                will_retry: true,
                attempt: 1,
                ..
            })
        ),
        "{err:?}"
    );
    let record = get(db, id).await?;
    assert_eq!(record.status, Status::Waiting);
    assert_eq!(record.attempts, 1);
    assert!(record.last_error.contains(handler::INJECTED_FAILURE));
    assert!(record.lease.is_none() && record.finished_at.is_none());
    // Both times come from one statement on the database clock, so their
    // difference is exactly the policy's delay for attempt 1: 60 s minus up to
    // half of it for jitter.
    let delay = (record.next_attempt_at - record.updated_at).to_std()?;
    assert!(
        (Duration::from_secs(30)..=Duration::from_secs(60)).contains(&delay),
        "delay {delay:?} is outside the policy's 30 s to 60 s"
    );
    // Not due yet, so another send now is refused without calling the handler.
    assert!(matches!(worker.send(id).await, Err(Error::NotDue { .. })));
    Ok(())
}

/// A permanent error marks the task failed at once.
pub async fn send_permanent_error_marks_failed<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::failing_permanently();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = enqueue_one(db, task(1)).await?;
    let err = worker.send(id).await.err();
    assert!(
        matches!(
            err,
            Some(Error::Handler {
                will_retry: false,
                ..
            })
        ),
        "{err:?}"
    );
    let record = get(db, id).await?;
    assert_eq!(record.status, Status::Failed);
    assert!(record.finished_at.is_some());
    assert!(
        record
            .last_error
            .contains(handler::INJECTED_PERMANENT_FAILURE)
    );
    assert!(matches!(worker.send(id).await, Err(Error::Failed(_))));
    assert_eq!(handle.calls(), 1);
    Ok(())
}

/// Retryable failures up to `max_attempts` end in failed.
pub async fn send_reaching_max_attempts_marks_failed<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::failing(10);
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = enqueue_one(db, task(1).max_attempts(2)).await?;
    let first = worker.send(id).await.err();
    assert!(
        matches!(
            first,
            Some(Error::Handler {
                will_retry: true,
                ..
            })
        ),
        "{first:?}"
    );
    assert_eq!(get(db, id).await?.status, Status::Available);
    let second = worker.send(id).await.err();
    assert!(
        matches!(
            second,
            Some(Error::Handler {
                will_retry: false,
                attempt: 2,
                ..
            })
        ),
        "{second:?}"
    );
    let record = get(db, id).await?;
    assert_eq!((record.status, record.attempts), (Status::Failed, 2));
    assert!(record.last_error.contains("gave up after 2 attempts"));
    assert_eq!(handle.calls(), 2);
    Ok(())
}

/// Past `expires_at`: `Expired`, the task is failed, the handler never runs.
pub async fn send_after_expiry_fails_without_calling<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = enqueue_one(
        db,
        task(1).expires_at(Utc::now() - chrono::TimeDelta::seconds(1)),
    )
    .await?;
    let err = worker.send(id).await.err();
    assert!(
        matches!(err, Some(Error::Expired(expired)) if expired == id),
        "{err:?}"
    );
    let record = get(db, id).await?;
    assert_eq!(record.status, Status::Failed);
    assert_eq!(record.attempts, 0);
    assert!(record.finished_at.is_some());
    assert!(record.last_error.contains("expired"));
    assert_eq!(handle.calls(), 0);
    Ok(())
}

/// An id that was never committed gives `NotFound`.
pub async fn send_unknown_id_is_not_found<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let missing = TaskId::new(987_654_321);
    assert!(matches!(worker.send(missing).await, Err(Error::NotFound(id)) if id == missing));
    assert_eq!(handle.calls(), 0);
    Ok(())
}

/// A task whose kind has no handler stays unfinished with a clear `last_error`,
/// even past its attempt limit.
pub async fn send_without_handler_stays_unfinished<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = enqueue_one(db, Task::new("invoice.paid", 3, "{}").max_attempts(1)).await?;
    for _ in 0..2 {
        let err = worker.send(id).await.err();
        assert!(
            matches!(&err, Some(Error::NoHandler { key, .. }) if key.kind == "invoice.paid" && key.version == 3),
            "{err:?}"
        );
    }
    let record = get(db, id).await?;
    assert_eq!(record.status, Status::Available);
    assert!(
        record
            .last_error
            .contains("no handler registered for kind `invoice.paid` version 3"),
        "{}",
        record.last_error
    );
    assert_eq!(handle.calls(), 0);
    assert_ne!(record.task.kind, KIND);
    Ok(())
}
