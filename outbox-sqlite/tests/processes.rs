//! Three relays in three processes on one database file, 5,000 tasks, one
//! relay killed with SIGKILL mid-run: every task is delivered, and the tasks
//! delivered both by the killed relay and by another are at most those the
//! killed relay had in flight.
//!
//! Each relay is this test binary run again as a child process. A delivery's
//! effect is a line appended to a log file of the relay's own, outside the
//! database, like a message handed to a broker: it survives the kill.

use std::{
    collections::{HashMap, HashSet},
    io::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context as _;
use diesel_async::AsyncConnection;
use diesel_outbox_sqlite::outbox::{
    CancellationToken, Delivery, Maintenance, Registry, Relay, RelayConfig, Store, Task,
    WorkerConfig, handler_fn,
};
use diesel_outbox_testkit::{TestBackend, conformance::crash::test_name, sqlite::SqliteTestDb};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

const TASKS: usize = 5_000;
const RELAYS: usize = 3;
/// The relay that is killed.
const KILLED: &str = "relay-0";
/// Deliveries the killed relay makes before it is killed.
const KILL_AFTER: usize = 500;

/// Names the database a child relay works on; unset, the child does nothing.
const URL_VAR: &str = "OUTBOX_SQLITE_RELAY_URL";
/// The child relay's owner name, which also names its log file.
const OWNER_VAR: &str = "OUTBOX_SQLITE_RELAY_OWNER";

/// The log file of `owner`'s deliveries, next to the database file.
fn log_path(db: &Path, owner: &str) -> PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push(format!(".{owner}.log"));
    PathBuf::from(path)
}

/// Handler timeout far below the lease, so a handler never outlives its
/// claim, and far above a delivery's time even when the relays queue for
/// the write lock: a task runs twice only because of the kill.
fn worker_config(owner: &str) -> WorkerConfig {
    WorkerConfig::default()
        .owner(owner)
        .handler_timeout(Duration::from_secs(2))
        .lease_duration(Duration::from_secs(4))
        .concurrency(16)
}

/// The child's side: a relay on the database named by [`URL_VAR`] until the
/// process is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run as a child process by three_relay_processes_one_killed_deliver_everything"]
async fn relay_process() {
    let (Ok(url), Ok(owner)) = (std::env::var(URL_VAR), std::env::var(OWNER_VAR)) else {
        return;
    };
    let db = SqliteTestDb::attach(&url).await.expect("attach");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(db.path(), &owner))
        .expect("log file");
    let log = Arc::new(Mutex::new(log));
    let handler = handler_fn(move |delivery: Delivery| {
        let log = Arc::clone(&log);
        async move {
            // One append per delivery: the effect, done before the result
            // is written, as a publish to a broker would be.
            let mut file = log.lock().map_err(|_| anyhow::anyhow!("log poisoned"))?;
            file.write_all(format!("{}\n", delivery.id).as_bytes())?;
            drop(file);
            eprintln!("delivered {}", delivery.id);
            Ok(())
        }
    });
    let registry = Registry::builder()
        .handler("order.created", 1, handler)
        .build()
        .expect("registry");
    let worker = diesel_outbox_sqlite::outbox::Worker::with_config(
        db.store().clone(),
        registry,
        worker_config(&owner),
    )
    .expect("worker");
    let config = RelayConfig::default().poll_interval(Duration::from_millis(50));
    Relay::new(worker, config)
        .expect("relay")
        .run(CancellationToken::new())
        .await;
}

