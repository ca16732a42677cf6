//! Assertions about what a test enqueued and what was delivered.
//!
//! ```no_run
//! use diesel_outbox_testkit::{assert, handler, postgres::PgTestDb, TestBackend};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let db = PgTestDb::create("my_test").await?;
//! // ... the code under test places an order ...
//! let tasks = assert::assert_enqueued(&db, "order.created", 1).await;
//! assert_eq!(tasks[0].task.payload, br#"{"order":42}"#);
//!
//! let (mock, handle) = handler::recording();
//! // ... the worker sends them through `mock` ...
//! handle.wait_for_successes(1).await;
//! assert::assert_delivered(&handle, &[tasks[0].id]);
//! # Ok(())
//! # }
//! ```

use diesel_outbox_core::{Record, Store, TaskId};

use crate::{TestBackend, handler::HandlerHandle};

/// The committed tasks of `kind` (every status), in id order.
pub async fn enqueued<B: TestBackend>(db: &B, kind: &str) -> anyhow::Result<Vec<Record>> {
    let mut conn = db.connect().await?;
    let ids = B::task_ids(&mut conn, Some(kind)).await?;
    let mut records = Vec::with_capacity(ids.len());
    for id in ids {
        records.push(db.store().get(id).await?);
    }
    Ok(records)
}

/// The tasks of `kind` visible on `conn`: inside an open transaction, that
/// includes what this transaction enqueued and has not committed yet.
pub async fn enqueued_in<B: TestBackend>(
    conn: &mut B::Conn,
    kind: &str,
) -> anyhow::Result<Vec<TaskId>> {
    B::task_ids(conn, Some(kind)).await
}

/// Asserts that exactly `expected` committed tasks of `kind` exist and
/// returns them.
///
/// # Panics
///
/// When the count differs (the message lists every kind found), or the
/// database cannot be read.
pub async fn assert_enqueued<B: TestBackend>(db: &B, kind: &str, expected: usize) -> Vec<Record> {
    let found = match enqueued(db, kind).await {
        Ok(found) => found,
        Err(error) => panic!("could not read the enqueued tasks: {error:#}"),
    };
    if found.len() != expected {
        let all = match db.connect().await {
            Ok(mut conn) => B::task_ids(&mut conn, None)
                .await
                .map(|ids| ids.len())
                .unwrap_or(0),
            Err(_) => 0,
        };
        panic!(
            "expected {expected} task(s) of kind `{kind}`, found {} (and {all} task(s) of any kind)",
            found.len()
        );
    }
    found
}

/// Asserts that the handler behind `handle` delivered every task of `ids`.
///
/// # Panics
///
/// Naming the tasks that were not delivered.
pub fn assert_delivered(handle: &HandlerHandle, ids: &[TaskId]) {
    let delivered = handle.succeeded_ids();
    let missing: Vec<TaskId> = ids
        .iter()
        .copied()
        .filter(|id| !delivered.contains(id))
        .collect();
    assert!(
        missing.is_empty(),
        "tasks {missing:?} were not delivered (delivered: {delivered:?})"
    );
}
