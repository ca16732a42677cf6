//! The batch claim's plan reads the rows it claims and no backlog: EXPLAIN
//! ANALYZE of the real statement beside each [`Backlog`] shape.

use chrono::{DateTime, Utc};
use diesel::{
    QueryableByName,
    sql_types::{BigInt, Json, Nullable, Text, Timestamptz},
};
use diesel_async::{AsyncConnection, RunQueryDsl};
use diesel_outbox_core::transition::EXPIRED_ERROR;
use diesel_outbox_testkit::{TestBackend, backlog::Backlog, postgres::PgTestDb};
use serde_json::Value;

use super::CLAIM_DUE_SQL;
use crate::explained::{nodes, rows_read, scans_tasks};

/// Backlog rows: well above the size (about 15,000 rows here) below which
/// PostgreSQL may find a full scan cheaper than 100 index lookups anyway.
const BACKLOG: u64 = 50_000;
/// Due rows, after the backlog in id order.
const DUE: u64 = 200;
/// The batch size claimed.
const LIMIT: i64 = 100;
/// Rows a scan may read beyond `LIMIT` (none are expected: a claim reads
/// available rows only, and nothing here is locked or not due).
const MARGIN: f64 = 10.0;

#[derive(QueryableByName)]
struct Explained {
    #[diesel(column_name = "QUERY PLAN", sql_type = Json)]
    plan: Value,
}

/// Fills `backlog`, then the due rows, and explains one claim of `LIMIT`
/// (rolled back); returns the plan's root node.
async fn explain_claim(backlog: Backlog) -> anyhow::Result<(PgTestDb, Value)> {
    let db = PgTestDb::create(&format!("claim_plan_{backlog:?}")).await?;
    db.execute_sql(&backlog.postgres(BACKLOG)).await?;
    db.execute_sql(&format!(
        "INSERT INTO outbox_tasks (kind, version, payload) \
         SELECT 'due', 1, '\\x7b7d' FROM generate_series(1, {DUE}); \
         ANALYZE outbox_tasks"
    ))
    .await?;
    let rows = db.count_tasks().await?;
    anyhow::ensure!(
        u64::try_from(rows)? >= BACKLOG + DUE,
        "{backlog:?} filled {rows} rows"
    );
    let mut conn = db.connect().await?;
    conn.begin_test_transaction().await?;
    let explained: Explained =
        diesel::sql_query(format!("EXPLAIN (ANALYZE, FORMAT JSON) {CLAIM_DUE_SQL}"))
            .bind::<BigInt, _>(0)
            .bind::<BigInt, _>(LIMIT)
            .bind::<Text, _>("plan-test")
            .bind::<BigInt, _>(60_000_000)
            .bind::<Text, _>(EXPIRED_ERROR)
            .bind::<Nullable<Timestamptz>, _>(None::<DateTime<Utc>>)
            .get_result(&mut conn)
            .await?;
    drop(conn); // never committed: the claim is rolled back
    let root = explained.plan[0]["Plan"].clone();
    Ok((db, root))
}

async fn reads_only_claimed_rows(backlog: Backlog) -> anyhow::Result<()> {
    let (db, root) = explain_claim(backlog).await?;
    let shape = backlog.describe(BACKLOG);
    let plan = serde_json::to_string_pretty(&root)?;
    assert_eq!(
        root["Actual Rows"].as_f64(),
        Some(LIMIT as f64),
        "beside {shape}, the claim took other than {LIMIT} rows:\n{plan}"
    );
    let scans: Vec<&Value> = nodes(&root)
        .into_iter()
        .filter(|n| scans_tasks(n))
        .collect();
    for scan in &scans {
        let read = rows_read(scan);
        assert!(
            read <= LIMIT as f64 + MARGIN,
            "beside {shape}, a {} read {read} rows of outbox_tasks for a claim of {LIMIT}:\n{plan}",
            scan["Node Type"]
        );
    }
    assert!(
        scans
            .iter()
            .any(|scan| scan["Index Name"] == "outbox_tasks_available_idx"),
        "beside {shape}, the claim does not walk outbox_tasks_available_idx:\n{plan}"
    );
    drop(db);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_waiting_rows_not_yet_due() -> anyhow::Result<()> {
    reads_only_claimed_rows(Backlog::NotDue).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_waiting_rows_in_backoff() -> anyhow::Result<()> {
    reads_only_claimed_rows(Backlog::Backoff).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_a_failed_head_and_its_blocked_successors() -> anyhow::Result<()> {
    reads_only_claimed_rows(Backlog::FailedHead).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_succeeded_rows_of_one_key() -> anyhow::Result<()> {
    reads_only_claimed_rows(Backlog::SucceededKey).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_finished_rows() -> anyhow::Result<()> {
    reads_only_claimed_rows(Backlog::Finished).await
}
