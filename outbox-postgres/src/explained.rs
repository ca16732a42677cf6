//! Reading `EXPLAIN (ANALYZE, FORMAT JSON)` output in the plan tests.

use serde_json::Value;

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

/// Whether `node` scans `outbox_tasks` or one of its indexes.
pub(crate) fn scans_tasks(node: &Value) -> bool {
    let is_scan = node["Node Type"]
        .as_str()
        .is_some_and(|kind| kind.contains("Scan"));
    let on_tasks = node["Relation Name"] == "outbox_tasks"
        || node["Index Name"]
            .as_str()
            .is_some_and(|index| index.starts_with("outbox_tasks"));
    is_scan && on_tasks
}
