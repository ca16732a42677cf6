//! A task that uses none of the options goes in with its own short insert,
//! and its row is the one the general insert writes for it.

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Bool, Integer, Jsonb, Nullable, Text},
};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use diesel_outbox_postgres::{
    PgStore,
    outbox::{Store, Task, TaskId},
};
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb};

#[derive(QueryableByName)]
struct Statement {
    #[diesel(sql_type = Text)]
    statement: String,
}

/// The task inserts prepared on `conn` so far.
async fn prepared_inserts(conn: &mut AsyncPgConnection) -> anyhow::Result<Vec<String>> {
    let rows: Vec<Statement> = diesel::sql_query(
        "SELECT statement FROM pg_prepared_statements \
         WHERE statement LIKE 'INSERT INTO outbox_tasks %' ORDER BY prepare_time",
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|row| row.statement).collect())
}

async fn enqueue(
    store: &PgStore,
    conn: &mut AsyncPgConnection,
    task: Task,
) -> anyhow::Result<TaskId> {
    conn.transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue(tx, task).await?))
        .await
}

/// What a row holds besides its id, its `dedup_key` and its instants, and
/// how its instants stand to the database clock.
#[derive(QueryableByName, Debug, PartialEq)]
struct Written {
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = diesel::sql_types::Bytea)]
    payload: Vec<u8>,
    #[diesel(sql_type = Integer)]
    version: i32,
    #[diesel(sql_type = Jsonb)]
    headers: serde_json::Value,
    #[diesel(sql_type = Nullable<Text>)]
    ordering_key: Option<String>,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = BigInt)]
    released: i64,
    #[diesel(sql_type = Nullable<Integer>)]
    max_attempts: Option<i32>,
    /// Due at its insert: `next_attempt_at` and `updated_at` equal
    /// `created_at`.
    #[diesel(sql_type = Bool)]
    due_at_insert: bool,
    #[diesel(sql_type = Bool)]
    finished: bool,
    #[diesel(sql_type = Bool)]
    expires: bool,
    #[diesel(sql_type = Bool)]
    leased: bool,
    #[diesel(sql_type = Text)]
    last_error: String,
}

async fn written(conn: &mut AsyncPgConnection, id: TaskId) -> anyhow::Result<Written> {
    Ok(diesel::sql_query(
        "SELECT kind, payload, version, headers, ordering_key, status, attempts, released, \
                max_attempts, \
                next_attempt_at = created_at AND updated_at = created_at AS due_at_insert, \
                finished_at IS NOT NULL AS finished, expires_at IS NOT NULL AS expires, \
                lease_owner IS NOT NULL OR lease_expires_at IS NOT NULL AS leased, last_error \
         FROM outbox_tasks WHERE id = $1",
    )
    .bind::<BigInt, _>(id.get())
    .get_result(conn)
    .await?)
}

#[tokio::test]
async fn a_task_without_options_binds_four_values_and_writes_the_same_row() {
    let db = PgTestDb::create("plain_enqueue")
        .await
        .expect("test database");
    let store = db.store();
    let mut conn = db.connect().await.expect("connect");
    let task = || Task::new("order.created", 1, "{}").header("trace", "t-1");

    let plain = enqueue(store, &mut conn, task())
        .await
        .expect("plain enqueue");
    let inserts = prepared_inserts(&mut conn)
        .await
        .expect("prepared statements");
    assert_eq!(inserts.len(), 1, "{inserts:?}");
    assert!(
        inserts[0].contains("$4") && !inserts[0].contains("$5"),
        "{inserts:?}"
    );
    assert!(!inserts[0].contains("ON CONFLICT"), "{inserts:?}");

    // Any option takes the general insert; a dedup key changes nothing else
    // in the row, so the two rows must match column for column.
    let general = enqueue(store, &mut conn, task().dedup_key("order-1"))
        .await
        .expect("general enqueue");
    let inserts = prepared_inserts(&mut conn)
        .await
        .expect("prepared statements");
    assert_eq!(inserts.len(), 2, "{inserts:?}");
    assert!(inserts[1].contains("ON CONFLICT"), "{inserts:?}");

    let plain_row = written(&mut conn, plain).await.expect("plain row");
    assert_eq!(
        plain_row,
        written(&mut conn, general).await.expect("general row")
    );
    assert_eq!(plain_row.status, "available");
    assert!(plain_row.due_at_insert);

    // A second plain task reuses the statement: prepared once per connection.
    enqueue(store, &mut conn, task())
        .await
        .expect("plain enqueue");
    assert_eq!(
        prepared_inserts(&mut conn).await.expect("prepared").len(),
        2
    );
}

#[tokio::test]
async fn any_option_takes_the_general_insert() {
    let db = PgTestDb::create("plain_enqueue_options")
        .await
        .expect("test database");
    let soon = chrono::Utc::now() + chrono::Duration::hours(1);
    let task = || Task::new("order.created", 1, "{}");
    let options = [
        ("ordering_key", task().ordering_key("customer-7")),
        ("dedup_key", task().dedup_key("order-7")),
        ("max_attempts", task().max_attempts(3)),
        ("not_before", task().not_before(soon)),
        ("expires_at", task().expires_at(soon)),
    ];
    for (option, task) in options {
        // A fresh connection: what it has prepared is this enqueue's alone.
        let mut conn = db.connect().await.expect("connect");
        enqueue(db.store(), &mut conn, task).await.expect(option);
        let inserts = prepared_inserts(&mut conn)
            .await
            .expect("prepared statements");
        assert_eq!(inserts.len(), 1, "{option}: {inserts:?}");
        assert!(inserts[0].contains("ON CONFLICT"), "{option}: {inserts:?}");
    }
}
