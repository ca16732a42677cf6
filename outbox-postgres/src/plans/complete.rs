//! Completion writes reach each row through the primary key, also with the
//! stale statistics a queue table has during a drain: EXPLAIN ANALYZE of the
//! real statements, under custom and generic plans.

use diesel_outbox_testkit::{TestBackend, TestNames, postgres::PgTestDbNamed};
use serde_json::Value;

use super::{explain_prepared, nodes, rows_read, scans_of};
use crate::statements::{COMPLETE, COMPLETE_COUNTED, SUCCEED, SUCCEED_COUNTED};

/// The completion writes, by name: with `RETURNING`, and without it (when
/// only how many applied is wanted).
const WRITES: [(&str, &str); 4] = [
    ("SUCCEED", SUCCEED),
    ("SUCCEED_COUNTED", SUCCEED_COUNTED),
    ("COMPLETE", COMPLETE),
    ("COMPLETE_COUNTED", COMPLETE_COUNTED),
];

/// Tasks claimed, then half of them finished: the finished half leaves dead
/// entries in the index of running tasks until vacuum.
const CLAIMED: i64 = 20_000;
/// The batch written.
const BATCH: i64 = 100;
/// A table small enough for a full scan to look cheap to the planner, and
/// a relay's batch of 256 written on it.
const SMALL: (i64, i64) = (4_000, 256);
/// Rows a scan may read beyond the batch.
const MARGIN: f64 = 10.0;
const OWNER: &str = "plan-test";

/// A database in the middle of a drain: statistics taken while every task
/// was available (and never again: autovacuum is off for the table), then
/// every task claimed by `OWNER` and the lower half finished.
async fn mid_drain<N: TestNames>(claimed: i64) -> anyhow::Result<PgTestDbNamed<N>> {
    let db = PgTestDbNamed::<N>::create("complete_plan").await?;
    db.execute_sql(&format!(
        "ALTER TABLE outbox_tasks SET (autovacuum_enabled = false); \
         INSERT INTO outbox_tasks (kind, version, payload) \
         SELECT 'drained', 1, '\\x7b7d' FROM generate_series(1, {claimed}); \
         ANALYZE outbox_tasks; \
         UPDATE outbox_tasks SET status = 'running', lease_owner = '{OWNER}', attempts = 1, \
             lease_expires_at = now() + interval '1 hour'; \
         UPDATE outbox_tasks SET status = 'succeeded', lease_owner = NULL, \
             lease_expires_at = NULL, finished_at = now() \
          WHERE id <= {half}",
        half = claimed / 2
    ))
    .await?;
    Ok(db)
}

/// Explains (and rolls back) statement `name` for the batch of running
/// tasks right after the finished half, prepared as the store prepares it
/// and executed under `mode` (`plan_cache_mode`: a custom plan for these
/// values, or the generic plan a cached statement may switch to); checks
/// that it applied to the whole batch and that every scan of `outbox_tasks`
/// went through the primary key and read no more than the batch.
async fn writes_by_primary_key<N: TestNames>(
    db: &PgTestDbNamed<N>,
    (name, statement): (&str, &str),
    mode: &str,
    (claimed, batch): (i64, i64),
) -> anyhow::Result<()> {
    let first = claimed / 2 + 1;
    let ids: Vec<String> = (first..first + batch).map(|id| id.to_string()).collect();
    let array = |values: &[String]| format!("'{{{}}}'", values.join(","));
    let repeat = |value: &str| array(&vec![value.to_owned(); ids.len()]);
    let (prepare, execute) = if name.starts_with("SUCCEED") {
        (
            format!("PREPARE plan_test(int8[], int8[], text) AS {statement}"),
            format!(
                "EXECUTE plan_test({}, {}, '{OWNER}')",
                array(&ids),
                repeat("1")
            ),
        )
    } else {
        (
            format!(
                "PREPARE plan_test(int8[], text[], int8[], text[], int8[], text[], bool[]) \
                 AS {statement}"
            ),
            format!(
                "EXECUTE plan_test({}, {}, {}, {}, {}, {}, {})",
                array(&ids),
                repeat(OWNER),
                repeat("1"),
                repeat("succeeded"),
                repeat("0"),
                repeat("\"\""),
                repeat("false")
            ),
        )
    };
    let root = &explain_prepared(db, &prepare, mode, &execute).await?;
    let plan = serde_json::to_string_pretty(root)?;
    // Without `RETURNING` the update itself returns no row: the rows it
    // applied to are those of the join below it.
    let applied = match name.ends_with("COUNTED") {
        true => root["Plans"]
            .as_array()
            .and_then(|plans| plans.iter().find(|p| p["Parent Relationship"] == "Outer"))
            .unwrap_or(&Value::Null),
        false => root,
    };
    assert_eq!(
        applied["Actual Rows"].as_f64(),
        Some(batch as f64),
        "{name} ({mode}) applied to other than {batch} rows:\n{plan}"
    );
    let scans = scans_of::<N>(root, "outbox_tasks");
    let pkey = N::names().table("outbox_tasks_pkey");
    anyhow::ensure!(!scans.is_empty(), "{name} ({mode}) scans nothing:\n{plan}");
    // The batch is read once: a plan that reads it again for every row it
    // updates costs the square of the batch.
    for batch_scan in nodes(root)
        .into_iter()
        .filter(|node| node["Node Type"] == "Function Scan")
    {
        assert_eq!(
            batch_scan["Actual Loops"].as_f64(),
            Some(1.0),
            "{name} ({mode}) reads the batch more than once:\n{plan}"
        );
    }
    for scan in scans {
        // A bitmap heap scan fetches the rows its bitmap index scan (a
        // node of its own, checked here too) found; that index scan counts
        // the entries it found, dead ones included, so the heap scan is
        // what bounds the rows read.
        if scan["Node Type"] != "Bitmap Heap Scan" {
            assert_eq!(
                scan["Index Name"], *pkey,
                "{name} ({mode}) reaches rows other than by primary key:\n{plan}"
            );
        }
        if scan["Node Type"] == "Bitmap Index Scan" {
            continue;
        }
        let read = rows_read(scan);
        assert!(
            read <= batch as f64 + MARGIN,
            "{name} ({mode}) read {read} rows of outbox_tasks for a batch of {batch}:\n{plan}"
        );
    }
    Ok(())
}

async fn completion_writes_go_by_primary_key_mid_drain<N: TestNames>() -> anyhow::Result<()> {
    let db = mid_drain::<N>(CLAIMED).await?;
    for write in WRITES {
        for mode in ["force_custom_plan", "force_generic_plan"] {
            writes_by_primary_key(&db, write, mode, (CLAIMED, BATCH)).await?;
        }
    }
    Ok(())
}

/// On a small table, where a full scan looks cheap to the planner, a batch
/// of 256 still reaches its rows through the primary key: sized from the
/// values bound, the custom plans scanned the whole table (COMPLETE) or
/// read the batch again for every running row (SUCCEED).
async fn completion_writes_go_by_primary_key_on_a_small_table<N: TestNames>() -> anyhow::Result<()>
{
    let db = mid_drain::<N>(SMALL.0).await?;
    for write in WRITES {
        for mode in ["force_custom_plan", "force_generic_plan"] {
            writes_by_primary_key(&db, write, mode, SMALL).await?;
        }
    }
    Ok(())
}

diesel_outbox_testkit::each_names!(
    names = diesel_outbox_testkit::SchemaTenantNames;
    completion_writes_go_by_primary_key_mid_drain,
    completion_writes_go_by_primary_key_on_a_small_table,
);
