//! The batch claim reads the rows it claims and no backlog: ANALYZE
//! FORMAT=JSON of the real locking SELECT beside each [`Backlog`] shape.

use diesel::{
    QueryableByName,
    mysql::Mysql,
    sql_types::{BigInt, Datetime, Nullable, Text},
};
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
use outbox_testkit::{TestBackend, backlog::Backlog, mysql::MysqlTestDb};
use serde_json::Value;

use super::LOCK_DUE_SQL;

/// Backlog rows, before the due rows in id order.
const BACKLOG: u64 = 50_000;
/// Due rows.
const DUE: u64 = 200;
/// The batch size claimed.
const LIMIT: i64 = 100;
/// Rows the scan may read beyond `LIMIT` (none are expected: the claim reads
/// the available range only, and nothing here is locked or not due).
const MARGIN: f64 = 10.0;

#[derive(QueryableByName)]
struct Analyzed {
    #[diesel(column_name = "ANALYZE", sql_type = Text)]
    json: String,
}

/// Fills `backlog`, then the due rows, and runs one claim's SELECT of
/// `LIMIT` under ANALYZE in a READ COMMITTED transaction that is rolled
/// back; returns the statement's execution as JSON.
async fn analyze_claim(backlog: Backlog) -> anyhow::Result<(MysqlTestDb, Value)> {
    let db = MysqlTestDb::create(&format!("claim_plan_{backlog:?}")).await?;
    db.execute_sql(&backlog.mysql(BACKLOG)).await?;
    db.execute_sql(&format!(
        "INSERT INTO outbox_tasks (kind, version, payload, headers, next_attempt_at, \
             last_error, created_at, updated_at) \
         SELECT 'due', 1, '{{}}', '{{}}', UTC_TIMESTAMP(6), '', UTC_TIMESTAMP(6), \
             UTC_TIMESTAMP(6) FROM outbox_tasks LIMIT {DUE}; \
         ANALYZE TABLE outbox_tasks"
    ))
    .await?;
    let rows = db.count_tasks().await?;
    anyhow::ensure!(
        u64::try_from(rows)? >= BACKLOG + DUE,
        "{backlog:?} filled {rows} rows"
    );
    let mut conn = db.connect().await?;
    conn.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await?;
    conn.begin_test_transaction().await?;
    let analyzed: Analyzed = diesel::sql_query(format!("ANALYZE FORMAT=JSON {LOCK_DUE_SQL}"))
        .into_boxed::<Mysql>()
        .bind::<BigInt, _>(0)
        .bind::<Nullable<Datetime>, _>(None::<chrono::NaiveDateTime>)
        .bind::<BigInt, _>(LIMIT)
        .get_result(&mut conn)
        .await?;
    drop(conn); // never committed: the locks go with the connection
    Ok((db, serde_json::from_str(&analyzed.json)?))
}

/// Every table access in `value`, wherever the plan nests it.
fn tables(value: &Value) -> Vec<&Value> {
    match value {
        Value::Object(fields) => fields
            .iter()
            .flat_map(|(name, field)| {
                if name == "table" {
                    vec![field]
                } else {
                    tables(field)
                }
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(tables).collect(),
        _ => Vec::new(),
    }
}

async fn reads_only_claimed_rows(backlog: Backlog) -> anyhow::Result<()> {
    let (db, analyzed) = analyze_claim(backlog).await?;
    let shape = backlog.describe(BACKLOG);
    let plan = serde_json::to_string_pretty(&analyzed)?;
    let tables = tables(&analyzed);
    assert_eq!(tables.len(), 1, "beside {shape}, one table access:\n{plan}");
    let scan = tables[0];
    let read = scan["r_rows"].as_f64().unwrap_or(f64::INFINITY)
        * scan["r_loops"].as_f64().unwrap_or(f64::INFINITY);
    assert!(
        read <= LIMIT as f64 + MARGIN,
        "beside {shape}, the claim read {read} rows of outbox_tasks for a claim of {LIMIT}:\n{plan}"
    );
    assert_eq!(
        scan["key"], "outbox_tasks_claim_idx",
        "beside {shape}, the claim does not walk outbox_tasks_claim_idx:\n{plan}"
    );
    let matched = read * scan["r_filtered"].as_f64().unwrap_or(0.0) / 100.0;
    assert!(
        matched >= LIMIT as f64 - 0.5,
        "beside {shape}, the claim found fewer than {LIMIT} due rows:\n{plan}"
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
