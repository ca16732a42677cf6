//! Relays purge side by side: each one's retention purge runs while the
//! others' do, over the same oldest rows. InnoDB must never make them
//! deadlock, which a relay would report as an error at every purge.

use std::time::Duration;

use diesel_async::{AsyncConnection, SimpleAsyncConnection as _};
use diesel_outbox_mysql::outbox::{Maintenance as _, Store as _, Task};
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};

/// Finished tasks to purge.
const TASKS: usize = 6_000;
/// Purges running at once.
const PURGERS: usize = 4;
/// Rows per purge statement: small, so that the purges take many turns.
const BATCH: usize = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_running_side_by_side_never_deadlock() -> anyhow::Result<()> {
    let db = MysqlTestDb::create("concurrent_purges").await?;
    let store = db.store().clone();
    let mut conn = db.connect().await?;
    let tasks: Vec<Task> = (0..TASKS)
        .map(|n| Task::new("order.created", 1, format!("{{\"order\":{n}}}")))
        .collect();
    conn.transaction::<_, anyhow::Error, _>(async |tx| {
        store.enqueue_many(tx, tasks).await?;
        Ok(())
    })
    .await?;
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
