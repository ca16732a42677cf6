//! The testkit's own assertions, checked against the real store.

use diesel_async::AsyncConnection;
use diesel_outbox_core::Store;

use super::support::{KIND, config, enqueue_committed, registry, task, worker};
use crate::{TestBackend, assert, handler};

/// `enqueued_in` sees a transaction's own tasks before commit; `enqueued`
/// and `assert_enqueued` see committed ones; `assert_delivered` holds once
/// they were sent.
pub async fn testkit_assertions_see_what_was_enqueued_and_delivered<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let store = db.store();
    let mut conn = db.connect().await?;
    let (inside, other) = conn
        .transaction::<_, anyhow::Error, _>(async |tx| {
            store.enqueue(tx, task(1)).await?;
            let inside = assert::enqueued_in::<B>(tx, KIND).await?;
            let other = assert::enqueued_in::<B>(tx, "invoice.paid").await?;
            Ok((inside, other))
        })
        .await?;
    assert_eq!((inside.len(), other.len()), (1, 0));
    enqueue_committed(db, vec![task(2)]).await?;
    let records = assert::assert_enqueued(db, KIND, 2).await;
    assert_eq!(
        records.iter().map(|r| r.id).collect::<Vec<_>>(),
        [inside[0], records[1].id]
    );
    assert!(assert::enqueued(db, "invoice.paid").await?.is_empty());

    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    for record in &records {
        worker.send(record.id).await?;
    }
    assert::assert_delivered(&handle, &[records[0].id, records[1].id]);
    let missing = std::panic::catch_unwind(|| {
        assert::assert_delivered(&handle, &[diesel_outbox_core::TaskId::new(987_654)])
    });
    assert!(
        missing.is_err(),
        "assert_delivered passed for a task never sent"
    );
    Ok(())
}
