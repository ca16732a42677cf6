//! `enqueue_many` keeps a multi-row insert in the connection's statement
//! cache once it meets its length and shape a second time, for a bounded
//! number of them.

use std::sync::{Arc, Mutex};

use diesel::connection::InstrumentationEvent;
use diesel_async::{AsyncConnection, sync_connection_wrapper::SyncConnectionWrapper};
use diesel_outbox_sql::PREPARED_PER_FAMILY;
use diesel_outbox_sqlite::{
    SqliteStore,
    outbox::{Store, Task},
};
use diesel_outbox_testkit::{TestBackend, sqlite::SqliteTestDb};

type Conn = SyncConnectionWrapper<diesel::SqliteConnection>;

/// The inserts into the task table that the connection put in its cache.
#[derive(Clone, Default)]
struct Cached(Arc<Mutex<Vec<String>>>);

impl Cached {
    fn watch(&self, conn: &mut Conn) {
        let seen = self.clone();
        conn.set_instrumentation(move |event: InstrumentationEvent<'_>| {
            if let InstrumentationEvent::CacheQuery { sql, .. } = event
                && sql.starts_with("INSERT INTO outbox_tasks")
            {
                seen.0.lock().expect("lock").push(sql.to_owned());
            }
        });
    }

    fn take(&self) -> usize {
        std::mem::take(&mut *self.0.lock().expect("lock")).len()
    }
}

/// Inserts cached by one `enqueue_many` of `tasks`, in its own
/// transaction on `conn`.
async fn cached_by(
    store: &SqliteStore,
    conn: &mut Conn,
    cached: &Cached,
    tasks: Vec<Task>,
) -> anyhow::Result<usize> {
    let rows = tasks.len();
    let ids = conn
        .transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue_many(tx, tasks).await?))
        .await?;
    assert_eq!(ids.len(), rows);
    Ok(cached.take())
}

fn plain(rows: usize) -> Vec<Task> {
    (0..rows)
        .map(|n| Task::new("order.created", 1, format!("{{\"order\":{n}}}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_row_inserts_met_twice_are_cached_up_to_a_bound() -> anyhow::Result<()> {
    let db = SqliteTestDb::create("prepared_inserts").await?;
    let store = db.store();
    let mut conn = db.connect().await?;
    let cached = Cached::default();
    cached.watch(&mut conn);
    // Instrumentation sees the cache: a single row's insert goes in once.
    assert_eq!(cached_by(store, &mut conn, &cached, plain(1)).await?, 1);
    assert_eq!(cached_by(store, &mut conn, &cached, plain(1)).await?, 0);

    // Rows of one shape: one statement per length, cached when met a second
    // time and reused after (an uncached statement would never be cached).
    let lengths = 2..2 + PREPARED_PER_FAMILY;
    for rows in lengths.clone() {
        assert_eq!(cached_by(store, &mut conn, &cached, plain(rows)).await?, 0);
        assert_eq!(cached_by(store, &mut conn, &cached, plain(rows)).await?, 1);
    }
    for rows in lengths {
        assert_eq!(cached_by(store, &mut conn, &cached, plain(rows)).await?, 0);
    }
    // Past the bound, and for rows of several shapes, nothing more is kept.
    let soon = chrono::Utc::now() + chrono::Duration::hours(1);
    for _ in 0..3 {
        let unchosen = plain(2 + PREPARED_PER_FAMILY);
        assert_eq!(cached_by(store, &mut conn, &cached, unchosen).await?, 0);
        let mut mixed = plain(3);
        mixed[1] = mixed[1].clone().not_before(soon);
        assert_eq!(cached_by(store, &mut conn, &cached, mixed).await?, 0);
    }
    Ok(())
}
