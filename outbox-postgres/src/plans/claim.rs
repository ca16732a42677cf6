//! The batch claim's plan reads the rows it claims and no backlog: EXPLAIN
//! ANALYZE of the real statement beside each [`Backlog`] shape.

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz};
use diesel_async::{AsyncConnection, RunQueryDsl};
use diesel_outbox_core::transition::EXPIRED_ERROR;
use diesel_outbox_testkit::{TestBackend, TestNames, backlog::Backlog, postgres::PgTestDbNamed};
use serde_json::Value;

use super::{Explained, explain_prepared, rows_read, scans_of};
use crate::statements::CLAIM_DUE;

/// Backlog rows: well above the size (about 15,000 rows here) below which
/// PostgreSQL found a full scan cheaper than 100 index lookups while the
/// claim joined its ids as a row set (see `on_a_small_table`).
const BACKLOG: u64 = 50_000;
/// Available rows added after the statistics were taken.
const STALE_BACKLOG: u64 = 200_000;
/// Due rows, after the backlog in id order.
const DUE: u64 = 200;
/// The batch size claimed.
const LIMIT: i64 = 100;
/// Rows a scan may read beyond `LIMIT` (none are expected: a claim reads
/// available rows only, and nothing here is locked or not due).
const MARGIN: f64 = 10.0;

/// Fills `backlog`, then the due rows, and explains one claim of `LIMIT`
/// (rolled back); returns the plan's root node.
async fn explain_claim<N: TestNames>(
    backlog: Backlog,
) -> anyhow::Result<(PgTestDbNamed<N>, Value)> {
    let db = PgTestDbNamed::<N>::create(&format!("claim_plan_{backlog:?}")).await?;
    db.execute_sql(&backlog.postgres(BACKLOG)).await?;
    let root = explain_due(&db, DUE, LIMIT).await?;
    let rows = db.count_tasks().await?;
    anyhow::ensure!(
        u64::try_from(rows)? >= BACKLOG + DUE,
        "{backlog:?} filled {rows} rows"
    );
    Ok((db, root))
}

/// Adds `due` available rows to `db`, analyzes the table, and explains one
/// claim of `limit` (rolled back); returns the plan's root node.
async fn explain_due<N: TestNames>(
    db: &PgTestDbNamed<N>,
    due: u64,
    limit: i64,
) -> anyhow::Result<Value> {
    add_due(db, due).await?;
    db.execute_sql("ANALYZE outbox_tasks").await?;
    explain_now(db, limit).await
}

/// Adds `due` available rows to `db`.
async fn add_due<N: TestNames>(db: &PgTestDbNamed<N>, due: u64) -> anyhow::Result<()> {
    db.execute_sql(&format!(
        "INSERT INTO outbox_tasks (kind, version, payload) \
         SELECT 'due', 1, '\\x7b7d' FROM generate_series(1, {due})"
    ))
    .await
}

/// Explains one claim of `limit` on `db` as it is (rolled back); returns
/// the plan's root node.
async fn explain_now<N: TestNames>(db: &PgTestDbNamed<N>, limit: i64) -> anyhow::Result<Value> {
    let claims = explain_claims(db, limit, 1).await?;
    claims
        .last()
        .map(|explained| explained.root().clone())
        .ok_or_else(|| anyhow::anyhow!("no claim explained"))
}

/// Explains `times` claims of `limit` from the lowest id on `db` as it is,
/// one after the other on one connection (the first planning also loads
/// the catalogue's entries for the table), in a transaction rolled back;
/// with the buffers each used, planning included.
async fn explain_claims<N: TestNames>(
    db: &PgTestDbNamed<N>,
    limit: i64,
    times: usize,
) -> anyhow::Result<Vec<Explained>> {
    let mut conn = db.connect().await?;
    conn.begin_test_transaction().await?;
    let mut claims = Vec::with_capacity(times);
    for _ in 0..times {
        claims.push(
            diesel::sql_query(N::names().render(&format!(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {CLAIM_DUE}"
            )))
            .bind::<BigInt, _>(0)
            .bind::<BigInt, _>(limit)
            .bind::<Text, _>("plan-test")
            .bind::<BigInt, _>(60_000_000)
            .bind::<Text, _>(EXPIRED_ERROR)
            .bind::<Nullable<Timestamptz>, _>(None::<DateTime<Utc>>)
            .get_result(&mut conn)
            .await?,
        );
    }
    // Never committed, and rolled back before the next claim looks: a
    // dropped connection's rollback may come after it, locks still held.
    super::roll_back(conn).await?;
    Ok(claims)
}

