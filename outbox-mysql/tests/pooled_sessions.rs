//! The pool `MysqlStore::connect` builds hands a connection out without a
//! round trip while it is in steady use, checks one that waited
//! [`VERIFY_AFTER_IDLE`] or more, and closes one whose session was lost.

use diesel_async::SimpleAsyncConnection as _;
use diesel_outbox_core::{DatabaseErrorKind, Registry, Store as _, Task, Worker};
use diesel_outbox_mysql::{MysqlStore, VERIFY_AFTER_IDLE};
use diesel_outbox_testkit::{
    TestBackend,
    isolated::Server as _,
    mysql::{Mysql, MysqlTestDb},
};

/// A store whose pool holds one connection, handed out a moment ago, and
/// that connection's session, which the server has just ended (as a
/// restart, a failover or `wait_timeout` would).
async fn store_with_killed_session(db: &MysqlTestDb) -> anyhow::Result<(MysqlStore, i64)> {
    let store = MysqlStore::connect(db.url(), 1)?;
    // Opened first, so that the kill follows the last checkout at once.
    let mut killer = db.connect().await?;
    let session = pooled_session(&store).await?;
    killer.batch_execute(&Mysql::kill_session(session)).await?;
    Ok((store, session))
}

/// The session of the pool's one connection.
async fn pooled_session(store: &MysqlStore) -> anyhow::Result<i64> {
    let mut conn = store.pool().get().await?;
    Mysql::session_id(&mut conn).await
}

/// A connection that waited in the pool past `VERIFY_AFTER_IDLE` is checked
/// before it is handed out: the server ended its session meanwhile, so the
/// pool replaces it and the call never sees the lost session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_while_the_connection_waited_never_reaches_a_call() -> anyhow::Result<()> {
    let db = MysqlTestDb::create("pooled_waited").await?;
    let (store, killed) = store_with_killed_session(&db).await?;
    // The condition itself: the connection has been idle this long.
    tokio::time::sleep(VERIFY_AFTER_IDLE).await;
    assert_eq!(store.promote(10).await?, 0);
    assert_ne!(pooled_session(&store).await?, killed);
    Ok(())
}

/// A connection handed out moments ago is handed out again unchecked: when
/// the server ended its session in between, one call fails with a retryable
/// connection error, the connection is closed rather than pooled, and the
/// next call runs on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_in_steady_use_fails_one_call_then_is_replaced() -> anyhow::Result<()> {
    let db = MysqlTestDb::create("pooled_steady").await?;
    let (store, killed) = store_with_killed_session(&db).await?;
    let error = match store.promote(10).await {
        Err(error) => error,
        Ok(promoted) => anyhow::bail!("promoted {promoted} on a session the server ended"),
    };
    assert_eq!(
        error.database_kind(),
        Some(DatabaseErrorKind::Connection),
        "{error}"
    );
    assert!(error.is_retryable(), "{error}");
    assert_eq!(store.promote(10).await?, 0);
    assert_ne!(pooled_session(&store).await?, killed);
    Ok(())
}

/// The same through `transaction_pooled`, whose connection a failed
/// transaction would otherwise hand back to the pool: the transaction on
/// the ended session fails, and the next one runs on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_transaction_on_an_ended_session_fails_once() -> anyhow::Result<()> {
    let db = MysqlTestDb::create("pooled_transaction").await?;
    let (store, killed) = store_with_killed_session(&db).await?;
    let worker = Worker::new(store.clone(), Registry::builder().build()?)?;
    let enqueue = || {
        diesel_outbox_mysql::transaction_pooled(&worker, store.pool(), async |mut tx| {
            tx.enqueue(Task::new("order.created", 1, "{}")).await?;
            anyhow::Ok(())
        })
    };
    // The failure is the driver's, as the body's error type holds it.
    if enqueue().await.is_ok() {
        anyhow::bail!("a transaction committed on a session the server ended");
    }
    enqueue().await?;
    assert_ne!(pooled_session(&store).await?, killed);
    Ok(())
}
