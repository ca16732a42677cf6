//! The plan tests: `EXPLAIN (ANALYZE, FORMAT JSON)` of the store's
//! statements on real backlogs, and reading its output.

mod claim;
mod complete;
mod inbox;

use diesel::{QueryableByName, sql_types::Json};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_testkit::{TestBackend, TestNames, postgres::PgTestDbNamed};
use serde_json::Value;

/// The one row `EXPLAIN (FORMAT JSON)` returns.
#[derive(QueryableByName)]
pub(crate) struct Explained {
    #[diesel(column_name = "QUERY PLAN", sql_type = Json)]
    pub(crate) plan: Value,
}

impl Explained {
    /// The plan's root node.
    pub(crate) fn root(&self) -> &Value {
        &self.plan[0]["Plan"]
    }
}

/// Runs `prepare` (a `PREPARE plan_test ... AS` of a store's statement),
/// then explains and executes `execute` (an `EXECUTE plan_test(...)`) under
/// `plan_cache_mode = mode`, in a transaction never committed; returns the
/// plan's root node.
pub(crate) async fn explain_prepared<N: TestNames>(
    db: &PgTestDbNamed<N>,
    prepare: &str,
    mode: &str,
    execute: &str,
) -> anyhow::Result<Value> {
    let mut conn = db.connect().await?;
    conn.begin_test_transaction().await?;
    for sql in [prepare, &format!("SET LOCAL plan_cache_mode = {mode}")] {
        diesel::sql_query(N::names().render(sql))
            .execute(&mut conn)
            .await?;
    }
    let explained: Explained =
        diesel::sql_query(format!("EXPLAIN (ANALYZE, FORMAT JSON) {execute}"))
            .get_result(&mut conn)
            .await?;
    roll_back(conn).await?;
    Ok(explained.root().clone())
}

/// Rolls back the test transaction on `conn` and waits for it, so its locks
/// are gone before the next statement explained (a dropped connection's
/// rollback may come after that statement already ran).
pub(crate) async fn roll_back(mut conn: AsyncPgConnection) -> anyhow::Result<()> {
    conn.batch_execute("ROLLBACK").await?;
    Ok(())
}

/// Every node of `node`'s tree, depth first.
pub(crate) fn nodes(node: &Value) -> Vec<&Value> {
    let mut all = vec![node];
    if let Some(children) = node["Plans"].as_array() {
        all.extend(children.iter().flat_map(nodes));
    }
    all
}

/// Rows a scan node read over all its loops: the rows it returned and the
/// rows its filters removed.
pub(crate) fn rows_read(node: &Value) -> f64 {
    let per_loop = [
        "Actual Rows",
        "Rows Removed by Filter",
        "Rows Removed by Index Recheck",
    ]
    .iter()
    .filter_map(|field| node[field].as_f64())
    .sum::<f64>();
    per_loop * node["Actual Loops"].as_f64().unwrap_or(1.0)
}

/// The nodes of `root`'s tree that scan `table` (its default name) or one
/// of its indexes (named after it), depth first, under the names `N`.
pub(crate) fn scans_of<'a, N: TestNames>(root: &'a Value, table: &str) -> Vec<&'a Value> {
    let table = N::names().table(table);
    nodes(root)
        .into_iter()
        .filter(|node| scans(node, &table))
        .collect()
}

/// Whether `node` scans `table` or one of its indexes (named after it).
fn scans(node: &Value, table: &str) -> bool {
    let is_scan = node["Node Type"]
        .as_str()
        .is_some_and(|kind| kind.contains("Scan"));
    let on_table = node["Relation Name"] == table
        || node["Index Name"]
            .as_str()
            .is_some_and(|index| index.starts_with(table));
    is_scan && on_table
}