/// Starts the relay `owner`; only the one to be killed reports its
/// deliveries on a pipe (nobody reads the others', which would fill up).
fn spawn(db: &SqliteTestDb, owner: &str) -> anyhow::Result<Child> {
    let stderr = if owner == KILLED {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    Command::new(std::env::current_exe()?)
        .args([
            &test_name(module_path!(), "relay_process"),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(URL_VAR, db.url())
        .env(OWNER_VAR, owner)
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .context("starting a relay process")
}

/// Each owner's deliveries, read from the log files.
fn deliveries(db: &Path, owners: &[String]) -> anyhow::Result<HashMap<String, Vec<i64>>> {
    owners
        .iter()
        .map(|owner| {
            let text = std::fs::read_to_string(log_path(db, owner)).unwrap_or_default();
            let ids = text
                .lines()
                .map(str::parse)
                .collect::<Result<Vec<i64>, _>>()
                .with_context(|| format!("{owner}'s log"))?;
            Ok((owner.clone(), ids))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_relay_processes_one_killed_deliver_everything() {
    let db = SqliteTestDb::create("three_relay_processes")
        .await
        .expect("db");
    let owners: Vec<String> = (0..RELAYS).map(|i| format!("relay-{i}")).collect();
    let scenario = async {
        let tasks: Vec<Task> = (0..TASKS)
            .map(|n| Task::new("order.created", 1, format!("{{\"order\":{n}}}")))
            .collect();
        let store = db.store();
        db.connect()
            .await?
            .transaction::<_, anyhow::Error, _>(async |tx| {
                Ok(store.enqueue_many(tx, tasks).await?)
            })
            .await?;

        let mut children = Vec::new();
        for owner in &owners {
            children.push(spawn(&db, owner)?);
        }
        // Kill relay-0 once it delivered KILL_AFTER tasks.
        let stderr = children[0].stderr.take().context("relay-0's stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let mut delivered = 0;
        while delivered < KILL_AFTER {
            let line = lines
                .next_line()
                .await?
                .context("relay-0 exited before it was killed")?;
            if line.starts_with("delivered ") {
                delivered += 1;
            }
        }
        children[0].start_kill()?;
        children[0].wait().await?;
        // What it had claimed and not finished: its leases, until they lapse
        // and another relay rescues them (a handler it started may already
        // have logged its effect).
        let in_flight = db
            .count(&format!("outbox_tasks WHERE lease_owner = '{KILLED}'"))
            .await?;
        let done_at_kill = db.count("outbox_tasks WHERE status = 'succeeded'").await?;
        assert!(in_flight > 0, "relay-0 had nothing in flight at the kill");
        assert!(
            done_at_kill < TASKS as i64,
            "the work was done before the kill"
        );

        diesel_outbox_testkit::wait::eventually(async || {
            Ok(db.store().stats().await?.backlog() == 0)
        })
        .await?;
        for child in &mut children[1..] {
            child.start_kill()?;
            child.wait().await?;
        }

        let stats = db.store().stats().await?;
        assert_eq!(
            (stats.succeeded, stats.backlog()),
            (TASKS as u64, 0),
            "{stats:?}"
        );
        let logs = deliveries(db.path(), &owners)?;
        let mut by_task: HashMap<i64, HashSet<&str>> = HashMap::new();
        let mut rows = 0;
        for (owner, ids) in &logs {
            rows += ids.len();
            for id in ids {
                by_task.entry(*id).or_default().insert(owner.as_str());
            }
        }
        assert_eq!(by_task.len(), TASKS, "a task was never delivered");
        for (owner, ids) in &logs {
            assert!(!ids.is_empty(), "{owner} delivered nothing");
        }
        let crossed = by_task
            .values()
            .filter(|owners| owners.contains(KILLED) && owners.len() > 1)
            .count();
        eprintln!(
            "{TASKS} tasks, {RELAYS} relay processes; relay-0 killed with {in_flight} in flight \
             after {done_at_kill} were done; {} deliveries in all, {crossed} tasks delivered by \
             relay-0 and again by another; per relay: {:?}",
            rows,
            owners
                .iter()
                .map(|owner| logs.get(owner).map_or(0, Vec::len))
                .collect::<Vec<_>>()
        );
        assert!(
            crossed as i64 <= in_flight,
            "{crossed} tasks delivered again after the kill, more than the {in_flight} in flight"
        );
        // Every other duplicate would be a relay running a task twice on its
        // own, which the handler timeout rules out here.
        assert_eq!(rows - TASKS, crossed, "duplicates not caused by the kill");
        anyhow::Ok(())
    };
    let outcome = tokio::time::timeout(Duration::from_secs(120), scenario).await;
    for owner in &owners {
        let _ = std::fs::remove_file(log_path(db.path(), owner));
    }
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(error)) => panic!("{error:#}"),
        Err(_) => panic!("the scenario did not finish within 120 s"),
    }
}
