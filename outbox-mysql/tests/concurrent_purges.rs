//! Relays purge side by side: each one's retention purge runs while the
//! others' do, over the same oldest rows. InnoDB must never make them
//! deadlock, which a relay would report as an error at every purge.

use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncMysqlConnection, SimpleAsyncConnection as _};
use diesel_outbox_mysql::outbox::{Maintenance as _, Store as _, Task};
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};

/// Finished tasks to purge.
const TASKS: usize = 6_000;
/// Purges running at once.
const PURGERS: usize = 4;
/// Rows per purge statement: small, so that the purges take many turns.
const BATCH: usize = 25;

/// A database of its own holding `n` available tasks, and a connection to it.
async fn with_tasks(name: &str, n: usize) -> anyhow::Result<(MysqlTestDb, AsyncMysqlConnection)> {
    let db = MysqlTestDb::create(name).await?;
    let mut conn = db.connect().await?;
    let tasks: Vec<Task> = (0..n)
        .map(|n| Task::new("order.created", 1, format!("{{\"order\":{n}}}")))
        .collect();
    conn.transaction::<_, anyhow::Error, _>(async |tx| {
        db.store().enqueue_many(tx, tasks).await?;
        Ok(())
    })
    .await?;
    Ok((db, conn))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_running_side_by_side_never_deadlock() -> anyhow::Result<()> {
    let (db, mut conn) = with_tasks("concurrent_purges", TASKS).await?;
    let store = db.store().clone();
    // Finished an hour ago, each a second after the one before, so the
    // purges take them oldest first in the same order the ids run.
    conn.batch_execute(
        "UPDATE outbox_tasks SET status = 'succeeded', \
         finished_at = UTC_TIMESTAMP(6) - INTERVAL 7200 SECOND + INTERVAL id SECOND",
    )
    .await?;
    let purges = (0..PURGERS).map(|_| {
        let store = store.clone();
        async move {
            let mut purged = 0;
            // Until nothing is left to any of them: a purge that found its
            // rows taken by another comes back short, and tries again.
            loop {
                let deleted = store.purge_finished(Duration::from_secs(60), BATCH).await?;
                purged += deleted;
                if deleted == 0 {
                    return anyhow::Ok(purged);
                }
            }
        }
    });
    let purged: u64 = futures_util::future::try_join_all(purges)
        .await?
        .into_iter()
        .sum();
    assert_eq!(purged, TASKS as u64, "each task purged once, by one purge");
    assert_eq!(store.purge_finished(Duration::ZERO, BATCH).await?, 0);
    Ok(())
}

/// A purge takes only the rows it read: finished rows between which other
/// tasks still run (a short retention, or a slow handler) are deleted while
/// a completion write holds one of the running rows, without waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_never_waits_for_the_running_rows_between_its_own() -> anyhow::Result<()> {
    let (db, mut conn) = with_tasks("purge_between_running", 100).await?;
    let store = db.store().clone();
    // Every other task finished an hour ago; the ones between still run.
    conn.batch_execute(
        "UPDATE outbox_tasks SET status = IF(id % 2 = 0, 'succeeded', 'running'), \
         attempts = 1, \
         finished_at = IF(id % 2 = 0, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, NULL), \
         lease_owner = IF(id % 2 = 0, NULL, 'another relay'), \
         lease_expires_at = IF(id % 2 = 0, NULL, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
    )
    .await?;
    // A write holds a running row in the middle, as a completion would.
    let mut holder = db.connect().await?;
    holder
        .batch_execute(
            "BEGIN; SELECT id FROM outbox_tasks WHERE status = 'running' \
             ORDER BY id LIMIT 1 OFFSET 25 FOR UPDATE",
        )
        .await?;
    let purged = tokio::time::timeout(
        Duration::from_secs(10),
        store.purge_finished(Duration::from_secs(60), 1_000),
    )
    .await
    .map_err(|_| anyhow::anyhow!("the purge waited for a running row it never read"))??;
    assert_eq!(purged, 50);
    holder.batch_execute("ROLLBACK").await?;
    Ok(())
}
