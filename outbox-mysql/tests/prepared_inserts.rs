//! `enqueue_many` keeps a multi-row insert prepared on the connection once
//! it meets its length and shape a second time, for a bounded number of
//! them.

use diesel::{QueryableByName, sql_types::Text};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_mysql::{
    MysqlStore,
    outbox::{Store, Task},
};
use diesel_outbox_sql::{PREPARED_PER_FAMILY, cached};
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};

#[derive(QueryableByName)]
struct Counter {
    #[diesel(sql_type = Text, column_name = "Variable_name")]
    name: String,
    #[diesel(sql_type = Text, column_name = "Value")]
    value: String,
}

/// Statements this session has prepared so far, and prepared again because
/// what they read changed. The read is itself prepared once (a cached
/// statement), so reading again adds nothing.
async fn counters(conn: &mut AsyncMysqlConnection) -> anyhow::Result<(i64, i64)> {
    let read: Vec<Counter> =
        cached::<diesel::mysql::Mysql>("SHOW SESSION STATUS LIKE 'Com_stmt_%prepare'")
            .load(conn)
            .await?;
    let value = |name: &str| -> anyhow::Result<i64> {
        let counter = read
            .iter()
            .find(|counter| counter.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| anyhow::anyhow!("no status variable {name}"))?;
        Ok(counter.value.parse()?)
    };
    Ok((value("Com_stmt_prepare")?, value("Com_stmt_reprepare")?))
}

/// Statements prepared by one `enqueue_many` of `tasks`, in its own
/// transaction on `conn`; none may be prepared again.
async fn prepares_of(
    store: &MysqlStore,
    conn: &mut AsyncMysqlConnection,
    tasks: Vec<Task>,
) -> anyhow::Result<i64> {
    let rows = tasks.len();
    let before = counters(conn).await?;
    let ids = conn
        .transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue_many(tx, tasks).await?))
        .await?;
    assert_eq!(ids.len(), rows);
    let after = counters(conn).await?;
    assert_eq!(after.1, before.1, "a statement was prepared again");
    Ok(after.0 - before.0)
}

fn plain(rows: usize) -> Vec<Task> {
    (0..rows)
        .map(|n| Task::new("order.created", 1, format!("{{\"order\":{n}}}")))
        .collect()
}

/// `rows` tasks of several shapes, starting with shape `first`.
fn mixed(rows: usize, first: usize) -> Vec<Task> {
    let soon = chrono::Utc::now() + chrono::Duration::hours(1);
    plain(rows)
        .into_iter()
        .enumerate()
        .map(|(n, task)| match (n + first) % 4 {
            0 => task,
            1 => task.header("trace", "t-1").max_attempts(3),
            2 => task.not_before(soon),
            _ => task.expires_at(soon),
        })
        .collect()
}

#[derive(QueryableByName)]
struct LockMode {
    #[diesel(sql_type = Text)]
    mode: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_row_inserts_met_twice_are_prepared_once_up_to_a_bound() -> anyhow::Result<()> {
    let db = MysqlTestDb::create("prepared_inserts").await?;
    let store = db.store();
    let mut conn = db.connect().await?;
    let lock_mode: LockMode =
        diesel::sql_query("SELECT CAST(@@innodb_autoinc_lock_mode AS CHAR) AS mode")
            .get_result(&mut conn)
            .await?;
    if lock_mode.mode.trim() == "2" {
        // Interleaved ids: every task is inserted on its own, so there is
        // no multi-row insert to keep (MySQL 8's default; MariaDB's is 1).
        eprintln!("skipped: innodb_autoinc_lock_mode = 2 inserts row by row");
        return Ok(());
    }
    counters(&mut conn).await?;
    // Warms the statements every call shares (ids, transaction control),
    // and the server's facts, which the first multi-row insert reads (a
    // length met once and never again, so it takes no place).
    prepares_of(store, &mut conn, plain(1)).await?;
    prepares_of(store, &mut conn, plain(3 * PREPARED_PER_FAMILY)).await?;

    // Rows of several shapes bind every column: whatever the mix, one
    // statement per length. Met once, it is prepared for that call alone;
    // met again, it is kept.
    assert_eq!(prepares_of(store, &mut conn, mixed(4, 0)).await?, 1);
    assert_eq!(prepares_of(store, &mut conn, mixed(4, 1)).await?, 1);
    assert_eq!(
        prepares_of(store, &mut conn, mixed(4, 2)).await?,
        0,
        "another mix of shapes reuses the statement of its length"
    );
    // Rows of one shape: one statement per length. With the mixed one,
    // these fill the store's choice.
    let lengths = 2..1 + PREPARED_PER_FAMILY;
    for rows in lengths.clone() {
        for time in ["first", "second"] {
            assert_eq!(
                prepares_of(store, &mut conn, plain(rows)).await?,
                1,
                "the {time} insert of {rows} rows is prepared"
            );
        }
    }
    for rows in lengths {
        assert_eq!(
            prepares_of(store, &mut conn, plain(rows)).await?,
            0,
            "an insert of {rows} rows again reuses its statement"
        );
    }
    // Past the bound, each call prepares its statement again.
    for _ in 0..3 {
        assert_eq!(
            prepares_of(store, &mut conn, plain(1 + PREPARED_PER_FAMILY)).await?,
            1
        );
        assert_eq!(prepares_of(store, &mut conn, mixed(5, 0)).await?, 1);
    }
    Ok(())
}
