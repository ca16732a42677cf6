//! The query plan of every statement that reads `outbox_tasks` by status:
//! each reads only the index range of the status it acts on, so its cost
//! never grows with rows of other statuses (retained history above all).

use diesel::{
    Connection, QueryableByName, RunQueryDsl, SqliteConnection, connection::SimpleConnection,
    sql_types::Text,
};

use crate::{migration_sql, statements};

#[derive(QueryableByName)]
struct Step {
    #[diesel(sql_type = Text)]
    detail: String,
}

/// The plan of `sql` on a migrated in-memory database, one line per step.
fn plan(sql: &str) -> Vec<String> {
    let mut conn = SqliteConnection::establish(":memory:").expect("in-memory database");
    for migration in migration_sql() {
        conn.batch_execute(migration.up()).expect("migration");
    }
    diesel::sql_query(format!("EXPLAIN QUERY PLAN {sql}"))
        .load::<Step>(&mut conn)
        .expect("plan")
        .into_iter()
        .map(|step| step.detail)
        .collect()
}

#[track_caller]
fn assert_plan(sql: &str, expected: &[&str]) {
    let plan = plan(sql);
    for step in expected {
        assert!(
            plan.iter().any(|line| line.contains(step)),
            "no step `{step}` in the plan of\n{sql}\n{plan:#?}"
        );
    }
    assert!(
        plan.iter().all(|line| line.trim() != "SCAN outbox_tasks"),
        "a scan of the whole table outbox_tasks in the plan of\n{sql}\n{plan:#?}"
    );
}

#[test]
fn claims_read_the_available_range_in_id_order() {
    assert_plan(
        statements::CLAIM_DUE,
        &["outbox_tasks_claim_idx (status=? AND id>?)"],
    );
    // No sort: the index gives id order.
    assert!(
        !plan(statements::CLAIM_DUE)
            .iter()
            .any(|line| line.contains("TEMP B-TREE"))
    );
}

#[test]
fn moves_read_their_status_range() {
    assert_plan(
        statements::PROMOTE,
        &["outbox_tasks_due_idx (status=? AND next_attempt_at<?)"],
    );
    assert_plan(
        statements::RESCUE,
        &["outbox_tasks_lease_idx (status=? AND lease_expires_at<?)"],
    );
    assert_plan(statements::NEXT_DUE, &["outbox_tasks_due_idx (status=?)"]);
    assert_plan(
        &statements::unblock(2),
        &["outbox_tasks_ordering_idx (status=? AND ordering_key=?)"],
    );
}

#[test]
fn completions_find_their_rows_by_primary_key() {
    assert_plan(
        &statements::complete(3),
        &["SEARCH outbox_tasks USING INTEGER PRIMARY KEY (rowid=?)"],
    );
    // All succeeded: the running rows of the listed ids, one seek each.
    assert_plan(
        &statements::succeed(3),
        &["SEARCH outbox_tasks USING INDEX outbox_tasks_claim_idx (status=? AND id=?)"],
    );
}

#[test]
fn stats_and_purge_read_indexes_only() {
    // Counting reads the (status, id) index once, never the rows.
    assert_plan(
        statements::COUNTS,
        &["SCAN outbox_tasks USING COVERING INDEX outbox_tasks_claim_idx"],
    );
    assert_plan(
        statements::OLDEST_DUE,
        &["outbox_tasks_claim_idx (status=?)"],
    );
    assert_plan(
        statements::PURGE,
        &["outbox_tasks_finished_idx (finished_at>? AND finished_at<?)"],
    );
}
