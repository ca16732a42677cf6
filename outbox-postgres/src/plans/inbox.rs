//! The inbox purge reaches the rows it deletes by their address, on a
//! small table too: EXPLAIN ANALYZE of the real statement, under custom and
//! generic plans.

use diesel_outbox_testkit::{TestBackend, TestNames, postgres::PgTestDbNamed};

use super::{explain_prepared, rows_read, scans_of};
use crate::statements::PURGE_INBOX;

/// A table small enough for a full scan to look cheap to the planner.
const ROWS: i64 = 4_000;
/// The records one purge deletes.
const LIMIT: i64 = 256;
/// Rows a scan may read beyond the batch.
const MARGIN: f64 = 10.0;

/// Explains (and rolls back) a purge of [`LIMIT`] records older than a day
/// from [`ROWS`] records two days old, prepared as the store prepares it
/// and executed under `mode` (`plan_cache_mode`); checks that it deleted
/// the batch and that no scan of `outbox_inbox` read more than it.
async fn purges_by_address<N: TestNames>(db: &PgTestDbNamed<N>, mode: &str) -> anyhow::Result<()> {
    let day_in_micros = 86_400_000_000_i64;
    let root = &explain_prepared(
        db,
        &format!("PREPARE plan_test(int8, int8) AS {PURGE_INBOX}"),
        mode,
        &format!("EXECUTE plan_test({day_in_micros}, {LIMIT})"),
    )
    .await?;
    let plan = serde_json::to_string_pretty(root)?;
    let scans = scans_of::<N>(root, "outbox_inbox");
    let deleting = scans
        .iter()
        .find(|node| node["Node Type"] == "Tid Scan")
        .unwrap_or_else(|| {
            panic!("the purge ({mode}) reaches its rows other than by address:\n{plan}")
        });
    assert_eq!(
        deleting["Actual Rows"].as_f64(),
        Some(LIMIT as f64),
        "the purge ({mode}) deleted other than {LIMIT} records:\n{plan}"
    );
    for scan in scans {
        let read = rows_read(scan);
        assert!(
            read <= LIMIT as f64 + MARGIN,
            "the purge ({mode}) read {read} rows of outbox_inbox for a batch of {LIMIT}:\n{plan}"
        );
    }
    Ok(())
}

async fn the_purge_deletes_by_address_on_a_small_table<N: TestNames>() -> anyhow::Result<()> {
    let db = PgTestDbNamed::<N>::create("inbox_plan").await?;
    db.migrate_inbox().await?;
    db.execute_sql(&format!(
        "INSERT INTO outbox_inbox (consumer, message_id, applied_at) \
         SELECT 'plan-test', 'message-' || g, \
                now() - interval '2 days' + g * interval '1 millisecond' \
         FROM generate_series(1, {ROWS}) AS g; \
         ANALYZE outbox_inbox"
    ))
    .await?;
    for mode in ["force_custom_plan", "force_generic_plan"] {
        purges_by_address(&db, mode).await?;
    }
    Ok(())
}

diesel_outbox_testkit::each_names!(
    names = diesel_outbox_testkit::SchemaTenantNames;
    the_purge_deletes_by_address_on_a_small_table);
