//! The query plan of every statement that reads `outbox_tasks` by status:
//! each reads only the index range of the status it acts on, so its cost
//! never grows with rows of other statuses (retained history above all).

use diesel::{
    Connection, QueryableByName, RunQueryDsl, SqliteConnection, connection::SimpleConnection,
    sql_types::Text,
};

use diesel_outbox_sql::Names;
use diesel_outbox_testkit::{DefaultNames, TenantNames, TestNames};

use crate::{migration_sql_named, statements};

#[derive(QueryableByName)]
struct Step {
    #[diesel(sql_type = Text)]
    detail: String,
}

/// The plan of `sql` (written with the default names) on an in-memory
/// database migrated for the outbox called `names`, one line per step.
fn plan(sql: &str, names: &Names) -> Vec<String> {
    let mut conn = SqliteConnection::establish(":memory:").expect("in-memory database");
    for migration in migration_sql_named(names).expect("names SQLite takes") {
        conn.batch_execute(migration.up()).expect("migration");
    }
    diesel::sql_query(
        names
            .render(&format!("EXPLAIN QUERY PLAN {sql}"))
            .into_owned(),
    )
    .load::<Step>(&mut conn)
    .expect("plan")
    .into_iter()
    .map(|step| step.detail)
    .collect()
}

/// Checks that the plan of `sql` holds each of the `expected` steps and no
/// scan of the whole table, for the default names and for a table prefix
/// alike (`expected` is written with the default names).
#[track_caller]
fn assert_plan(sql: &str, expected: &[&str]) {
    for names in [DefaultNames::names(), TenantNames::names()] {
        let plan = plan(sql, &names);
        let table = names.table("outbox_tasks");
        for step in expected {
            let step = names.render(step);
            assert!(
                plan.iter().any(|line| line.contains(&*step)),
                "no step `{step}` in the plan of\n{sql}\n{plan:#?}"
            );
        }
        assert!(
            plan.iter()
                .all(|line| line.trim() != format!("SCAN {table}")),
            "a scan of the whole table {table} in the plan of\n{sql}\n{plan:#?}"
        );
    }
}

#[test]
fn claims_read_the_available_range_in_id_order() {
    assert_plan(
        statements::CLAIM_DUE,
        &["outbox_tasks_claim_idx (status=? AND id>?)"],
    );
    // No sort: the index gives id order.
    for names in [DefaultNames::names(), TenantNames::names()] {
        assert!(
            !plan(statements::CLAIM_DUE, &names)
                .iter()
                .any(|line| line.contains("TEMP B-TREE"))
        );
    }
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
    // Each age, one index seek to the first row of its status.
    assert_plan(
        statements::AGES,
        &[
            "outbox_tasks_claim_idx (status=?)",
            "outbox_tasks_due_idx (status=?)",
            "outbox_tasks_lease_idx (status=? AND lease_expires_at>?)",
        ],
    );
    assert_plan(
        statements::PURGE,
        &["outbox_tasks_finished_idx (finished_at>? AND finished_at<?)"],
    );
}
