//! Enqueueing belongs to the caller's transaction (issue proofs 1 and 2).

use diesel_async::AsyncConnection;
use diesel_outbox_core::{Error, Status, Store, Task, TaskId};

use super::support::{enqueue_committed, get, task};
use crate::TestBackend;

/// A task enqueued in a transaction that commits is an available row.
pub async fn enqueue_commits_with_the_transaction<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let ids = enqueue_committed(db, vec![task(1)]).await?;
    let record = get(db, ids[0]).await?;
    assert_eq!(record.status, Status::Available);
    assert_eq!(record.attempts, 0);
    assert_eq!(record.task.payload, b"{\"order\":1}");
    assert!(record.lease.is_none() && record.finished_at.is_none());
    assert_eq!(db.count_tasks().await?, 1);
    Ok(())
}

/// A task enqueued in a transaction that rolls back leaves no row.
pub async fn enqueue_rolls_back_with_the_transaction<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let store = db.store();
    let mut conn = db.connect().await?;
    let mut enqueued = None;
    let result = conn
        .transaction::<(), anyhow::Error, _>(async |tx| {
            enqueued = Some(store.enqueue(tx, task(1)).await?);
            anyhow::bail!("the business logic failed after enqueueing")
        })
        .await;
    assert!(result.is_err());
    let id = enqueued.ok_or_else(|| anyhow::anyhow!("enqueue did not run"))?;
    assert!(matches!(store.get(id).await, Err(Error::NotFound(missing)) if missing == id));
    assert_eq!(db.count_tasks().await?, 0);
    Ok(())
}

/// Outside any transaction, enqueue refuses and writes nothing.
pub async fn enqueue_outside_a_transaction_is_refused<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let mut conn = db.connect().await?;
    let one = db.store().enqueue(&mut conn, task(1)).await;
    assert!(matches!(one, Err(Error::NotTransaction)), "{one:?}");
    let many = db
        .store()
        .enqueue_many(&mut conn, vec![task(2), task(3)])
        .await;
    assert!(matches!(many, Err(Error::NotTransaction)), "{many:?}");
    assert_eq!(db.count_tasks().await?, 0);
    Ok(())
}

/// `enqueue_many` returns ids in input order; a dedup key repeated within the
/// batch or already held maps to the one row.
pub async fn enqueue_many_returns_ids_in_order<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let held = enqueue_committed(db, vec![task(0).dedup_key("held")]).await?[0];
    let store = db.store();
    let mut conn = db.connect().await?;
    let batch = vec![
        task(1),
        task(2).dedup_key("fresh"),
        task(3).dedup_key("held"),
        task(4).dedup_key("fresh"),
        task(5),
    ];
    let ids = conn
        .transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue_many(tx, batch).await?))
        .await?;
    assert_eq!(ids.len(), 5);
    assert_eq!(ids[2], held);
    assert_eq!(ids[1], ids[3]);
    for (index, n) in [(0, 1), (1, 2), (4, 5)] {
        let record = get(db, ids[index]).await?;
        assert_eq!(
            record.task.payload,
            format!("{{\"order\":{n}}}").into_bytes()
        );
    }
    assert!(
        ids[0] < ids[1] && ids[1] < ids[4],
        "ids follow input order: {ids:?}"
    );
    assert_eq!(db.count_tasks().await?, 4);
    Ok(())
}

/// Two transactions enqueueing one dedup key at the same time: one row, and
/// both callers get its id; another key gets a new row.
pub async fn concurrent_dedup_gives_one_row<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let store = db.store();
    let (mut first, mut second) = (db.connect().await?, db.connect().await?);
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let (commit_tx, commit_rx) = tokio::sync::oneshot::channel::<()>();
    // The first transaction enqueues and holds its transaction open until the
    // second one has started enqueueing the same key.
    let holder = first.transaction::<TaskId, anyhow::Error, _>(async |tx| {
        let id = store.enqueue(tx, task(1).dedup_key("order-1")).await?;
        entered_tx.send(()).ok();
        commit_rx.await.ok();
        Ok(id)
    });
    let contender = async {
        entered_rx.await?;
        second
            .transaction::<TaskId, anyhow::Error, _>(async |tx| {
                let pending = store.enqueue(tx, task(2).dedup_key("order-1"));
                tokio::pin!(pending);
                // Give the contender's insert the chance to reach the server and
                // wait on the holder's row lock before the holder commits.
                if tokio::time::timeout(std::time::Duration::from_millis(200), &mut pending)
                    .await
                    .is_ok()
                {
                    anyhow::bail!("the contender's insert did not wait for the holder");
                }
                commit_tx.send(()).ok();
                Ok(pending.await?)
            })
            .await
    };
    let (held, contended) = tokio::join!(holder, contender);
    let (held, contended) = (held?, contended?);
    assert_eq!(held, contended);
    assert_eq!(db.count_tasks().await?, 1);
    assert_eq!(get(db, held).await?.task.payload, b"{\"order\":1}");

    let other = enqueue_committed(db, vec![task(3).dedup_key("order-2")]).await?[0];
    assert_ne!(other, held);
    assert_eq!(db.count_tasks().await?, 2);
    Ok(())
}

/// `enqueue_many` stores every field of every task, whatever mix of set and
/// unset fields the batch holds (stores shape their statements to it).
pub async fn enqueue_many_stores_every_field<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    use chrono::{TimeZone, Utc};
    let at = |s: i64| Utc.timestamp_opt(2_000_000_000 + s, 123_456_000).single();
    let batches: Vec<Vec<Task>> = vec![
        // All alike: one kind, nothing optional.
        (0..3).map(task).collect(),
        // Everything set, the same for every row.
        (0..3)
            .map(|n| {
                task(n)
                    .header("h", "v")
                    .ordering_key("k")
                    .max_attempts(3)
                    .expires_at(at(10).unwrap_or_default())
                    .not_before(at(5).unwrap_or_default())
            })
            .collect(),
        // Everything varying, set on some rows only.
        vec![
            Task::new("a.kind", 2, "x").header("one", "1"),
            task(1).ordering_key("k1").max_attempts(5),
            Task::new("b.kind", 3, vec![0u8, 255]).expires_at(at(20).unwrap_or_default()),
            task(3)
                .not_before(at(30).unwrap_or_default())
                .header("two", "2"),
            // Text that needs escaping or is not ASCII, beside plain rows.
            task(4)
                .ordering_key("ключ \"q\" \\ ✓")
                .header("quote", "a\"b\\c\n ✓"),
        ],
    ];
    // The first task of a key heads it; the key's later ones are blocked.
    let mut keys_seen = std::collections::HashSet::new();
    for batch in batches {
        let ids = super::support::enqueue_batch(db, batch.clone()).await?;
        assert_eq!(ids.len(), batch.len());
        for (id, sent) in ids.into_iter().zip(batch) {
            let stored = db.store().get(id).await?;
            let mut expected = sent.clone();
            expected.not_before = None; // folded into next_attempt_at
            assert_eq!(stored.task, expected, "task {id}");
            if let Some(at) = sent.not_before {
                assert_eq!(stored.next_attempt_at, at, "task {id}");
            }
            let head = sent
                .ordering_key
                .as_ref()
                .is_none_or(|key| keys_seen.insert(key.clone()));
            let expected_status = match (head, stored.next_attempt_at > stored.created_at) {
                (false, _) => Status::Blocked,
                (true, true) => Status::Waiting,
                (true, false) => Status::Available,
            };
            assert_eq!(stored.status, expected_status, "task {id}");
        }
    }
    Ok(())
}
