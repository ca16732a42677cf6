//! The store's own pool runs its sessions at READ COMMITTED from the start,
//! so its transactions need not set it each time.

use diesel::{QueryableByName, sql_types::BigInt};
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};

#[derive(QueryableByName)]
struct Value {
    #[diesel(sql_type = BigInt)]
    v: i64,
}

/// A transaction on a pooled connection sees a row another session committed
/// after the transaction's first read: READ COMMITTED, not the server's
/// default REPEATABLE READ, which would keep showing the first read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_sessions_read_committed() -> anyhow::Result<()> {
    let db = MysqlTestDb::create("session_isolation").await?;
    db.execute_sql("CREATE TABLE probe (v BIGINT NOT NULL)")
        .await?;
    db.execute_sql("INSERT INTO probe VALUES (1)").await?;
    let mut pooled = db.store().pool().get().await?;
    let mut other = db.connect().await?;
    let seen = pooled
        .transaction::<_, anyhow::Error, _>(async |tx| {
            let first = diesel::sql_query("SELECT v FROM probe")
                .get_result::<Value>(tx)
                .await?
                .v;
            other.batch_execute("UPDATE probe SET v = 2").await?;
            let second = diesel::sql_query("SELECT v FROM probe")
                .get_result::<Value>(tx)
                .await?
                .v;
            Ok((first, second))
        })
        .await?;
    assert_eq!(seen, (1, 2));
    Ok(())
}
