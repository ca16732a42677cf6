//! Real server failures surface as `Error::Database` with the right kind, the
//! server's error number, and the right answer to `is_retryable()`.

use std::sync::Arc;

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Unsigned},
};
use diesel_async::{
    AnsiTransactionManager, AsyncConnection, AsyncMysqlConnection, RunQueryDsl,
    SimpleAsyncConnection, TransactionManager,
};
use diesel_outbox_mysql::{
    MysqlStore,
    outbox::{DatabaseErrorKind, Error, Store, Task, TaskId},
};
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};
use tokio::sync::Barrier;

/// Enqueues `tasks` in one transaction on `conn`; the outbox error if any.
async fn enqueue(
    conn: &mut AsyncMysqlConnection,
    store: &MysqlStore,
    tasks: Vec<Task>,
) -> Result<Vec<TaskId>, Error> {
    conn.transaction::<_, TxError, _>(async |tx| {
        let mut ids = Vec::new();
        for task in tasks {
            ids.push(store.enqueue(tx, task).await?);
        }
        Ok(ids)
    })
    .await
    .map_err(TxError::outbox)
}

/// The error of a test transaction: the outbox's, or diesel's from BEGIN,
/// COMMIT or ROLLBACK (which a test here never expects).
#[derive(Debug)]
enum TxError {
    Outbox(Error),
    Diesel(diesel::result::Error),
}

impl From<Error> for TxError {
    fn from(error: Error) -> Self {
        Self::Outbox(error)
    }
}

impl From<diesel::result::Error> for TxError {
    fn from(error: diesel::result::Error) -> Self {
        Self::Diesel(error)
    }
}

impl TxError {
    fn outbox(self) -> Error {
        match self {
            Self::Outbox(error) => error,
            Self::Diesel(error) => panic!("the transaction itself failed: {error}"),
        }
    }
}

fn task(kind: &str) -> Task {
    Task::new(kind, 1, "{}")
}

#[track_caller]
fn assert_database(error: &Error, kind: DatabaseErrorKind, code: &str, retryable: bool) {
    assert_eq!(error.database_kind(), Some(kind), "{error:?}");
    assert_eq!(error.database_code(), Some(code), "{error:?}");
    assert_eq!(error.is_retryable(), retryable, "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constraint_violations_are_permanent_and_carry_their_number() {
    let db = MysqlTestDb::create("db_error_constraints")
        .await
        .expect("test database");
    db.execute_sql(
        "ALTER TABLE outbox_tasks ADD CONSTRAINT no_forbidden CHECK (kind <> 'forbidden')",
    )
    .await
    .expect("check constraint");
    db.execute_sql("CREATE UNIQUE INDEX one_per_ordering_key ON outbox_tasks (ordering_key)")
        .await
        .expect("unique index");
    let mut conn = db.connect().await.expect("connect");

    let error = enqueue(&mut conn, db.store(), vec![task("forbidden")])
        .await
        .expect_err("the check constraint rejects the kind");
    // MariaDB's number; MySQL reports the same failure as 3819.
    let code = if server_is_mariadb(&db).await {
        "4025"
    } else {
        "3819"
    };
    assert_database(&error, DatabaseErrorKind::CheckViolation, code, false);
    let chain = format!("{:#}", anyhow::Error::from(error));
    assert_eq!(chain.matches("no_forbidden").count(), 1, "{chain}");

    let keyed = || task("order.created").ordering_key("customer-7");
    enqueue(&mut conn, db.store(), vec![keyed()])
        .await
        .expect("the first task of the key");
    let error = enqueue(&mut conn, db.store(), vec![keyed()])
        .await
        .expect_err("the unique index rejects a second task of the key");
    assert_database(&error, DatabaseErrorKind::UniqueViolation, "1062", false);
    assert_eq!(db.count_tasks().await.expect("count"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_between_two_enqueues_is_retryable() {
    let db = MysqlTestDb::create("db_error_deadlock")
        .await
        .expect("test database");
    // Each transaction takes one dedup key, then waits for the other's.
    let barrier = Arc::new(Barrier::new(2));
    let run = |first: &'static str, second: &'static str| {
        let store = db.store().clone();
        let barrier = barrier.clone();
        let connecting = db.connect();
        async move {
            let mut conn = connecting.await.expect("connect");
            conn.transaction::<_, TxError, _>(async |tx| {
                store.enqueue(tx, task("a").dedup_key(first)).await?;
                barrier.wait().await;
                store.enqueue(tx, task("b").dedup_key(second)).await?;
                Ok(())
            })
            .await
            .map_err(TxError::outbox)
        }
    };
    let (one, two) = tokio::join!(run("key-1", "key-2"), run("key-2", "key-1"));

    let mut errors: Vec<Error> = [one, two].into_iter().filter_map(Result::err).collect();
    assert_eq!(
        errors.len(),
        1,
        "exactly one side is the victim: {errors:?}"
    );
    let error = errors.remove(0);
    assert_database(&error, DatabaseErrorKind::Deadlock, "1213", true);
    assert_eq!(db.count_tasks().await.expect("count"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_timeout_is_retryable() {
    let db = MysqlTestDb::create("db_error_lock_timeout")
        .await
        .expect("test database");
    let mut holder = db.connect().await.expect("connect");
    let mut waiter = db.connect().await.expect("connect");
    waiter
        .batch_execute("SET SESSION innodb_lock_wait_timeout = 1")
        .await
        .expect("lock wait timeout");
    let store = db.store();

    let error = holder
        .transaction::<_, TxError, _>(async |held| {
            store.enqueue(held, task("a").dedup_key("key")).await?;
            // The key's row is uncommitted: inserting it again waits for us.
            let waited = waiter
                .transaction::<_, TxError, _>(async |tx| {
                    Ok(store.enqueue(tx, task("a").dedup_key("key")).await?)
                })
                .await;
            Ok(waited.map_err(TxError::outbox))
        })
        .await
        .map_err(TxError::outbox)
        .expect("the holder commits")
        .expect_err("the waiter gives up");
    assert_database(&error, DatabaseErrorKind::LockTimeout, "1205", true);
}

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = Unsigned<BigInt>)]
    id: u64,
}

#[derive(QueryableByName)]
struct Version {
    #[diesel(sql_type = diesel::sql_types::Text)]
    version: String,
}

async fn server_is_mariadb(db: &MysqlTestDb) -> bool {
    let mut conn = db.connect().await.expect("connect");
    let Version { version } = diesel::sql_query("SELECT VERSION() AS version")
        .get_result(&mut conn)
        .await
        .expect("version");
    version.contains("MariaDB")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_killed_is_retryable() {
    let db = MysqlTestDb::create("db_error_killed")
        .await
        .expect("test database");
    let mut conn = db.connect().await.expect("connect");
    AnsiTransactionManager::begin_transaction(&mut conn)
        .await
        .expect("begin");
    let Id { id } = diesel::sql_query("SELECT CONNECTION_ID() AS id")
        .get_result(&mut conn)
        .await
        .expect("connection id");
    db.execute_sql(&format!("KILL {id}")).await.expect("kill");

    let error = db
        .store()
        .enqueue(&mut conn, task("order.created"))
        .await
        .expect_err("the connection is gone");
    assert_eq!(
        error.database_kind(),
        Some(DatabaseErrorKind::Connection),
        "{error:?}"
    );
    assert!(error.is_retryable());
    assert_eq!(db.count_tasks().await.expect("count"), 0);
}
