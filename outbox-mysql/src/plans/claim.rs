//! The batch claim reads the rows it claims and no backlog: ANALYZE
//! FORMAT=JSON of the real locking SELECT beside each [`Backlog`] shape.
//!
//! The optimizer's choice depends on how many rows are due, not only on the
//! backlog: with `ORDER BY id LIMIT`, MariaDB 10.11 reconsiders the primary
//! key, which yields id order too, and estimates its cost as if the due rows
//! were spread evenly through the table; they come after the backlog. So
//! each shape is checked with a few due counts.

use diesel::{
    QueryableByName,
    mysql::Mysql,
    sql_types::{BigInt, Datetime, Nullable, Text},
};
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_testkit::{TestBackend, TestNames, backlog::Backlog, mysql::MysqlTestDbNamed};
use serde_json::Value;

use crate::statements::LOCK_DUE;

/// Backlog rows, before the due rows in id order.
const BACKLOG: u64 = 50_000;
/// Due rows after the backlog, for the test of each shape.
const DUE: u64 = 200;
/// Larger due counts, each checked in turn.
const MORE_DUE: [u64; 2] = [1_000, 5_000];
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

/// Adds `rows` due tasks after every existing row and refreshes statistics.
async fn add_due<N: TestNames>(db: &MysqlTestDbNamed<N>, rows: u64) -> anyhow::Result<()> {
    db.execute_sql(&format!(
        "INSERT INTO outbox_tasks (kind, version, payload, headers, next_attempt_at, \
             last_error, created_at, updated_at) \
         SELECT 'due', 1, '{{}}', '{{}}', UTC_TIMESTAMP(6), '', UTC_TIMESTAMP(6), \
             UTC_TIMESTAMP(6) FROM outbox_tasks LIMIT {rows}; \
         ANALYZE TABLE outbox_tasks"
    ))
    .await
}

/// Runs one claim's SELECT of `LIMIT` under ANALYZE in a READ COMMITTED
/// transaction that is rolled back; returns its execution as JSON.
async fn analyze_claim<N: TestNames>(db: &MysqlTestDbNamed<N>) -> anyhow::Result<Value> {
    let mut conn = db.connect().await?;
    conn.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await?;
    conn.begin_test_transaction().await?;
    let analyzed: Analyzed =
        diesel::sql_query(N::names().render(&format!("ANALYZE FORMAT=JSON {LOCK_DUE}")))
            .into_boxed::<Mysql>()
            .bind::<BigInt, _>(0)
            .bind::<Nullable<Datetime>, _>(None::<chrono::NaiveDateTime>)
            .bind::<BigInt, _>(LIMIT)
            .get_result(&mut conn)
            .await?;
    drop(conn); // never committed: the locks go with the connection
    Ok(serde_json::from_str(&analyzed.json)?)
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

/// Asserts that the analyzed claim read about `LIMIT` rows, all through
/// `outbox_tasks_claim_idx`.
fn assert_reads_only_claimed_rows<N: TestNames>(
    analyzed: &Value,
    beside: &str,
) -> anyhow::Result<()> {
    let plan = serde_json::to_string_pretty(analyzed)?;
    let tables = tables(analyzed);
    assert_eq!(
        tables.len(),
        1,
        "beside {beside}, one table access:\n{plan}"
    );
    let scan = tables[0];
    let read = scan["r_rows"].as_f64().unwrap_or(f64::INFINITY)
        * scan["r_loops"].as_f64().unwrap_or(f64::INFINITY);
    assert!(
        read <= LIMIT as f64 + MARGIN,
        "beside {beside}, the claim read {read} rows of outbox_tasks for a claim of {LIMIT}:\n{plan}"
    );
    let index = N::names().table("outbox_tasks_claim_idx");
    assert_eq!(
        scan["key"], *index,
        "beside {beside}, the claim does not walk {index}:\n{plan}"
    );
    let matched = read * scan["r_filtered"].as_f64().unwrap_or(0.0) / 100.0;
    assert!(
        matched >= LIMIT as f64 - 0.5,
        "beside {beside}, the claim found fewer than {LIMIT} due rows:\n{plan}"
    );
    Ok(())
}

/// Fills `backlog`, then for each count of `due_counts` tops the due rows
/// up to it and checks one claim.
async fn reads_only_claimed_rows<N: TestNames>(
    backlog: Backlog,
    due_counts: &[u64],
) -> anyhow::Result<()> {
    let db = MysqlTestDbNamed::<N>::create(&format!("claim_plan_{backlog:?}")).await?;
    db.execute_sql(&backlog.mysql(BACKLOG)).await?;
    let filled = u64::try_from(db.count_tasks().await?)?;
    anyhow::ensure!(filled >= BACKLOG, "{backlog:?} filled {filled} rows");
    let mut due = 0;
    for &total in due_counts {
        add_due(&db, total - due).await?;
        due = total;
        let beside = format!("{} and {due} due rows", backlog.describe(BACKLOG));
        assert_reads_only_claimed_rows::<N>(&analyze_claim(&db).await?, &beside)?;
    }
    drop(db);
    Ok(())
}

async fn beside_waiting_rows_not_yet_due<N: TestNames>() -> anyhow::Result<()> {
    reads_only_claimed_rows::<N>(Backlog::NotDue, &[DUE]).await
}

async fn beside_waiting_rows_in_backoff<N: TestNames>() -> anyhow::Result<()> {
    reads_only_claimed_rows::<N>(Backlog::Backoff, &[DUE]).await
}

async fn beside_a_failed_head_and_its_blocked_successors<N: TestNames>() -> anyhow::Result<()> {
    reads_only_claimed_rows::<N>(Backlog::FailedHead, &[DUE]).await
}

async fn beside_succeeded_rows_of_one_key<N: TestNames>() -> anyhow::Result<()> {
    reads_only_claimed_rows::<N>(Backlog::SucceededKey, &[DUE]).await
}

async fn beside_finished_rows<N: TestNames>() -> anyhow::Result<()> {
    reads_only_claimed_rows::<N>(Backlog::Finished, &[DUE]).await
}

/// With 1,000 due rows beside 50,000 others, MariaDB 10.11 left to itself
/// reads the claim through the primary key, from the oldest row on (see the
/// module's notes); the claim names its index, so it reads only what it claims.
async fn beside_every_shape_with_more_due_rows<N: TestNames>() -> anyhow::Result<()> {
    for backlog in Backlog::ALL {
        reads_only_claimed_rows::<N>(backlog, &MORE_DUE).await?;
    }
    Ok(())
}

diesel_outbox_testkit::each_names!(
    beside_waiting_rows_not_yet_due,
    beside_waiting_rows_in_backoff,
    beside_a_failed_head_and_its_blocked_successors,
    beside_succeeded_rows_of_one_key,
    beside_finished_rows,
    beside_every_shape_with_more_due_rows,
);
