//! A completion write reaches each of its rows by primary key from the JSON
//! rows, and reads no other row: ANALYZE FORMAT=JSON of the real statement
//! beside many running rows of other workers.

use diesel::{QueryableByName, mysql::Mysql, sql_types::Text};
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_core::{Status, TaskId, transition::Completion, transition::Fence};
use diesel_outbox_testkit::{TestBackend, TestNames, mysql::MysqlTestDbNamed};
use serde_json::Value;

use crate::json_rows;
use crate::statements::COMPLETE;

/// Running rows of other workers.
const OTHERS: u64 = 20_000;
/// Results written in the analyzed statement.
const RESULTS: i64 = 100;

#[derive(QueryableByName)]
struct Analyzed {
    #[diesel(column_name = "ANALYZE", sql_type = Text)]
    json: String,
}

/// Every table access in `value`, wherever the plan nests it.
fn tables(value: &Value) -> Vec<&Value> {
    match value {
        Value::Object(fields) => fields
            .iter()
            .flat_map(|(name, field)| match name.as_str() {
                "table" => vec![field],
                _ => tables(field),
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(tables).collect(),
        _ => Vec::new(),
    }
}

async fn a_completion_write_reads_only_its_rows<N: TestNames>() -> anyhow::Result<()> {
    let db = MysqlTestDbNamed::<N>::create("completion_plan").await?;
    db.execute_sql(&format!(
        "INSERT INTO outbox_tasks (kind, version, payload, headers, status, attempts, \
             lease_owner, lease_expires_at, next_attempt_at, last_error, created_at, updated_at) \
         SELECT 'k', 1, '{{}}', '{{}}', 'running', 1, \
             IF(seq <= {RESULTS}, 'writer', 'other'), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, \
             UTC_TIMESTAMP(6), '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) \
         FROM seq_1_to_{total}; \
         ANALYZE TABLE outbox_tasks",
        total = OTHERS + RESULTS as u64
    ))
    .await?;
    let completions: Vec<Completion> = (1..=RESULTS)
        .map(|id| Completion {
            fence: Fence {
                id: TaskId::new(id),
                owner: "writer".into(),
                attempt: 1,
                ordering_key: None,
            },
            status: Status::Succeeded,
            retry_in: None,
            last_error: Some(String::new()),
            released: false,
        })
        .collect();
    let document = json_rows::completions(&completions, usize::MAX)
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no document"))?;

    let mut conn = db.connect().await?;
    conn.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await?;
    conn.begin_test_transaction().await?;
    let analyzed: Analyzed =
        diesel::sql_query(N::names().render(&format!("ANALYZE FORMAT=JSON {COMPLETE}")))
            .into_boxed::<Mysql>()
            .bind::<Text, _>(document)
            .get_result(&mut conn)
            .await?;
    drop(conn); // never committed
    let analyzed: Value = serde_json::from_str(&analyzed.json)?;
    let plan = serde_json::to_string_pretty(&analyzed)?;

    let tables = tables(&analyzed);
    assert_eq!(tables.len(), 2, "the JSON rows and outbox_tasks:\n{plan}");
    let (rows, tasks) = (tables[0], tables[1]);
    assert_eq!(rows["table_name"], "j", "the JSON rows come first:\n{plan}");
    assert_eq!(tasks["table_name"], "t", "{plan}");
    assert_eq!(
        tasks["access_type"], "eq_ref",
        "one row per result:\n{plan}"
    );
    assert_eq!(tasks["key"], "PRIMARY", "{plan}");
    let read = tasks["r_rows"].as_f64().unwrap_or(f64::INFINITY)
        * tasks["r_loops"].as_f64().unwrap_or(f64::INFINITY);
    assert!(
        read <= RESULTS as f64,
        "the write read {read} rows of outbox_tasks for {RESULTS} results:\n{plan}"
    );
    Ok(())
}

diesel_outbox_testkit::each_names!(a_completion_write_reads_only_its_rows);
