//! A database server's own failures surface as `Error::Database` with the
//! right kind, the server's code (PostgreSQL's SQLSTATE, MySQL's and
//! MariaDB's error number), and the right answer to `is_retryable()`.
//!
//! Server backends only ([`IsolatedDb`]): what each server answers, and how a
//! test makes it fail, comes from its [`Server`].

use std::sync::Arc;

use diesel_async::{AsyncConnection, SimpleAsyncConnection, TransactionManager};
use diesel_outbox_core::{DatabaseErrorKind, Error, Store, Task, TaskId};
use tokio::sync::Barrier;

use crate::{
    TestBackend, TestNames,
    isolated::{IsolatedDb, Server},
};

/// Enqueues `tasks` in one transaction on `conn`; the outbox error if any.
async fn enqueue<S: Server>(
    conn: &mut S::Conn,
    store: &S::Store,
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
/// COMMIT or ROLLBACK (which a scenario here never expects).
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

/// A `CHECK` constraint's and a unique index's violations are permanent and
/// carry the server's code; the check's message appears once in the error's
/// chain, and the refused task is not written.
pub async fn constraint_violations_are_permanent_and_carry_their_code<S: Server, N: TestNames>(
    db: &IsolatedDb<S, N>,
) -> anyhow::Result<()> {
    db.execute_sql(
        "ALTER TABLE outbox_tasks ADD CONSTRAINT no_forbidden CHECK (kind <> 'forbidden')",
    )
    .await?;
    db.execute_sql("CREATE UNIQUE INDEX one_per_ordering_key ON outbox_tasks (ordering_key)")
        .await?;
    let mut conn = db.connect().await?;

    let Err(error) = enqueue::<S>(&mut conn, db.store(), vec![task("forbidden")]).await else {
        anyhow::bail!("the check constraint accepted the kind");
    };
    let code = S::check_violation_code(&mut conn).await?;
    assert_database(&error, DatabaseErrorKind::CheckViolation, code, false);
    let chain = format!("{:#}", anyhow::Error::from(error));
    assert_eq!(chain.matches(S::CHECK_VIOLATION_TEXT).count(), 1, "{chain}");

    let keyed = || task("order.created").ordering_key("customer-7");
    enqueue::<S>(&mut conn, db.store(), vec![keyed()]).await?;
    let Err(error) = enqueue::<S>(&mut conn, db.store(), vec![keyed()]).await else {
        anyhow::bail!("the unique index accepted a second task of the key");
    };
    assert_database(
        &error,
        DatabaseErrorKind::UniqueViolation,
        S::UNIQUE_VIOLATION_CODE,
        false,
    );
    assert_eq!(db.count_tasks().await?, 1);
    Ok(())
}

/// Two enqueues that wait for each other's dedup key: the server picks
/// exactly one victim, whose error is a retryable deadlock, and the other
/// commits both its tasks.
pub async fn a_deadlock_between_two_enqueues_is_retryable<S: Server, N: TestNames>(
    db: &IsolatedDb<S, N>,
) -> anyhow::Result<()> {
    // Each transaction takes one dedup key, then waits for the other's.
    let barrier = Arc::new(Barrier::new(2));
    let run = |first: &'static str, second: &'static str| {
        let store = db.store().clone();
        let barrier = barrier.clone();
        let connecting = db.connect();
        async move {
            let mut conn = connecting.await?;
            anyhow::Ok(
                conn.transaction::<_, TxError, _>(async |tx| {
                    store.enqueue(tx, task("a").dedup_key(first)).await?;
                    barrier.wait().await;
                    store.enqueue(tx, task("b").dedup_key(second)).await?;
                    Ok(())
                })
                .await
                .map_err(TxError::outbox),
            )
        }
    };
    let (one, two) = tokio::join!(run("key-1", "key-2"), run("key-2", "key-1"));

    let mut errors: Vec<Error> = [one?, two?].into_iter().filter_map(Result::err).collect();
    assert_eq!(
        errors.len(),
        1,
        "exactly one side is the victim: {errors:?}"
    );
    let error = errors.remove(0);
    assert_database(&error, DatabaseErrorKind::Deadlock, S::DEADLOCK_CODE, true);
    assert_eq!(db.count_tasks().await?, 2);
    Ok(())
}

/// An enqueue that waits longer than its lock timeout for another
/// transaction's uncommitted dedup key gives up with a retryable error.
pub async fn a_lock_timeout_is_retryable<S: Server, N: TestNames>(
    db: &IsolatedDb<S, N>,
) -> anyhow::Result<()> {
    let mut holder = db.connect().await?;
    let mut waiter = db.connect().await?;
    let store = db.store();

    let waited = holder
        .transaction::<_, TxError, _>(async |held| {
            store.enqueue(held, task("a").dedup_key("key")).await?;
            // The key's row is uncommitted: inserting it again waits for us.
            let waited = waiter
                .transaction::<_, TxError, _>(async |tx| {
                    tx.batch_execute(S::SHORT_LOCK_WAIT).await?;
                    Ok(store.enqueue(tx, task("a").dedup_key("key")).await?)
                })
                .await;
            Ok(waited.map_err(TxError::outbox))
        })
        .await
        .map_err(TxError::outbox);
    let error = match waited {
        Ok(Err(error)) => error,
        Ok(Ok(id)) => anyhow::bail!("the waiter did not give up: it enqueued {id:?}"),
        Err(error) => anyhow::bail!("the holder did not commit: {error:?}"),
    };
    assert_database(
        &error,
        DatabaseErrorKind::LockTimeout,
        S::LOCK_TIMEOUT_CODE,
        true,
    );
    Ok(())
}

/// An enqueue on a connection whose session the server killed fails with a
/// retryable connection error and writes nothing.
pub async fn a_connection_the_server_killed_is_retryable<S: Server, N: TestNames>(
    db: &IsolatedDb<S, N>,
) -> anyhow::Result<()> {
    let mut conn = db.connect().await?;
    <S::Conn as AsyncConnection>::TransactionManager::begin_transaction(&mut conn).await?;
    let id = S::session_id(&mut conn).await?;
    db.execute_sql(&S::kill_session(id)).await?;

    let Err(error) = db.store().enqueue(&mut conn, task("order.created")).await else {
        anyhow::bail!("enqueued on a connection the server killed");
    };
    assert_eq!(
        error.database_kind(),
        Some(DatabaseErrorKind::Connection),
        "{error:?}"
    );
    assert!(error.is_retryable());
    assert_eq!(db.count_tasks().await?, 0);
    Ok(())
}
