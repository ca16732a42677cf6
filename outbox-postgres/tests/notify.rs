//! LISTEN/NOTIFY: a relay-only setup delivers within milliseconds.

use std::time::{Duration, Instant};

use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use diesel_outbox_postgres::{
    Names, PgStore,
    outbox::{Registry, Relay, RelayConfig, RelayReport, Store, Task, Worker},
};
use diesel_outbox_testkit::{
    TestBackend,
    handler::{self, HandlerHandle},
    postgres::PgTestDb,
    relay_claims::ClaimWatch,
};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_wakes_the_relay_long_before_its_poll() {
    let db = PgTestDb::create("notify_latency")
        .await
        .expect("test database");
    let relay = relay_with_notify(&db).await;

    // One task at a time, each committed once the relay has gone to sleep
    // for its 10 s poll: after its first claim, then after the two claims
    // each commit brings (the one the wake-up starts, and the one after the
    // delivery's result is written). Only NOTIFY can bring them in quickly.
    let mut conn = db.connect().await.expect("connect");
    let mut latencies = Vec::new();
    let (mut since, mut claims) = (relay.started, 1);
    for n in 0..20 {
        relay.claims_returned(since, claims).await;
        (since, claims) = (Instant::now(), 2);
        let committed = conn
            .transaction::<_, anyhow::Error, _>(async |tx| {
                Ok(relay
                    .store
                    .enqueue(tx, Task::new("order.created", 1, format!("{n}")))
                    .await?)
            })
            .await
            .expect("enqueue");
        let at = Instant::now();
        tokio::time::timeout(
            Duration::from_secs(2),
            relay.handle.wait_for_successes(n + 1),
        )
        .await
        .unwrap_or_else(|_| panic!("task {n} waited for the 10 s poll"));
        latencies.push(at.elapsed());
        assert_eq!(relay.handle.succeeded_ids()[n], committed);
    }
    relay.stop().await;
    latencies.sort();
    eprintln!(
        "NOTIFY commit-to-handler: median {:?}, max {:?}",
        latencies[10], latencies[19]
    );
}

/// Tasks that go in by other statements than the plain insert (an
/// ordering key, a dedup key, a batch) wake the relay too: each committed
/// while the relay sleeps through its 10 s poll is delivered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_of_enqueueing_wakes_the_relay() {
    let db = PgTestDb::create("notify_every_insert")
        .await
        .expect("test database");
    let relay = relay_with_notify(&db).await;
    let mut conn = db.connect().await.expect("connect");
    let batches: [Vec<Task>; 3] = [
        vec![Task::new("order.created", 1, "keyed").ordering_key("customer-1")],
        vec![Task::new("order.created", 1, "deduplicated").dedup_key("order-1")],
        (0..3)
            .map(|n| Task::new("order.created", 1, format!("batch-{n}")))
            .collect(),
    ];
    let (mut delivered, mut since, mut claims) = (0, relay.started, 1);
    for tasks in batches {
        // After the first claim, then after the wake-up's claim and the
        // one after the results are written.
        relay.claims_returned(since, claims).await;
        (since, claims) = (Instant::now(), 2);
        let count = tasks.len();
        conn.transaction::<_, anyhow::Error, _>(async |tx| {
            Ok(relay.store.enqueue_many(tx, tasks).await?)
        })
        .await
        .expect("enqueue");
        delivered += count;
        tokio::time::timeout(
            Duration::from_secs(2),
            relay.handle.wait_for_successes(delivered),
        )
        .await
        .unwrap_or_else(|_| panic!("task {delivered} waited for the 10 s poll"));
    }
    relay.stop().await;
}

/// A store with a table prefix notifies on its own tasks table's channel,
/// and its relay listens there: a task committed while that relay sleeps
/// through its 10 s poll is delivered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefixed_outbox_wakes_its_own_relay() {
    let names = Names::default()
        .with_table_prefix("billing_")
        .expect("prefix");
    wakes_its_own_relay("notify_prefixed", names).await;
}

/// The same for an outbox in a schema of its own, whose channel holds the
/// quoted schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_in_a_schema_wakes_its_own_relay() {
    let names = Names::default().with_schema("billing").expect("schema");
    wakes_its_own_relay("notify_schema", names).await;
}

/// A task enqueued on the outbox called `names`, committed while its relay
/// sleeps through a 10 s poll, is delivered within 2 s.
async fn wakes_its_own_relay(test: &str, names: Names) {
    let db = PgTestDb::create(test).await.expect("test database");
    let billing = db.another_outbox(&names).await.expect("billing outbox");
    let relay = relay_with_notify_on(billing).await;
    let mut conn = db.connect().await.expect("connect");
    relay.claims_returned(relay.started, 1).await;
    let committed = conn
        .transaction::<_, anyhow::Error, _>(async |tx| {
            Ok(relay
                .store
                .enqueue(tx, Task::new("order.created", 1, "{}"))
                .await?)
        })
        .await
        .expect("enqueue");
    tokio::time::timeout(Duration::from_secs(2), relay.handle.wait_for_successes(1))
        .await
        .unwrap_or_else(|_| panic!("the task of {names:?} waited for the 10 s poll"));
    assert_eq!(relay.handle.succeeded_ids(), [committed]);
    relay.stop().await;
}

#[derive(QueryableByName)]
struct Listener {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pid: i32,
}

