//! The embedded migrations: idempotent, reversible, any runtime flavour.

use diesel::{QueryableByName, sql_types::BigInt};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use outbox_postgres::{revert_migrations, run_migrations};
use outbox_testkit::{TestBackend, postgres::PgTestDb};

#[derive(QueryableByName)]
struct Tables {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn outbox_tables(db: &PgTestDb) -> i64 {
    let mut conn = db.connect().await.expect("connect");
    diesel::sql_query("SELECT COUNT(*) AS n FROM pg_tables WHERE tablename = 'outbox_tasks'")
        .get_result::<Tables>(&mut conn)
        .await
        .expect("count tables")
        .n
}

async fn connect(db: &PgTestDb) -> AsyncPgConnection {
    AsyncPgConnection::establish(db.url())
        .await
        .expect("connect")
}

// The default `#[tokio::test]` runtime is current-thread: migrations must
// work there too (diesel's harness alone would panic in `block_in_place`).
#[tokio::test]
async fn migrations_are_idempotent_and_reversible_on_a_current_thread_runtime() {
    let db = PgTestDb::create("migrations_cycle")
        .await
        .expect("test database");
    assert_eq!(outbox_tables(&db).await, 1);
    assert!(
        run_migrations(connect(&db).await)
            .await
            .expect("rerun")
            .is_empty()
    );

    let reverted = revert_migrations(connect(&db).await).await.expect("revert");
    assert_eq!(reverted.len(), 1);
    assert_eq!(outbox_tables(&db).await, 0);

    let applied = run_migrations(connect(&db).await).await.expect("apply");
    assert_eq!(applied, reverted);
    assert_eq!(outbox_tables(&db).await, 1);
}
