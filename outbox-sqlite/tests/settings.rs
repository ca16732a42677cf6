//! Every connection the crate opens reads back the settings the
//! connection module documents: `establish`'s, the store's pool's, and a
//! pool built with `manager_config`.

use diesel::{QueryableByName, sql_types::BigInt, sql_types::Text};
use diesel_async::{
    RunQueryDsl, SimpleAsyncConnection,
    pooled_connection::{AsyncDieselConnectionManager, deadpool::Pool},
};
use diesel_outbox_sqlite::{
    AsyncSqliteConnection, BUSY_TIMEOUT, MMAP_SIZE, establish, manager_config,
};
use diesel_outbox_testkit::{TestBackend, sqlite::SqliteTestDb};

/// Whether the bundled SQLite maps files here (its limit is 0 elsewhere).
const MAPS_FILES: bool = cfg!(any(
    target_os = "linux",
    target_os = "macos",
    target_os = "windows",
    target_os = "freebsd",
    target_os = "solaris"
));

#[derive(QueryableByName)]
struct Number {
    #[diesel(sql_type = BigInt)]
    value: i64,
}

/// `PRAGMA mmap_size`'s row: the pragma has no table-valued form.
#[derive(QueryableByName)]
struct MmapSize {
    #[diesel(sql_type = BigInt)]
    mmap_size: i64,
}

#[derive(QueryableByName)]
struct Word {
    #[diesel(sql_type = Text)]
    value: String,
}

/// The one number `PRAGMA pragma` gives, in its column `column`.
async fn number(conn: &mut AsyncSqliteConnection, pragma: &str, column: &str) -> i64 {
    diesel::sql_query(format!("SELECT {column} AS value FROM pragma_{pragma}"))
        .get_result::<Number>(conn)
        .await
        .unwrap_or_else(|error| panic!("{pragma}: {error}"))
        .value
}

async fn assert_settings(conn: &mut AsyncSqliteConnection, opened_by: &str) {
    let mode = diesel::sql_query("SELECT journal_mode AS value FROM pragma_journal_mode")
        .get_result::<Word>(conn)
        .await
        .expect("journal_mode")
        .value;
    assert_eq!(mode, "wal", "{opened_by}");
    // FULL is 2.
    assert_eq!(
        number(conn, "synchronous", "synchronous").await,
        2,
        "{opened_by}"
    );
    assert_eq!(
        number(conn, "busy_timeout", "timeout").await,
        i64::try_from(BUSY_TIMEOUT.as_millis()).expect("fits"),
        "{opened_by}"
    );
    // Read back as set: where the bundled SQLite maps files at all, it
    // allows this much.
    if !MAPS_FILES {
        return;
    }
    let mmap = diesel::sql_query("PRAGMA mmap_size")
        .get_result::<MmapSize>(conn)
        .await
        .expect("mmap_size")
        .mmap_size;
    assert_eq!(mmap, i64::try_from(MMAP_SIZE).expect("fits"), "{opened_by}");
}

#[tokio::test]
async fn every_connection_has_the_documented_settings() -> anyhow::Result<()> {
    let db = SqliteTestDb::create("connection_settings").await?;
    assert_settings(&mut establish(db.url()).await?, "establish").await;
    let mut pooled = db.store().pool().get().await?;
    assert_settings(&mut pooled, "the store's pool").await;
    let manager = AsyncDieselConnectionManager::<AsyncSqliteConnection>::new_with_config(
        db.url(),
        manager_config(),
    );
    let pool = Pool::builder(manager).max_size(1).build()?;
    assert_settings(&mut *pool.get().await?, "manager_config").await;
    // The size is the bundled SQLite's limit (this holds with or without
    // the setting): asked for more, a connection keeps `MMAP_SIZE`.
    let mut conn = establish(db.url()).await?;
    conn.batch_execute(&format!("PRAGMA mmap_size = {}", MMAP_SIZE * 2))
        .await?;
    assert_settings(&mut conn, "a connection asked for twice the map").await;
    Ok(())
}