/// The pid of the session listening for the relay other than `not`, once
/// there is one, at most `limit`.
async fn listener(conn: &mut AsyncPgConnection, not: i32, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let found: Vec<Listener> = diesel::sql_query(
            "SELECT pid FROM pg_stat_activity
              WHERE datname = current_database() AND query = 'LISTEN outbox_tasks'
                AND pid <> $1",
        )
        .bind::<diesel::sql_types::Integer, _>(not)
        .load(conn)
        .await
        .expect("pg_stat_activity");
        if let Some(row) = found.into_iter().next() {
            return Some(row.pid);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// The server ends the relay's LISTEN session (as when a primary goes away
/// and a standby is promoted): the relay listens again at once, not only
/// after its purge interval, and wake-ups bring tasks in long before its
/// poll again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_session_the_server_ended_is_replaced_at_once() {
    let db = PgTestDb::create("notify_relisten")
        .await
        .expect("test database");
    // The purge interval (60 s) is far beyond the waits below.
    let relay = relay_with_notify(&db).await;

    let mut conn = db.connect().await.expect("connect");
    // Its first claim is behind it, so each counted below is one it makes
    // after losing its session.
    relay.claims_returned(relay.started, 1).await;
    let first = listener(&mut conn, 0, Duration::from_secs(5))
        .await
        .expect("the relay never listened");
    let terminated = Instant::now();
    diesel::sql_query("SELECT pg_terminate_backend($1)")
        .bind::<diesel::sql_types::Integer, _>(first)
        .execute(&mut conn)
        .await
        .expect("terminate the LISTEN session");
    let second = listener(&mut conn, first, Duration::from_secs(5)).await;
    assert!(
        second.is_some(),
        "the relay did not listen again within 5 s of losing its session"
    );

    // Two claims follow: one when its wake-up stream ends, one once it
    // listens again (for what was committed while nothing listened).
    relay.claims_returned(terminated, 2).await;
    let committed = conn
        .transaction::<_, anyhow::Error, _>(async |tx| {
            Ok(relay
                .store
                .enqueue(tx, Task::new("order.created", 1, "after".to_owned()))
                .await?)
        })
        .await
        .expect("enqueue");
    tokio::time::timeout(Duration::from_secs(2), relay.handle.wait_for_successes(1))
        .await
        .expect("the task waited for the 10 s poll: no wake-up after the session ended");
    assert_eq!(relay.handle.succeeded_ids()[0], committed);
    relay.stop().await;
}

/// A server that ends every LISTEN session as soon as it starts is asked
/// again at most once a second, not in a tight loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_session_ended_again_and_again_is_not_replaced_in_a_loop() {
    let db = PgTestDb::create("notify_relisten_spacing")
        .await
        .expect("test database");
    let relay = relay_with_notify(&db).await;

    let mut conn = db.connect().await.expect("connect");
    let (mut sessions, mut last) = (0, 0);
    let until = Instant::now() + Duration::from_secs(3);
    while let Some(pid) = listener(
        &mut conn,
        last,
        until.saturating_duration_since(Instant::now()),
    )
    .await
    {
        sessions += 1;
        last = pid;
        diesel::sql_query("SELECT pg_terminate_backend($1)")
            .bind::<diesel::sql_types::Integer, _>(pid)
            .execute(&mut conn)
            .await
            .expect("terminate the LISTEN session");
    }
    // The first session, then at most one a second over the 3 s.
    assert!(
        (2..=5).contains(&sessions),
        "{sessions} LISTEN sessions in 3 s while the server ended each at once"
    );
    relay.stop().await;
}

/// A relay with NOTIFY on and a 10 s poll, recording `order.created`.
struct NotifiedRelay {
    store: PgStore,
    handle: HandlerHandle,
    /// When the relay was started.
    started: Instant,
    /// The relay's claims.
    claims: ClaimWatch,
    shutdown: CancellationToken,
    running: tokio::task::JoinHandle<RelayReport>,
}

impl NotifiedRelay {
    /// Waits until `count` claims that started after `since` have come
    /// back and none runs; fails after 15 s (a relay that ended claims
    /// nothing more).
    async fn claims_returned(&self, since: Instant, count: usize) {
        tokio::time::timeout(
            Duration::from_secs(15),
            self.claims.returned_since(since, count),
        )
        .await
        .unwrap_or_else(|_| panic!("the relay did not come back from {count} claims in 15 s"));
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.running.await.expect("relay");
    }
}

/// Starts a [`NotifiedRelay`] on `db`.
async fn relay_with_notify(db: &PgTestDb) -> NotifiedRelay {
    relay_with_notify_on(db.store().clone()).await
}

/// Starts a [`NotifiedRelay`] on `store`.
async fn relay_with_notify_on(store: PgStore) -> NotifiedRelay {
    let store: PgStore = store.with_notify();
    let (mock, handle) = handler::recording();
    let registry = Registry::builder()
        .handler("order.created", 1, mock)
        .build()
        .expect("registry");
    let worker = Worker::new(store.clone(), registry).expect("worker");
    let config = RelayConfig::default().poll_interval(Duration::from_secs(10));
    let relay = Relay::new(worker, config).expect("relay");
    let shutdown = CancellationToken::new();
    let (claims, started) = (ClaimWatch::new(), Instant::now());
    let running = tokio::spawn(claims.watching({
        let shutdown = shutdown.clone();
        async move { relay.run(shutdown).await }
    }));
    NotifiedRelay {
        store,
        handle,
        started,
        claims,
        shutdown,
        running,
    }
}
