//! The outbox's tables in a schema of their own, next to the application's,
//! as docs/operations.md describes: migrations run with `search_path` set to
//! that schema alone; the service's connections see both schemas.

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_postgres::outbox::{Status, Store, Task};
use diesel_outbox_postgres::{PgStore, run_migrations, transaction};
use diesel_outbox_testkit::{TestBackend, handler, postgres::PgTestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_lives_in_its_own_schema() -> anyhow::Result<()> {
    let db = PgTestDb::create("own_schema").await?;
    db.revert().await?;
    db.execute_sql(
        "DROP TABLE __diesel_schema_migrations; \
         CREATE SCHEMA app; CREATE SCHEMA outbox; \
         CREATE TABLE app.orders (id BIGINT PRIMARY KEY); \
         CREATE TABLE app.__diesel_schema_migrations (version VARCHAR(50) PRIMARY KEY, \
             run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    )
    .await?;

    // The migrations, with the outbox's schema alone on the path.
    let mut conn = AsyncPgConnection::establish(db.url()).await?;
    conn.batch_execute("SET search_path = outbox").await?;
    assert!(!run_migrations(conn).await?.is_empty());

    // The service: both schemas on the path, its own first.
    let service_url = format!("{}?options=-csearch_path%3Dapp%2Coutbox", db.url());
    let (mock, handle) = handler::recording();
    let registry = diesel_outbox_postgres::outbox::Registry::builder()
        .handler("order.created", 1, mock)
        .build()?;
    let store = PgStore::connect(&service_url, 2)?;
    let worker = diesel_outbox_postgres::outbox::Worker::new(store.clone(), registry)?;
    let mut conn = AsyncPgConnection::establish(&service_url).await?;
    let id = transaction(&worker, &mut conn, async |mut tx| {
        diesel::sql_query("INSERT INTO orders (id) VALUES (42)")
            .execute(tx.conn())
            .await?;
        anyhow::Ok(tx.enqueue(Task::new("order.created", 1, "{}")).await?)
    })
    .await?;
    worker.wait_idle().await;
    assert_eq!(handle.succeeded_ids(), [id]);
    assert_eq!(store.get(id).await?.status, Status::Succeeded);

    // Everything landed where the guide says.
    assert_eq!(db.count("app.orders").await?, 1);
    assert_eq!(db.count("outbox.outbox_tasks").await?, 1);
    let versions = i64::try_from(diesel_outbox_postgres::migration_sql().len())?;
    assert_eq!(
        db.count("outbox.__diesel_schema_migrations").await?,
        versions
    );
    assert_eq!(db.count("app.__diesel_schema_migrations").await?, 0);
    Ok(())
}
