//! The inbox: a message's effect and its record commit or roll back
//! together, and one message id is applied once per consumer however often,
//! and however concurrently, it arrives.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use diesel_outbox_core::{Error, Inbox, Receipt};
use tokio::sync::Barrier;

use crate::TestBackend;

const EFFECTS: &str = "CREATE TABLE effects (message_id VARCHAR(255) NOT NULL)";

/// Records `message_id` for `consumer` and, when it is new, applies the
/// effect (a row in `effects`), in one transaction of the store's; fails
/// after the effect when `fail` is set, so both roll back.
async fn deliver<B: TestBackend>(
    db: &B,
    consumer: &str,
    message_id: &str,
    fail: bool,
) -> anyhow::Result<Receipt> {
    let store = db.store().clone();
    let (consumer, message_id) = (consumer.to_owned(), message_id.to_owned());
    db.store()
        .transaction(move |conn: &mut B::Conn| {
            Box::pin(async move {
                let receipt = store.record(conn, &consumer, &message_id).await?;
                if receipt.is_new() {
                    conn.batch_execute(&format!(
                        "INSERT INTO effects (message_id) VALUES ('{message_id}')"
                    ))
                    .await?;
                }
                if fail {
                    anyhow::bail!("the effect failed");
                }
                Ok(receipt)
            })
        })
        .await
}

/// New, then applied; the same id again is a duplicate with no effect; the
/// id is per consumer.
pub async fn inbox_applies_a_message_once_per_consumer<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    db.migrate_inbox().await?;
    db.execute_sql(EFFECTS).await?;
    assert_eq!(
        deliver(db, "shipping", "orders:1", false).await?,
        Receipt::New
    );
    assert_eq!(
        deliver(db, "shipping", "orders:1", false).await?,
        Receipt::Duplicate
    );
    assert_eq!(db.count("effects").await?, 1);
    // Byte-exact keys: a trailing space or another consumer is another record.
    assert_eq!(
        deliver(db, "shipping", "orders:1 ", false).await?,
        Receipt::New
    );
    assert_eq!(
        deliver(db, "billing", "orders:1", false).await?,
        Receipt::New
    );
    assert_eq!(db.count("effects").await?, 3);
    assert_eq!(db.count("outbox_inbox").await?, 3);
    Ok(())
}

/// An effect that rolls back takes its record with it: the next delivery of
/// the id is new and applies.
pub async fn inbox_record_rolls_back_with_the_effect<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    db.migrate_inbox().await?;
    db.execute_sql(EFFECTS).await?;
    let failed = deliver(db, "shipping", "orders:2", true).await;
    assert!(failed.is_err(), "the body failed: {failed:?}");
    assert_eq!(db.count("outbox_inbox").await?, 0);
    assert_eq!(db.count("effects").await?, 0);
    assert_eq!(
        deliver(db, "shipping", "orders:2", false).await?,
        Receipt::New
    );
    assert_eq!(db.count("effects").await?, 1);
    Ok(())
}

/// Outside a transaction the record is refused, and so is a bad name or id;
/// nothing is written.
pub async fn inbox_outside_a_transaction_or_with_bad_keys_is_refused<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    db.migrate_inbox().await?;
    let store = db.store();
    let mut conn = db.connect().await?;
    let refused = store.record(&mut conn, "shipping", "orders:3").await;
    assert!(matches!(refused, Err(Error::NotTransaction)), "{refused:?}");
    let long = "m".repeat(256);
    for (consumer, message_id, field) in [
        ("", "orders:3", "consumer"),
        ("shipping", "", "message_id"),
        ("shipping", long.as_str(), "message_id"),
    ] {
        let refused = conn
            .transaction::<_, anyhow::Error, _>(async |tx| {
                Ok(store.record(tx, consumer, message_id).await)
            })
            .await?;
        assert_eq!(
            refused.as_ref().err().and_then(Error::field),
            Some(field),
            "{refused:?}"
        );
    }
    assert_eq!(db.count("outbox_inbox").await?, 0);
    Ok(())
}

/// Sixteen deliveries of one id at once: exactly one applies, the others
/// see a duplicate, and there is one effect.
pub async fn inbox_concurrent_deliveries_apply_once<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    const DELIVERIES: usize = 16;
    db.migrate_inbox().await?;
    db.execute_sql(EFFECTS).await?;
    // A connection per delivery, so that none waits for the pool.
    let store = db.store_with_pool(DELIVERIES)?;
    let start = Arc::new(Barrier::new(DELIVERIES));
    let mut deliveries = tokio::task::JoinSet::new();
    for _ in 0..DELIVERIES {
        let (store, start) = (store.clone(), Arc::clone(&start));
        deliveries.spawn(async move {
            start.wait().await;
            let inbox = store.clone();
            store
                .transaction(move |conn: &mut B::Conn| {
                    Box::pin(async move {
                        let receipt = inbox.record(conn, "shipping", "orders:4").await?;
                        if receipt.is_new() {
                            conn.batch_execute(
                                "INSERT INTO effects (message_id) VALUES ('orders:4')",
                            )
                            .await?;
                            // Keeps the record uncommitted for a moment, so
                            // that the other inserts meet it (the outcome
                            // does not depend on it).
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        anyhow::Ok(receipt)
                    })
                })
                .await
        });
    }
    let mut new = 0;
    while let Some(receipt) = deliveries.join_next().await {
        if receipt??.is_new() {
            new += 1;
        }
    }
    assert_eq!(new, 1, "exactly one delivery applies");
    assert_eq!(db.count("effects").await?, 1);
    assert_eq!(db.count("outbox_inbox").await?, 1);
    Ok(())
}

/// Purging deletes only records older than the retention, in batches.
pub async fn inbox_purge_deletes_old_records_in_batches<B: TestBackend>(
    db: &B,
) -> anyhow::Result<()> {
    db.migrate_inbox().await?;
    db.execute_sql(EFFECTS).await?;
    for n in 0..5 {
        deliver(db, "shipping", &format!("orders:{n}"), false).await?;
    }
    let old = B::instant_sql(Utc::now() - chrono::TimeDelta::days(2));
    db.execute_sql(&format!(
        "UPDATE outbox_inbox SET applied_at = {old} \
         WHERE message_id IN ('orders:0', 'orders:1', 'orders:2')"
    ))
    .await?;
    let day = Duration::from_secs(86_400);
    assert_eq!(db.store().purge_inbox(day, 2).await?, 3);
    assert_eq!(db.count("outbox_inbox").await?, 2);
    let refused = db.store().purge_inbox(day, 0).await;
    assert_eq!(refused.err().as_ref().and_then(Error::field), Some("batch"));
    Ok(())
}
