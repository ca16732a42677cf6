//! Ordering keys: a task waits while an older task with its key is unfinished.

use diesel_outbox_core::{Error, Registry, Task};

use super::support::{KIND, config, enqueue_committed, get, registry, task, worker};
use crate::{TestBackend, handler};

/// `send` refuses a task whose older same-key task is unfinished, and
/// delivers both in id order once the older one succeeded.
pub async fn send_waits_for_the_older_task_of_its_key<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_committed(
        db,
        vec![task(1).ordering_key("k"), task(2).ordering_key("k")],
    )
    .await?;
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    let refused = worker.send(ids[1]).await;
    assert!(matches!(refused, Err(Error::Blocked { .. })), "{refused:?}");
    assert_eq!(handle.calls(), 0);
    worker.send(ids[0]).await?;
    worker.send(ids[1]).await?;
    assert_eq!(handle.succeeded_ids(), ids);
    Ok(())
}

/// A round leaves a task alone while an older task of its key failed and
/// waits for its retry; keyless and other-key tasks still flow.
pub async fn a_round_keeps_a_key_in_order<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_committed(
        db,
        vec![
            Task::new("order.broken", 1, "{}").ordering_key("k"),
            task(2).ordering_key("k"),
            task(3),
            task(4).ordering_key("other"),
        ],
    )
    .await?;
    let (good, good_handle) = handler::recording();
    let (bad, _) = handler::failing(usize::MAX);
    let registry = Registry::builder()
        .handler(KIND, 1, good)
        .handler("order.broken", 1, bad)
        .build()?;
    let worker = worker(db, registry, config("w"))?;
    worker.retry_pending(10).await?;
    assert_eq!(good_handle.succeeded_ids(), [ids[2], ids[3]]);
    assert_eq!(get(db, ids[1]).await?.attempts, 0, "delivered out of order");
    Ok(())
}