/// Checks that a claim's plan took `limit` rows and read no more than that
/// (plus [`MARGIN`]) of `outbox_tasks`, walking the index of available
/// tasks. A bitmap index scan counts the index entries it found, dead ones
/// included, so the heap scan above it is what bounds the rows read.
fn reads_only_what_it_claims<N: TestNames>(
    root: &Value,
    limit: i64,
    shape: &str,
) -> anyhow::Result<()> {
    let plan = serde_json::to_string_pretty(root)?;
    assert_eq!(
        root["Actual Rows"].as_f64(),
        Some(limit as f64),
        "beside {shape}, the claim took other than {limit} rows:\n{plan}"
    );
    let scans = scans_of::<N>(root, "outbox_tasks");
    let index = N::names().table("outbox_tasks_available_idx");
    for scan in scans
        .iter()
        .filter(|scan| scan["Node Type"] != "Bitmap Index Scan")
    {
        let read = rows_read(scan);
        assert!(
            read <= limit as f64 + MARGIN,
            "beside {shape}, a {} read {read} rows of outbox_tasks for a claim of {limit}:\n{plan}",
            scan["Node Type"]
        );
    }
    assert!(
        scans.iter().any(|scan| scan["Index Name"] == index),
        "beside {shape}, the claim does not walk {index}:\n{plan}"
    );
    Ok(())
}

async fn reads_only_claimed_rows<N: TestNames>(backlog: Backlog) -> anyhow::Result<()> {
    let (db, root) = explain_claim::<N>(backlog).await?;
    reads_only_what_it_claims::<N>(&root, LIMIT, &backlog.describe(BACKLOG))?;
    drop(db);
    Ok(())
}

/// On a table small enough for a full scan to look cheap to the planner
/// (a few thousand rows, a claim of 256), the claim still reads only the
/// rows it takes, under a custom plan and under the generic plan a cached
/// statement may switch to: joined as a row set, the claimed ids were
/// hashed against a scan of the whole table.
async fn on_a_small_table<N: TestNames>() -> anyhow::Result<()> {
    let db = PgTestDbNamed::<N>::create("claim_plan_small").await?;
    // Finished rows first, as a queue table holds them: with only
    // available rows, the primary key and the index of available rows
    // cost the planner the same, and which it takes is a tie.
    db.execute_sql(
        "INSERT INTO outbox_tasks (kind, version, payload, status, finished_at) \
         SELECT 'done', 1, '\\x7b7d', 'succeeded', now() FROM generate_series(1, 2000)",
    )
    .await?;
    let root = explain_due(&db, 4_000, 256).await?;
    reads_only_what_it_claims::<N>(&root, 256, "2,000 finished rows and 4,000 due rows")?;
    let generic = explain_prepared(
        &db,
        &format!("PREPARE plan_test(int8, int8, text, int8, text, timestamptz) AS {CLAIM_DUE}"),
        "force_generic_plan",
        "EXECUTE plan_test(0, 256, 'plan-test', 60000000, 'expired', NULL)",
    )
    .await?;
    reads_only_what_it_claims::<N>(
        &generic,
        256,
        "2,000 finished rows and 4,000 due rows, generic plan",
    )?;
    drop(db);
    Ok(())
}

/// Beside a backlog the planner's statistics never saw (taken while the
/// table was empty, as right after it was created or emptied), the claim
/// still walks the index of available rows in order, under a custom plan
/// and under the generic one: with the batch size visible to the planner,
/// a custom plan gathered every available row and sorted them.
async fn beside_a_backlog_the_statistics_never_saw<N: TestNames>() -> anyhow::Result<()> {
    let db = PgTestDbNamed::<N>::create("claim_plan_stale").await?;
    db.execute_sql("ANALYZE outbox_tasks").await?;
    add_due(&db, STALE_BACKLOG).await?;
    let shape = format!("{STALE_BACKLOG} available rows after statistics of an empty table");
    let custom = explain_now(&db, LIMIT).await?;
    reads_only_what_it_claims::<N>(&custom, LIMIT, &shape)?;
    let generic = explain_prepared(
        &db,
        &format!("PREPARE plan_test(int8, int8, text, int8, text, timestamptz) AS {CLAIM_DUE}"),
        "force_generic_plan",
        "EXECUTE plan_test(0, 100, 'plan-test', 60000000, 'expired', NULL)",
    )
    .await?;
    reads_only_what_it_claims::<N>(&generic, LIMIT, &format!("{shape}, generic plan"))?;
    drop(db);
    Ok(())
}

