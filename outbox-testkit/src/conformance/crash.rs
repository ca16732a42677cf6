//! A relay killed with SIGKILL mid-run loses nothing: a child process runs
//! the relay, the parent kills it and lets a new relay finish the work.

use std::{process::Stdio, sync::Arc, time::Duration};

use anyhow::Context as _;
use diesel_outbox_core::{Delivery, Handler, Maintenance, Task, WorkerConfig, handler_fn};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::Command,
};
use tokio_util::sync::CancellationToken;

use super::{
    relay::{relay_config, spawn_relay},
    support::{config, enqueue_batch, registry, task, worker},
};
use crate::TestBackend;

/// Environment variable that makes [`relay_child`] run, naming its database.
pub const CHILD_URL_VAR: &str = "OUTBOX_RELAY_CHILD_URL";

const TASKS: usize = 2000;
const DELIVERIES: &str =
    "CREATE TABLE deliveries (task_id BIGINT NOT NULL, owner VARCHAR(64) NOT NULL)";

/// The name libtest knows a test by, from the `module_path!()` of the test
/// crate's module and the test's name (the crate's own name is dropped).
pub fn test_name(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_owned(),
    }
}

/// A handler whose effect is a row in `deliveries`, followed by a short wait
/// (as for a broker's acknowledgement) during which a crash makes the effect
/// happen twice.
fn recording_effect<B: TestBackend>(db: Arc<B>, owner: &'static str) -> impl Handler {
    handler_fn(move |delivery: Delivery| {
        let db = Arc::clone(&db);
        async move {
            db.execute_sql(&format!(
                "INSERT INTO deliveries (task_id, owner) VALUES ({}, '{owner}')",
                delivery.id
            ))
            .await?;
            eprintln!("delivered {}", delivery.id);
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(())
        }
    })
}

fn crash_config(owner: &str) -> WorkerConfig {
    // As many handlers as the test database's pool has connections, so a
    // handler's effect does not queue for one past its timeout.
    config(owner)
        .handler_timeout(Duration::from_millis(500))
        .lease_duration(Duration::from_secs(2))
        .concurrency(8)
}

/// The child's side: when [`CHILD_URL_VAR`] is set, runs a relay on that
/// database until the process is killed; otherwise does nothing.
pub async fn relay_child<B: TestBackend>() -> anyhow::Result<()> {
    let Ok(url) = std::env::var(CHILD_URL_VAR) else {
        return Ok(());
    };
    let db = Arc::new(B::attach(&url).await?);
    let handler = recording_effect(Arc::clone(&db), "child");
    let worker = worker(&*db, registry(handler)?, crash_config("child"))?;
    let relay = diesel_outbox_core::Relay::new(worker, relay_config())?;
    relay.run(CancellationToken::new()).await;
    Ok(())
}

/// 2,000 tasks; a relay in a child process is killed with SIGKILL while
/// handlers run; a new relay finishes: every task succeeds, and the tasks
/// handled twice are at most those the child had in flight at the kill.
pub async fn killed_relay_loses_nothing<B: TestBackend>(
    db: B,
    child_test: &str,
) -> anyhow::Result<()> {
    let db = Arc::new(db);
    db.execute_sql(DELIVERIES).await?;
    enqueue_batch(&*db, (0..TASKS).map(task).collect::<Vec<Task>>()).await?;

    let mut child = Command::new(std::env::current_exe()?)
        .args([
            child_test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_URL_VAR, db.url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the child relay")?;
    let stderr = child.stderr.take().context("the child's stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let mut delivered = 0;
    while delivered < 300 {
        let line = lines
            .next_line()
            .await?
            .context("the child relay exited before it was killed")?;
        if line.starts_with("delivered ") {
            delivered += 1;
        }
    }
    child.start_kill()?;
    child.wait().await?;

    // What the child claimed and did not finish: leased to it, or given back
    // for a retry (a handler cut at its timeout on a loaded machine).
    let in_flight = db
        .count("outbox_tasks WHERE status IN ('running', 'available', 'waiting') AND attempts > 0")
        .await?;
    let finished_by_child = db.count("outbox_tasks WHERE status = 'succeeded'").await?;
    assert!(in_flight > 0, "nothing was in flight at the kill");
    assert!(
        finished_by_child < TASKS as i64,
        "the child finished before the kill"
    );

    // The new relay has the same effect, and counts its successes.
    let effect = Arc::new(recording_effect(Arc::clone(&db), "parent"));
    let (counted, handle) = crate::handler::recording();
    let both = handler_fn(move |delivery: Delivery| {
        let (effect, counted) = (Arc::clone(&effect), counted.clone());
        async move {
            effect.handle(delivery.clone()).await?;
            counted.handle(delivery).await
        }
    });
    let shutdown = CancellationToken::new();
    let relay = spawn_relay(
        worker(&*db, registry(both)?, crash_config("parent"))?,
        relay_config(),
        &shutdown,
    )?;
    // The child's last statements may still commit after it died (a server
    // finishes a statement it already received), so how many tasks are left
    // is only known from the table: wait until none is pending.
    handle.wait_for_successes(1).await;
    crate::wait::eventually(async || Ok(db.store().stats().await?.backlog() == 0)).await?;
    shutdown.cancel();
    relay.await?;

    let stats = db.store().stats().await?;
    assert_eq!((stats.backlog(), stats.succeeded), (0, TASKS as u64));
    let rows = db.count("deliveries").await?;
    let distinct = db
        .count("(SELECT DISTINCT task_id FROM deliveries) AS d")
        .await?;
    assert_eq!(distinct, TASKS as i64, "a task was never delivered");
    let twice = rows - distinct;
    // A handler a relay itself ran again (cut at its timeout, then retried)
    // is at-least-once at work, not the crash: the child before the kill, or
    // the parent afterwards (on SQLite, an effect's insert can wait out the
    // handler timeout for the write lock, then commit).
    let retried_by = async |owner: &str| -> anyhow::Result<i64> {
        let rows = db
            .count(&format!("deliveries WHERE owner = '{owner}'"))
            .await?;
        let tasks = db
            .count(&format!(
                "(SELECT DISTINCT task_id FROM deliveries WHERE owner = '{owner}') AS o"
            ))
            .await?;
        Ok(rows - tasks)
    };
    let retried_by_child = retried_by("child").await?;
    let retried_by_parent = retried_by("parent").await?;
    eprintln!(
        "killed with {in_flight} tasks in flight; {twice} tasks handled twice \
         ({retried_by_child} of them retried by the child before the kill, \
         {retried_by_parent} by the parent after it)"
    );
    assert!(
        twice - retried_by_child - retried_by_parent <= in_flight,
        "{twice} tasks were handled twice, more than the {in_flight} in flight at the kill"
    );
    Ok(())
}
