//! Dedup and ordering keys are compared byte for byte: trailing spaces count.

use diesel_outbox_core::{Error, Registry, Status, Task};

use super::support::{KIND, config, enqueue_committed, get, task, worker};
use crate::{TestBackend, handler};

/// Keys equal under a padding collation, and one differing only in case.
const KEYS: [&str; 4] = ["k", "k ", "k  ", "K"];

/// Dedup keys that differ only by trailing spaces are different keys: each
/// gets its own row and id, and enqueueing one again finds its own row.
pub async fn dedup_keys_differing_by_trailing_spaces_are_distinct<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let tasks = |first: usize| {
        KEYS.iter()
            .enumerate()
            .map(|(n, key)| task(first + n).dedup_key(*key))
            .collect::<Vec<_>>()
    };
    let ids = enqueue_committed(db, tasks(0)).await?;
    for (n, key) in KEYS.iter().enumerate() {
        for (m, other) in KEYS.iter().enumerate().skip(n + 1) {
            assert_ne!(ids[n], ids[m], "{key:?} and {other:?} share a row");
        }
        let record = get(db, ids[n]).await?;
        assert_eq!(record.task.dedup_key.as_deref(), Some(*key));
        assert_eq!(record.task.payload, task(n).payload, "{key:?}");
    }
    assert_eq!(db.count_tasks().await?, KEYS.len() as i64);
    // Each key still deduplicates exactly: its own row, nothing new.
    assert_eq!(enqueue_committed(db, tasks(10)).await?, ids);
    assert_eq!(db.count_tasks().await?, KEYS.len() as i64);
    Ok(())
}

/// Ordering keys that differ only by trailing spaces are independent: a
/// failed head of `"k"` blocks later `"k"` tasks but not those of `"k "`.
pub async fn ordering_keys_differing_by_trailing_spaces_are_independent<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let ids = enqueue_committed(
        db,
        vec![
            Task::new("order.broken", 1, "{}")
                .ordering_key("k")
                .max_attempts(1),
            task(1).ordering_key("k "),
            task(2).ordering_key("k"),
            task(3).ordering_key("k  "),
        ],
    )
    .await?;
    let (good, good_handle) = handler::recording();
    let (bad, _) = handler::failing_permanently();
    let registry = Registry::builder()
        .handler(KIND, 1, good)
        .handler("order.broken", 1, bad)
        .build()?;
    let worker = worker(db, registry, config("w"))?;
    worker.retry_pending(10).await?;
    assert_eq!(get(db, ids[0]).await?.status, Status::Failed);
    assert_eq!(good_handle.succeeded_ids(), [ids[1], ids[3]]);
    // The failed head still holds back its own key.
    let blocked = worker.send(ids[2]).await;
    assert!(matches!(blocked, Err(Error::Blocked { .. })), "{blocked:?}");
    assert_eq!(get(db, ids[2]).await?.attempts, 0);
    // `send` decides by the same rule as a round.
    let later = enqueue_committed(db, vec![task(4).ordering_key("k ")]).await?;
    worker.send(later[0]).await?;
    assert_eq!(good_handle.succeeded_ids(), [ids[1], ids[3], later[0]]);
    Ok(())
}
