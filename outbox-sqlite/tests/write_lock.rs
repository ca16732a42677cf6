//! SQLite's one writer at a time: claims wait their turn, a deferred
//! transaction that reads first is refused at its first write when another
//! connection wrote meanwhile while the `transaction` helper is not, a lock
//! held past the busy timeout is a retryable lock timeout, and the helpers
//! queue for the store's turn to write, for as long at most.

use std::time::{Duration, Instant};

use diesel::{QueryableByName, sql_types::BigInt};
use diesel_async::{
    AsyncConnection, RunQueryDsl, SimpleAsyncConnection,
    pooled_connection::{AsyncDieselConnectionManager, ManagerConfig, deadpool::Pool},
};
use diesel_outbox_sqlite::{
    AsyncSqliteConnection, BUSY_TIMEOUT, SqliteStore,
    outbox::{BatchRequest, DatabaseErrorKind, Error, LeaseRequest, Registry, Store, Task, Worker},
    transaction, transaction_pooled,
};
use diesel_outbox_testkit::{TestBackend, handler, sqlite::SqliteTestDb};

fn task(n: usize) -> Task {
    Task::new("order.created", 1, format!("{{\"order\":{n}}}"))
}

async fn enqueue(db: &SqliteTestDb, tasks: Vec<Task>) {
    let store = db.store();
    db.connect()
        .await
        .expect("connect")
        .transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue_many(tx, tasks).await?))
        .await
        .expect("enqueue");
}

fn worker(
    db: &SqliteTestDb,
) -> (
    Worker<SqliteStore>,
    diesel_outbox_testkit::handler::HandlerHandle,
) {
    worker_on(db.store().clone())
}

