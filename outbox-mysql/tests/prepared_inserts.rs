//! `enqueue_many` prepares a multi-row insert once per connection for the
//! first few lengths and shapes of rows it meets, and no more.

use diesel::{QueryableByName, sql_types::Text};
use diesel_async::{AsyncConnection, AsyncMysqlConnection, RunQueryDsl};
use diesel_outbox_mysql::{
    MysqlStore,
    outbox::{Store, Task},
};
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};

/// How many multi-row statements a store prepares once (docs/operations.md).
const PREPARED_PER_FAMILY: usize = 8;

#[derive(QueryableByName)]
struct Status {
    #[diesel(sql_type = Text, column_name = "Value")]
    value: String,
}

/// Statements this session has prepared so far. The read is itself prepared
/// once (a cached statement), so reading again adds nothing.
async fn prepared(conn: &mut AsyncMysqlConnection) -> anyhow::Result<u64> {
    let status: Status = diesel_outbox_sql::cached::<diesel::mysql::Mysql>(
        "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'",
    )
    .get_result(conn)
    .await?;
    Ok(status.value.parse()?)
}

/// Statements prepared by one `enqueue_many` of `tasks`, in its own
/// transaction on `conn`.
async fn prepares_of(
    store: &MysqlStore,
    conn: &mut AsyncMysqlConnection,
    tasks: Vec<Task>,
) -> anyhow::Result<u64> {
    let rows = tasks.len();
    let before = prepared(conn).await?;
    let ids = conn
        .transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue_many(tx, tasks).await?))
        .await?;
    assert_eq!(ids.len(), rows);
    Ok(prepared(conn).await? - before)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_row_inserts_are_prepared_once_for_a_bounded_set_of_shapes() -> anyhow::Result<()> {
    let db = MysqlTestDb::create("prepared_inserts").await?;
    let store = db.store();
    let mut conn = db.connect().await?;
    prepared(&mut conn).await?;
    // Warms the statements every call shares (ids, transaction control).
    prepares_of(store, &mut conn, plain(1)).await?;

    // Rows of several shapes bind every column: whatever the mix, one
    // statement per length.
    assert!(prepares_of(store, &mut conn, mixed(4, 0)).await? >= 1);
    assert_eq!(
        prepares_of(store, &mut conn, mixed(4, 1)).await?,
        0,
        "another mix of shapes reuses the statement of its length"
    );
    // Rows of one shape: one statement per length. With the mixed one,
    // these fill the store's choice.
    let lengths = 2..1 + PREPARED_PER_FAMILY;
    for rows in lengths.clone() {
        assert!(
            prepares_of(store, &mut conn, plain(rows)).await? >= 1,
            "a first insert of {rows} rows is prepared"
        );
    }
    for rows in lengths {
        assert_eq!(
            prepares_of(store, &mut conn, plain(rows)).await?,
            0,
            "an insert of {rows} rows again reuses its statement"
        );
    }
    // Past the bound, each call prepares its statement again.
    for _ in 0..2 {
        assert_eq!(
            prepares_of(store, &mut conn, plain(1 + PREPARED_PER_FAMILY)).await?,
            1
        );
        assert_eq!(prepares_of(store, &mut conn, mixed(5, 0)).await?, 1);
    }
    Ok(())
}
