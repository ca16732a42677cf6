//! `send_async`, handler timeouts and panics (issue proof 8).

use std::time::Duration;

use diesel_outbox_core::{Error, Status};

use super::support::{config, enqueue_one, get, registry, task, worker};
use crate::{TestBackend, handler};

/// `send_async` returns before the handler has finished, and the task is
/// soon succeeded.
pub async fn send_async_returns_at_once<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::blocking();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let id = enqueue_one(db, task(1)).await?;
    let sending = worker.send_async(id);
    // The handler is running and held: send_async has long returned.
    handle.wait_for_blocked(1).await;
    assert!(!sending.is_finished());
    assert_eq!(get(db, id).await?.status, Status::Running);
    handle.release();
    sending.await??;
    assert_eq!(get(db, id).await?.status, Status::Succeeded);
    Ok(())
}

/// A handler that hangs is cut at the timeout and recorded as retryable.
pub async fn hanging_handler_is_cut_at_the_timeout<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::blocking();
    let config = config("w")
        .handler_timeout(Duration::from_millis(150))
        .lease_duration(Duration::from_secs(2));
    let worker = worker(db, registry(mock)?, config)?;
    let id = enqueue_one(db, task(1)).await?;
    let started = std::time::Instant::now();
    let err = worker.send(id).await.err();
    let took = started.elapsed();
    assert!(
        matches!(
            err,
            Some(Error::Handler {
                will_retry: true,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(
        took >= Duration::from_millis(150),
        "cut before the timeout: {took:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "not cut at the timeout: {took:?}"
    );
    let record = get(db, id).await?;
    assert_eq!(record.status, Status::Available);
    assert!(
        record.last_error.contains("timed out"),
        "{}",
        record.last_error
    );
    assert!(record.lease.is_none(), "the cut attempt kept its lease");
    assert_eq!(handle.blocked(), 0, "the hung call was not dropped");
    Ok(())
}

/// A panicking handler is a recorded failure and the worker keeps working.
pub async fn panicking_handler_is_recorded_and_the_worker_lives<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let (mock, handle) = handler::panicking(1);
    let worker = worker(db, registry(mock)?, config("w"))?;
    let first = enqueue_one(db, task(1)).await?;
    let second = enqueue_one(db, task(2)).await?;
    let err = worker.send_async(first).await?.err();
    assert_panic_recorded(db, first, err).await?;
    worker.send_async(second).await??;
    worker.send(first).await?;
    assert_eq!(handle.succeeded_ids(), [second, first]);
    Ok(())
}

/// A handler that panics before it returns its future (written without
/// `async_trait`) is recorded like one that panics while it runs.
pub async fn a_handler_panicking_before_its_future_is_recorded<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    struct PanicsAtCall;

    impl diesel_outbox_core::Handler for PanicsAtCall {
        fn handle<'a, 'f>(
            &'a self,
            _delivery: diesel_outbox_core::Delivery,
        ) -> std::pin::Pin<
            Box<dyn Future<Output = Result<(), diesel_outbox_core::HandlerError>> + Send + 'f>,
        >
        where
            'a: 'f,
            Self: 'f,
        {
            panic!("{}", handler::INJECTED_PANIC)
        }
    }

    let worker = worker(db, registry(PanicsAtCall)?, config("w"))?;
    let id = enqueue_one(db, task(1)).await?;
    let err = worker.send(id).await.err();
    assert_panic_recorded(db, id, err).await?;
    Ok(())
}

/// The send of task `id` failed with `err` because its handler panicked:
/// a retryable handler error, and the task available again with the panic
/// in its `last_error`.
async fn assert_panic_recorded<B: TestBackend>(
    db: &B,
    id: diesel_outbox_core::TaskId,
    err: Option<Error>,
) -> anyhow::Result<()> {
    assert!(
        matches!(
            err,
            Some(Error::Handler {
                will_retry: true,
                ..
            })
        ),
        "{err:?}"
    );
    let record = get(db, id).await?;
    assert_eq!(record.status, Status::Available);
    assert!(
        record.last_error.contains(handler::INJECTED_PANIC),
        "{}",
        record.last_error
    );
    Ok(())
}