/// A worker on `store` whose handler records what it is given.
fn worker_on(
    store: SqliteStore,
) -> (
    Worker<SqliteStore>,
    diesel_outbox_testkit::handler::HandlerHandle,
) {
    let (mock, handle) = handler::recording();
    let registry = Registry::builder()
        .handler("order.created", 1, mock)
        .build()
        .expect("registry");
    (Worker::new(store, registry).expect("worker"), handle)
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn count(conn: &mut AsyncSqliteConnection) -> i64 {
    diesel::sql_query("SELECT COUNT(*) AS n FROM outbox_tasks")
        .get_result::<Count>(conn)
        .await
        .expect("count")
        .n
}

/// How long a test lets something run to show that it waits.
const WAITS: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_waits_its_turn_for_the_write_lock() {
    let db = SqliteTestDb::create("round_waits_for_lock")
        .await
        .expect("db");
    enqueue(&db, (0..3).map(task).collect()).await;
    let (worker, handle) = worker(&db);
    let mut locker = db.connect().await.expect("connect");
    locker.batch_execute("BEGIN IMMEDIATE").await.expect("lock");

    let mut round = tokio::spawn(async move { worker.retry_pending(10).await });
    assert!(
        tokio::time::timeout(WAITS, &mut round).await.is_err(),
        "the round claimed while another connection held the write lock"
    );
    assert_eq!(handle.calls(), 0);
    locker.batch_execute("COMMIT").await.expect("unlock");
    let report = round.await.expect("join").expect("round");
    assert_eq!((report.claimed, report.succeeded), (3, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_transaction_that_reads_first_is_refused_its_write() {
    let db = SqliteTestDb::create("deferred_reads_first")
        .await
        .expect("db");
    let store = db.store();
    let mut reader = db.connect().await.expect("connect");
    let result = reader
        .transaction::<_, anyhow::Error, _>(async |tx| {
            // The read starts this transaction's snapshot...
            assert_eq!(count(tx).await, 0);
            // ...another connection commits a write...
            enqueue(&db, vec![task(1)]).await;
            // ...so the snapshot is stale, and SQLite refuses the upgrade to
            // a writer at once rather than wait (which could deadlock).
            let started = Instant::now();
            let refused = store.enqueue(tx, task(2)).await;
            assert!(started.elapsed() < BUSY_TIMEOUT, "the write waited");
            Ok(refused)
        })
        .await
        .expect("the transaction itself");
    match result {
        Err(error) => {
            assert_eq!(error.database_kind(), Some(DatabaseErrorKind::LockTimeout));
            assert!(error.is_retryable());
        }
        Ok(id) => panic!("a stale reader became a writer and enqueued {id}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_helper_reads_first_and_still_writes() {
    let db = SqliteTestDb::create("helper_reads_first")
        .await
        .expect("db");
    let (worker, handle) = worker(&db);
    let mut conn = db.connect().await.expect("connect");
    let mut other: Option<tokio::task::JoinHandle<()>> = None;
    let id = transaction(&worker, &mut conn, async |mut tx| {
        assert_eq!(count(tx.conn()).await, 0);
        // Another connection's write now waits for this transaction, which
        // holds the write lock since BEGIN IMMEDIATE...
        let url = db.url().to_owned();
        let mut writer = tokio::spawn(async move {
            let db = SqliteTestDb::attach(&url).await.expect("attach");
            enqueue(&db, vec![task(1)]).await;
        });
        assert!(
            tokio::time::timeout(WAITS, &mut writer).await.is_err(),
            "another connection wrote inside this transaction"
        );
        other = Some(writer);
        // ...so this one's snapshot stays current and its write goes through.
        anyhow::Ok(tx.enqueue(task(2)).await?)
    })
    .await
    .expect("the helper's transaction");
    other
        .expect("the other writer")
        .await
        .expect("the other write");
    handle.wait_for_successes(1).await;
    assert_eq!(handle.succeeded_ids(), [id]);
    assert_eq!(db.count_tasks().await.expect("count"), 2);
}

/// A pool whose connections give up on a held lock after 100 ms.
fn impatient_store(db: &SqliteTestDb) -> SqliteStore {
    let mut config = ManagerConfig::<AsyncSqliteConnection>::default();
    config.custom_setup = Box::new(|url| {
        let url = url.to_owned();
        Box::pin(async move {
            let mut conn = AsyncSqliteConnection::establish(&url).await?;
            conn.batch_execute("PRAGMA busy_timeout = 100")
                .await
                .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
            Ok(conn)
        })
    });
    let manager = AsyncDieselConnectionManager::new_with_config(db.url(), config);
    SqliteStore::new(Pool::builder(manager).max_size(2).build().expect("pool"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_past_the_busy_timeout_is_a_retryable_lock_timeout() {
    let db = SqliteTestDb::create("busy_timeout").await.expect("db");
    enqueue(&db, vec![task(1)]).await;
    let store = impatient_store(&db);
    let mut locker = db.connect().await.expect("connect");
    locker.batch_execute("BEGIN IMMEDIATE").await.expect("lock");
    let request = BatchRequest {
        lease: LeaseRequest {
            owner: "impatient".into(),
            duration: Duration::from_secs(30),
        },
        limit: 10,
        after: None,
        due_by: None,
    };
    let error = store
        .claim_due(&request)
        .await
        .expect_err("claimed under a held lock");
    assert!(matches!(error, Error::Database { .. }), "{error:?}");
    assert_eq!(error.database_kind(), Some(DatabaseErrorKind::LockTimeout));
    assert_eq!(error.database_code(), Some("SQLITE_BUSY"));
    assert!(error.is_retryable());
    locker.batch_execute("ROLLBACK").await.expect("unlock");
    assert_eq!(store.claim_due(&request).await.expect("claim").len(), 1);
}

/// Which of the two `transaction` helpers a test runs.
#[derive(Debug, Clone, Copy)]
enum Helper {
    OnConnection,
    Pooled,
}

impl Helper {
    /// Enqueues `n` with this helper, saying on `began` when its body runs.
    async fn enqueue(
        self,
        db: &SqliteTestDb,
        worker: &Worker<SqliteStore>,
        n: usize,
        began: tokio::sync::oneshot::Sender<()>,
    ) -> anyhow::Result<diesel_outbox_sqlite::outbox::TaskId> {
        let body = async |mut tx: diesel_outbox_sqlite::outbox::Tx<'_, SqliteStore>| {
            let _ = began.send(());
            anyhow::Ok(tx.enqueue(task(n)).await?)
        };
        match self {
            Self::OnConnection => {
                let mut conn = db.connect().await?;
                transaction(worker, &mut conn, body).await
            }
            Self::Pooled => transaction_pooled(worker, db.store().pool(), body).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_helpers_wait_for_the_stores_turn_to_write() {
    for helper in [Helper::OnConnection, Helper::Pooled] {
        let db = SqliteTestDb::create("helpers_take_the_turn")
            .await
            .expect("db");
        let (worker, handle) = worker(&db);
        // The turn alone, without the database's lock: a helper that did not
        // queue for it would begin at once.
        let turn = db.store().write_turn().await.expect("the turn");
        let (began, mut begun) = tokio::sync::oneshot::channel();
        let enqueue = tokio::spawn({
            let (db, worker) = (
                SqliteTestDb::attach(db.url()).await.expect("attach"),
                worker.clone(),
            );
            async move { helper.enqueue(&db, &worker, 1, began).await }
        });
        assert!(
            tokio::time::timeout(WAITS, &mut begun).await.is_err(),
            "{helper:?} began while the store's turn was held"
        );
        drop(turn);
        begun.await.expect("began once the turn was free");
        let id = enqueue.await.expect("join").expect("enqueue");
        handle.wait_for_successes(1).await;
        assert_eq!(handle.succeeded_ids(), [id], "{helper:?}");
        worker.wait_idle().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_write_inside_a_helpers_transaction_fails_after_the_bound() {
    let db = SqliteTestDb::create("store_write_inside_helper")
        .await
        .expect("db");
    enqueue(&db, vec![task(1)]).await;
    let (worker, _handle) = worker(&db);
    let mut conn = db.connect().await.expect("connect");
    let started = Instant::now();
    let inner = tokio::time::timeout(
        BUSY_TIMEOUT * 3,
        transaction(&worker, &mut conn, async |_tx| {
            anyhow::Ok(worker.retry_pending(10).await)
        }),
    )
    .await
    .expect("a store write waited for ever inside the helper's transaction")
    .expect("the helper's own transaction");
    let error = inner.expect_err("a store write went ahead inside the helper's transaction");
    assert!(started.elapsed() >= BUSY_TIMEOUT, "{:?}", started.elapsed());
    assert_eq!(error.database_kind(), Some(DatabaseErrorKind::LockTimeout));
    assert!(error.is_retryable());
    // It waited in the process's queue, not at SQLite's lock.
    assert!(
        error.chain().contains("turn to write did not come"),
        "{}",
        error.chain()
    );
    // The turn is free again once the helper ended.
    let report = worker.retry_pending(10).await.expect("round");
    assert_eq!(report.claimed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_waiting_past_the_bound_fails_as_a_busy_lock_does() {
    let db = SqliteTestDb::create("helper_turn_bound").await.expect("db");
    let (worker, _handle) = worker(&db);
    let turn = db.store().write_turn().await.expect("the turn");
    let (began, _begun) = tokio::sync::oneshot::channel();
    let started = Instant::now();
    let error = Helper::OnConnection
        .enqueue(&db, &worker, 1, began)
        .await
        .expect_err("enqueued while the turn was held");
    assert!(started.elapsed() >= BUSY_TIMEOUT, "{:?}", started.elapsed());
    // SQLite's own words for a lock that did not come in time, which the
    // store classifies as a retryable `LockTimeout` (`SQLITE_BUSY`).
    match error.downcast_ref::<diesel::result::Error>() {
        Some(diesel::result::Error::DatabaseError(_, info)) => {
            assert!(
                info.message().starts_with("database is locked: "),
                "{}",
                info.message()
            );
        }
        _ => panic!("not diesel's error for a busy lock: {error:#}"),
    }
    drop(turn);
    assert_eq!(db.count_tasks().await.expect("count"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_dropped_mid_transaction_gives_the_turn_back() {
    let db = SqliteTestDb::create("helper_dropped_turn")
        .await
        .expect("db");
    let (worker, handle) = worker(&db);
    let (began, begun) = tokio::sync::oneshot::channel();
    let abandoned = tokio::spawn({
        let worker = worker.clone();
        let pool = db.store().pool().clone();
        async move {
            transaction_pooled(&worker, &pool, async |mut tx| {
                tx.enqueue(task(1)).await?;
                let _ = began.send(());
                std::future::pending::<()>().await;
                anyhow::Ok(())
            })
            .await
        }
    });
    begun.await.expect("the body ran");
    abandoned.abort();
    assert!(abandoned.await.is_err_and(|e| e.is_cancelled()));
    // Neither the turn nor the lock outlives the dropped future.
    let started = Instant::now();
    let (began, _begun) = tokio::sync::oneshot::channel();
    let id = Helper::Pooled
        .enqueue(&db, &worker, 2, began)
        .await
        .expect("enqueue after the abandoned one");
    assert!(started.elapsed() < BUSY_TIMEOUT, "{:?}", started.elapsed());
    handle.wait_for_successes(1).await;
    assert_eq!(handle.succeeded_ids(), [id]);
    assert_eq!(db.count_tasks().await.expect("count"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waiting_for_a_connection_does_not_hold_the_turn() {
    let db = SqliteTestDb::create("turn_after_connection")
        .await
        .expect("db");
    enqueue(&db, vec![task(1)]).await;
    // One connection for the store and the caller alike.
    let store = SqliteStore::connect(db.url(), 1).expect("store");
    let (worker, handle) = worker_on(store.clone());
    let mut conn = store.pool().get().await.expect("the pool's connection");
    let mut round = tokio::spawn({
        let worker = worker.clone();
        async move { worker.retry_pending(10).await }
    });
    assert!(
        tokio::time::timeout(WAITS, &mut round).await.is_err(),
        "the round ran without a connection"
    );
    // The round waits for the connection held here, without the turn, so
    // the helper on that connection has its turn at once.
    let started = Instant::now();
    let id = transaction(&worker, &mut *conn, async |mut tx| {
        anyhow::Ok(tx.enqueue(task(2)).await?)
    })
    .await
    .expect("the helper on the held connection");
    assert!(started.elapsed() < BUSY_TIMEOUT, "{:?}", started.elapsed());
    drop(conn);
    let report = round.await.expect("join").expect("round");
    assert!(report.claimed >= 1, "{report:?}");
    worker.wait_idle().await;
    worker.retry_pending(10).await.expect("the rest");
    handle.wait_for_successes(2).await;
    let mut ids = handle.succeeded_ids();
    ids.sort();
    assert!(ids.contains(&id), "{ids:?}");
}
