//! A bulk requeue of ten thousand failed tasks, in bounded batches.

use std::time::Instant;

use diesel_outbox_core::{Maintenance as _, Task};
use diesel_outbox_testkit::{
    TestBackend,
    conformance::support::{KIND, enqueue_batch},
    mysql::MysqlTestDb,
    postgres::PgTestDb,
};

use crate::support::outbox;

const TASKS: usize = 10_000;

/// Ten thousand tasks enqueued in two `enqueue_many` calls, then failed in
/// one statement, as a broker outage would leave them.
async fn failed_backlog<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    for half in 0..2 {
        let tasks = (0..TASKS / 2)
            .map(|n| Task::new(KIND, 1, format!("{{\"n\":{}}}", half * TASKS / 2 + n)))
            .collect();
        enqueue_batch(db, tasks).await?;
    }
    db.execute_sql(&format!(
        "UPDATE outbox_tasks SET status = 'failed', attempts = 1, \
         last_error = 'broker rejected the message', finished_at = {}",
        B::now_sql()
    ))
    .await?;
    Ok(())
}

async fn requeue_ten_thousand<B: TestBackend>(db: &B) -> anyhow::Result<()> {
    failed_backlog(db).await?;
    let url = db.url();
    assert_eq!(db.store().stats().await?.failed, TASKS as u64);

    let declined = outbox(url, &["requeue", "--status", "failed"]).expect(5);
    assert!(
        declined.stderr.contains("requeue 10000 task(s)"),
        "{declined:?}"
    );
    outbox(
        url,
        &["requeue", "--status", "failed", "--batch", "0", "--yes"],
    )
    .expect(2);

    let started = Instant::now();
    let run = outbox(
        url,
        &[
            "requeue", "--status", "failed", "--batch", "500", "--yes", "--json",
        ],
    )
    .expect(0);
    let took = started.elapsed();
    assert_eq!(run.json()["requeued"].as_u64(), Some(TASKS as u64));
    println!("requeued {TASKS} failed tasks in batches of 500 in {took:?}");
    let stats = db.store().stats().await?;
    assert_eq!((stats.failed, stats.available), (0, TASKS as u64));
    let run = outbox(url, &["requeue", "--status", "failed", "--yes", "--json"]).expect(0);
    assert_eq!(
        run.json()["requeued"].as_u64(),
        Some(0),
        "nothing left to requeue"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_requeues_ten_thousand_failed_tasks() {
    let db = PgTestDb::create("cli_bulk_requeue").await.unwrap();
    requeue_ten_thousand(&db).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_requeues_ten_thousand_failed_tasks() {
    let db = MysqlTestDb::create("cli_bulk_requeue").await.unwrap();
    requeue_ten_thousand(&db).await.unwrap();
}
