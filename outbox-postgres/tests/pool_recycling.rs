//! The store's pool recycles connections without a round trip, yet never
//! keeps one the server closed.

use diesel::{QueryableByName, sql_types::Integer};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::Maintenance;
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb};

#[derive(QueryableByName)]
struct Pid {
    #[diesel(sql_type = Integer)]
    pid: i32,
}

/// One pooled connection, killed by the server between two uses: the store
/// answers again without a restart. Uses that meet the connection before it
/// has seen the server's goodbye fail (one or two, a retryable connection
/// error each); after that the pool drops it and opens a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_closed_is_replaced() -> anyhow::Result<()> {
    let db = PgTestDb::create("pool_recycling").await?;
    let store = db.store_with_pool(1)?;
    store.stats().await?;
    let pid = {
        let mut conn = store.pool().get().await?;
        diesel::sql_query("SELECT pg_backend_pid() AS pid")
            .get_result::<Pid>(&mut *conn)
            .await?
            .pid
    };
    let mut admin = db.connect().await?;
    diesel::sql_query("SELECT pg_terminate_backend($1)")
        .bind::<Integer, _>(pid)
        .execute(&mut admin)
        .await?;
    let mut errors = 0;
    let mut answered = false;
    for _ in 0..50 {
        match store.stats().await {
            Ok(_) => {
                answered = true;
                break;
            }
            Err(_) => errors += 1,
        }
    }
    assert!(answered, "the store never answered again");
    assert!(errors <= 3, "{errors} errors after one closed connection");
    let mut conn = store.pool().get().await?;
    let new_pid = diesel::sql_query("SELECT pg_backend_pid() AS pid")
        .get_result::<Pid>(&mut *conn)
        .await?
        .pid;
    assert_ne!(new_pid, pid, "the closed connection was kept");
    Ok(())
}
