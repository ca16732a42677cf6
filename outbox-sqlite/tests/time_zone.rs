//! Time-zone independence: processes whose `TZ` differ enqueue and read back
//! the same instants, and store the same values for them.
//!
//! The test runs this binary again as a child process once per zone (the
//! crash tests' pattern); each child enqueues tasks with known instants on
//! one shared database file and checks what it reads back, and the parent
//! then compares what the three children wrote.

use std::process::Stdio;

use anyhow::Context as _;
use chrono::{DateTime, Local, NaiveDate, TimeDelta, Utc};
use diesel::{QueryableByName, sql_types::BigInt};
use diesel_async::{AsyncConnection, RunQueryDsl};
use diesel_outbox_sqlite::outbox::{Maintenance, Store, Task};
use diesel_outbox_testkit::{TestBackend, conformance::crash::test_name, sqlite::SqliteTestDb};

/// Names the database a child works on; unset, the child does nothing.
const CHILD_URL_VAR: &str = "OUTBOX_TZ_CHILD_URL";

/// POSIX zone strings (no time zone database needed): UTC+05:30, UTC-08:00
/// with daylight saving, UTC+12:45.
const ZONES: [&str; 3] = ["IST-5:30", "PST8PDT,M3.2.0,M11.1.0", "CHAST-12:45"];

fn instant(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, us: u32) -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(y, mo, d)
        .and_then(|date| date.and_hms_micro_opt(h, mi, s, us))
        .expect("a valid instant")
        .and_utc()
}

/// A deadline and a schedule around a daylight-saving change in the
/// children's zones, to the microsecond.
fn expires() -> DateTime<Utc> {
    instant(2031, 3, 9, 10, 30, 0, 123_456)
}

fn not_before() -> DateTime<Utc> {
    instant(2030, 11, 3, 9, 15, 59, 999_999)
}

/// The child's side: enqueues a task with [`expires`] and [`not_before`],
/// reads it back, and reports its local offset and the task's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run as a child process by the same_instants_in_every_process_time_zone"]
async fn tz_child() {
    let Ok(url) = std::env::var(CHILD_URL_VAR) else {
        return;
    };
    let db = SqliteTestDb::attach(&url).await.expect("attach");
    let store = db.store();
    let mut conn = db.connect().await.expect("connect");
    let zone = std::env::var("TZ").unwrap_or_default();
    let task = Task::new("order.created", 1, zone.clone())
        .expires_at(expires())
        .not_before(not_before());
    let id = conn
        .transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue(tx, task).await?))
        .await
        .expect("enqueue");
    let record = store.get(id).await.expect("get");
    assert_eq!(record.task.expires_at, Some(expires()), "in zone {zone}");
    assert_eq!(record.next_attempt_at, not_before(), "in zone {zone}");
    let skew = (record.created_at - Utc::now()).abs();
    assert!(
        skew < TimeDelta::minutes(1),
        "created_at off by {skew} in {zone}"
    );
    let offset = Local::now().offset().local_minus_utc();
    eprintln!("tz-child offset={offset} id={id}");
}

#[derive(QueryableByName)]
struct Stored {
    #[diesel(sql_type = BigInt)]
    next_attempt_at: i64,
    #[diesel(sql_type = BigInt)]
    expires_at: i64,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
}

/// Runs [`tz_child`] with `TZ` set to `zone`; returns its local offset.
async fn run_child(db: &SqliteTestDb, zone: &str) -> anyhow::Result<i32> {
    let output = tokio::process::Command::new(std::env::current_exe()?)
        .args([
            &test_name(module_path!(), "tz_child"),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_URL_VAR, db.url())
        .env("TZ", zone)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .await
        .context("running the child")?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "the child in {zone} failed:\n{stderr}"
    );
    let line = stderr
        .lines()
        .find_map(|line| line.strip_prefix("tz-child offset="))
        .with_context(|| format!("the child in {zone} reported nothing:\n{stderr}"))?;
    let offset = line.split_whitespace().next().unwrap_or_default();
    Ok(offset.parse()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_instants_in_every_process_time_zone() {
    let db = SqliteTestDb::create("tz_processes")
        .await
        .expect("test database");
    let mut offsets = Vec::new();
    for zone in ZONES {
        offsets.push(run_child(&db, zone).await.expect("child"));
    }
    // The zones really applied: three different local offsets.
    offsets.sort_unstable();
    offsets.dedup();
    assert_eq!(
        offsets.len(),
        3,
        "the children's local offsets: {offsets:?}"
    );

    let mut conn = db.connect().await.expect("connect");
    let stored: Vec<Stored> = diesel::sql_query(
        "SELECT next_attempt_at, expires_at, created_at FROM outbox_tasks ORDER BY id",
    )
    .load(&mut conn)
    .await
    .expect("read the rows");
    assert_eq!(stored.len(), ZONES.len());
    for row in &stored {
        // The same values, whichever zone wrote them: microseconds since
        // the epoch, UTC.
        assert_eq!(row.expires_at, expires().timestamp_micros());
        assert_eq!(row.next_attempt_at, not_before().timestamp_micros());
        let written = DateTime::from_timestamp_micros(row.created_at).expect("in range");
        let skew = (written - Utc::now()).abs();
        assert!(skew < TimeDelta::minutes(1), "created_at off by {skew}");
    }
    // And this process reads each back as the instant it was.
    let stats = db.store().stats().await.expect("stats");
    assert_eq!(stats.waiting, 3, "{stats:?}");
}
