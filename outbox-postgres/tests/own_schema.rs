//! The outbox's tables in a schema of their own, next to the application's,
//! as docs/operations.md describes: `Names::with_schema` for the migrations
//! and the store, and connections that need no `search_path` of their own.

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use diesel_outbox_postgres::outbox::{Status, Store, Task};
use diesel_outbox_postgres::{Names, PgStore, run_migrations_named, transaction};
use diesel_outbox_testkit::{TestBackend, handler, postgres::PgTestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_lives_in_its_own_schema() -> anyhow::Result<()> {
    let db = PgTestDb::create("own_schema").await?;
    db.revert().await?;
    db.execute_sql("CREATE TABLE orders (id BIGINT PRIMARY KEY)")
        .await?;

    // The migrations create the schema and the outbox's tables in it.
    let names = Names::default().with_schema("outbox")?;
    let conn = AsyncPgConnection::establish(db.url()).await?;
    assert!(!run_migrations_named(conn, &names).await?.is_empty());

    // The service, on connections as they come: the order in its own
    // table, the task in the outbox's schema, in one transaction.
    let (mock, handle) = handler::recording();
    let registry = diesel_outbox_postgres::outbox::Registry::builder()
        .handler("order.created", 1, mock)
        .build()?;
    let store = PgStore::connect(db.url(), 2)?.with_names(names)?;
    let worker = diesel_outbox_postgres::outbox::Worker::new(store.clone(), registry)?;
    let mut conn = AsyncPgConnection::establish(db.url()).await?;
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
    assert_eq!(db.count("public.orders").await?, 1);
    assert_eq!(db.count("outbox.outbox_tasks").await?, 1);
    assert!(
        db.count("public.outbox_tasks").await.is_err(),
        "the reverted default outbox is back"
    );
    let versions = i64::try_from(diesel_outbox_postgres::migration_sql().len())?;
    assert_eq!(
        db.count("__diesel_schema_migrations WHERE version LIKE '%outbox+'")
            .await?,
        versions
    );
    Ok(())
}