/// Rows purged from the low end of the table, before vacuum removed them.
const PURGED: u64 = 100_000;
/// Buffers the planning of a claim may touch once the connection has
/// planned one: 4 measured. With the claim's lower bound in view, planning
/// walked the primary key past every entry the purge left: about 140
/// buffers here, and as many again for every claim planned after it.
const PLANNING_BUFFERS: f64 = 20.0;

/// After retention purged the oldest rows, and before vacuum removed them,
/// planning a claim from the lowest id stays cheap: with its lower bound in
/// view, the planner saw it below the statistics' lowest id and looked up
/// the table's real lowest id in the primary key, walking every entry the
/// purge left and visiting each row. Under sustained load (a claim from
/// the lowest id follows every short claim), that planning took a third of
/// the server's CPU and the relays fell behind.
async fn planning_after_a_purge_of_the_oldest_rows<N: TestNames>() -> anyhow::Result<()> {
    let db = PgTestDbNamed::<N>::create("claim_plan_purged").await?;
    // Vacuum would remove what the purge left, and it is what this test
    // is about; off for this table whatever the server's setting.
    db.execute_sql("ALTER TABLE outbox_tasks SET (autovacuum_enabled = false)")
        .await?;
    db.execute_sql(&Backlog::Finished.postgres(PURGED)).await?;
    add_due(&db, DUE).await?;
    db.execute_sql("ANALYZE outbox_tasks").await?;
    db.execute_sql("DELETE FROM outbox_tasks WHERE status = 'succeeded'")
        .await?;
    // The second claim on the connection: the first planning also loads
    // the catalogue's entries for the table and its indexes.
    let claims = explain_claims(&db, LIMIT, 2).await?;
    let explained = claims
        .last()
        .ok_or_else(|| anyhow::anyhow!("no claim explained"))?;
    let plan = serde_json::to_string_pretty(&explained.plan)?;
    let planning = &explained.plan[0]["Planning"];
    let buffers = ["Shared Hit Blocks", "Shared Read Blocks"]
        .iter()
        .filter_map(|field| planning[field].as_f64())
        .sum::<f64>();
    assert!(
        buffers <= PLANNING_BUFFERS,
        "planning a claim after {PURGED} rows were purged touched {buffers} buffers:\n{plan}"
    );
    reads_only_what_it_claims::<N>(
        explained.root(),
        LIMIT,
        &format!("{PURGED} purged rows not yet vacuumed"),
    )?;
    drop(db);
    Ok(())
}

async fn beside_waiting_rows_not_yet_due<N: TestNames>() -> anyhow::Result<()> {
    reads_only_claimed_rows::<N>(Backlog::NotDue).await
}

async fn beside_waiting_rows_in_backoff<N: TestNames>() -> anyhow::Result<()> {
    reads_only_claimed_rows::<N>(Backlog::Backoff).await
}

async fn beside_a_failed_head_and_its_blocked_successors<N: TestNames>() -> anyhow::Result<()> {
    reads_only_claimed_rows::<N>(Backlog::FailedHead).await
}

async fn beside_succeeded_rows_of_one_key<N: TestNames>() -> anyhow::Result<()> {
    reads_only_claimed_rows::<N>(Backlog::SucceededKey).await
}

async fn beside_finished_rows<N: TestNames>() -> anyhow::Result<()> {
    reads_only_claimed_rows::<N>(Backlog::Finished).await
}

diesel_outbox_testkit::each_names!(
    names = diesel_outbox_testkit::SchemaTenantNames;
    on_a_small_table,
    beside_a_backlog_the_statistics_never_saw,
    beside_waiting_rows_not_yet_due,
    beside_waiting_rows_in_backoff,
    beside_a_failed_head_and_its_blocked_successors,
    beside_succeeded_rows_of_one_key,
    beside_finished_rows,
    planning_after_a_purge_of_the_oldest_rows,
);
