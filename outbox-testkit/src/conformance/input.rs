//! Bad input gets a typed error naming the field, and nothing is written
//! (issue proof 3).

use chrono::{NaiveDate, TimeZone, Utc};
use diesel_async::AsyncConnection;
use diesel_outbox_core::{Error, Maintenance, Store, Task, limits::MAX_PAYLOAD_BYTES};

use super::support::{KIND, config, enqueue_committed, registry, task, worker};
use crate::{TestBackend, handler};

/// Every task a backend must refuse, with the field its error must name.
fn bad_tasks() -> anyhow::Result<Vec<(&'static str, Task)>> {
    let ancient = NaiveDate::from_ymd_opt(-5000, 1, 1)
        .and_then(|date| date.and_hms_opt(0, 0, 0))
        .map(|naive| Utc.from_utc_datetime(&naive))
        .ok_or_else(|| anyhow::anyhow!("year -5000 is a valid chrono date"))?;
    Ok(vec![
        ("kind", Task::new("", 1, "{}")),
        ("kind", Task::new("k".repeat(65), 1, "{}")),
        ("version", Task::new(KIND, 0, "{}")),
        ("version", Task::new(KIND, -1, "{}")),
        (
            "payload",
            Task::new(KIND, 1, vec![b'x'; MAX_PAYLOAD_BYTES + 1]),
        ),
        ("headers", task(0).header("", "empty name")),
        ("headers", task(0).header("big", "v".repeat(20 * 1024))),
        (
            "headers",
            task(0).headers((0..65).map(|i| (format!("h{i}"), String::new())).collect()),
        ),
        ("ordering_key", task(0).ordering_key("")),
        ("ordering_key", task(0).ordering_key("o".repeat(256))),
        ("dedup_key", task(0).dedup_key("d".repeat(256))),
        ("max_attempts", task(0).max_attempts(0)),
        // PostgreSQL cannot store NUL in text; every backend refuses it alike.
        ("kind", Task::new("order\0created", 1, "{}")),
        ("ordering_key", task(0).ordering_key("customer\0")),
        ("dedup_key", task(0).dedup_key("\0")),
        ("headers", task(0).header("trace\0id", "v")),
        ("headers", task(0).header("trace-id", "v\0")),
        ("expires_at", task(0).expires_at(ancient)),
        ("not_before", task(0).not_before(ancient)),
    ])
}

/// Each bad field is named by `InvalidArgument`, through `enqueue` and
/// through `enqueue_many` (where one bad task stops the whole batch), and the
/// transaction stays usable: the caller's next statement in it succeeds and
/// commits, and nothing of the bad task is written.
pub async fn bad_input_names_the_field_and_writes_nothing<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    let store = db.store();
    let mut conn = db.connect().await?;
    let bad = bad_tasks()?;
    let cases = i64::try_from(bad.len())?;
    for (field, bad) in bad {
        let (one, many) = conn
            .transaction::<_, anyhow::Error, _>(async |tx| {
                let one = store.enqueue(tx, bad.clone()).await;
                let many = store.enqueue_many(tx, vec![task(1), bad]).await;
                // The caller's next statement in the same transaction works.
                store.enqueue(tx, task(2)).await?;
                Ok((one, many))
            })
            .await?;
        for result in [one.map(|_| ()), many.map(|_| ())] {
            match result {
                Err(Error::InvalidArgument { field: named, .. }) => assert_eq!(named, field),
                other => panic!("a bad `{field}` gave {other:?}"),
            }
        }
    }
    assert_eq!(
        db.count_tasks().await?,
        cases,
        "a rejected task left a row, or a following statement was lost"
    );

    // The transaction survives a rejected task: what it wrote before commits.
    let ids = conn
        .transaction::<_, anyhow::Error, _>(async |tx| {
            let kept = store.enqueue(tx, task(1)).await?;
            assert!(store.enqueue(tx, Task::new("", 1, "{}")).await.is_err());
            Ok(kept)
        })
        .await?;
    assert_eq!(store.get(ids).await?.task.payload, b"{\"order\":1}");
    assert_eq!(db.count_tasks().await?, cases + 1);
    Ok(())
}

/// A payload of exactly 1 MiB is stored intact; one byte more is refused.
pub async fn payload_limit_is_exactly_one_mebibyte<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let payload: Vec<u8> = (0..MAX_PAYLOAD_BYTES)
        .map(|i| u8::try_from(i % 251).unwrap_or_default())
        .collect();
    let id = enqueue_committed(db, vec![Task::new(KIND, 1, payload.clone())]).await?[0];
    assert_eq!(db.store().get(id).await?.task.payload, payload);

    let mut too_big = payload;
    too_big.push(0);
    let refused = enqueue_committed(db, vec![Task::new(KIND, 1, too_big)]).await;
    let field = refused
        .err()
        .and_then(|e| e.downcast::<Error>().ok())
        .and_then(|e| e.field());
    assert_eq!(field, Some("payload"));
    assert_eq!(db.count_tasks().await?, 1);
    Ok(())
}

/// A round with batch size 0 or past the bound is refused, naming
/// `batch_size`; a purge past the longest duration, naming `older_than`.
pub async fn zero_batch_size_is_refused<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    let (mock, handle) = handler::recording();
    let worker = worker(db, registry(mock)?, config("w"))?;
    enqueue_committed(db, vec![task(1)]).await?;
    let refused = worker.retry_pending(0).await;
    assert_eq!(refused.err().and_then(|e| e.field()), Some("batch_size"));
    // Past what one completion write can carry on every backend.
    let refused = worker
        .retry_pending(diesel_outbox_core::limits::MAX_BATCH_SIZE + 1)
        .await;
    assert_eq!(refused.err().and_then(|e| e.field()), Some("batch_size"));
    let too_old = db
        .store()
        .purge_finished(diesel_outbox_core::limits::MAX_DURATION * 2, 10)
        .await;
    assert_eq!(too_old.err().and_then(|e| e.field()), Some("older_than"));
    assert_eq!(handle.calls(), 0);
    Ok(())
}
