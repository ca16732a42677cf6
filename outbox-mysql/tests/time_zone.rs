//! Instants are correct whatever `time_zone` a session has set.

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use diesel_async::{
    AsyncConnection, AsyncMysqlConnection, SimpleAsyncConnection,
    pooled_connection::{AsyncDieselConnectionManager, ManagerConfig, deadpool::Pool},
};
use diesel_outbox_mysql::{
    MysqlStore,
    outbox::{Error, Registry, Status, Store, Task, TaskId, Worker},
};
use diesel_outbox_testkit::{TestBackend, handler, mysql::MysqlTestDb};
use futures_util::FutureExt;

const ZONES: [&str; 3] = ["+05:30", "SYSTEM", "-08:00"];

fn instant(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, us: u32) -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(y, mo, d)
        .and_then(|date| date.and_hms_micro_opt(h, mi, s, us))
        .expect("a valid instant")
        .and_utc()
}

async fn connect_in_zone(db: &MysqlTestDb, zone: &str) -> AsyncMysqlConnection {
    let mut conn = db.connect().await.expect("connect");
    conn.batch_execute(&format!("SET time_zone = '{zone}'"))
        .await
        .expect("set time_zone");
    conn
}

async fn enqueue(conn: &mut AsyncMysqlConnection, store: &MysqlStore, task: Task) -> TaskId {
    conn.transaction::<_, anyhow::Error, _>(async |tx| Ok(store.enqueue(tx, task).await?))
        .await
        .expect("enqueue")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instants_round_trip_to_the_microsecond_in_any_session_zone() {
    let db = MysqlTestDb::create("tz_round_trip")
        .await
        .expect("test database");
    let expires = instant(2031, 5, 17, 12, 34, 56, 123_456);
    let not_before = instant(2040, 2, 29, 23, 59, 59, 999_999); // past TIMESTAMP's 2038 end
    for zone in ZONES {
        let mut conn = connect_in_zone(&db, zone).await;
        let task = Task::new("order.created", 1, "{}")
            .expires_at(expires)
            .not_before(not_before);
        let id = enqueue(&mut conn, db.store(), task).await;
        let record = db.store().get(id).await.expect("get");
        assert_eq!(
            record.task.expires_at,
            Some(expires),
            "expires_at in zone {zone}"
        );
        assert_eq!(
            record.next_attempt_at, not_before,
            "not_before in zone {zone}"
        );
        // The database's own times are UTC too: created "now", not hours off.
        let skew = (record.created_at - Utc::now()).abs();
        assert!(
            skew < TimeDelta::minutes(1),
            "created_at off by {skew} in zone {zone}"
        );
    }
}

/// A store whose own sessions run in `zone`.
fn store_in_zone(db: &MysqlTestDb, zone: &'static str) -> MysqlStore {
    let mut config = ManagerConfig::<AsyncMysqlConnection>::default();
    config.custom_setup = Box::new(move |url| {
        async move {
            let mut conn = AsyncMysqlConnection::establish(url).await?;
            conn.batch_execute(&format!("SET time_zone = '{zone}'"))
                .await
                .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
            Ok(conn)
        }
        .boxed()
    });
    let manager = AsyncDieselConnectionManager::new_with_config(db.url(), config);
    MysqlStore::new(Pool::builder(manager).max_size(2).build().expect("pool"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_is_decided_on_the_right_side_of_the_boundary_in_any_zone() {
    let db = MysqlTestDb::create("tz_expiry")
        .await
        .expect("test database");
    for zone in ZONES {
        // Both the enqueuing session and the store's own sessions use `zone`.
        let store = store_in_zone(&db, zone);
        let (mock, handle) = handler::recording();
        let registry = Registry::builder()
            .handler("order.created", 1, mock)
            .build()
            .expect("registry");
        let worker = Worker::new(store.clone(), registry).expect("worker");
        let mut conn = connect_in_zone(&db, zone).await;
        let now = Utc::now();
        let just_expired = enqueue(
            &mut conn,
            &store,
            Task::new("order.created", 1, "{}").expires_at(now - TimeDelta::milliseconds(500)),
        )
        .await;
        let about_to_expire = enqueue(
            &mut conn,
            &store,
            Task::new("order.created", 1, "{}").expires_at(now + TimeDelta::seconds(30)),
        )
        .await;
        let sent = worker.send(about_to_expire).await;
        assert!(
            sent.is_ok(),
            "a task 30 s before expiry was refused in zone {zone}: {sent:?}"
        );
        let expired = worker.send(just_expired).await;
        assert!(
            matches!(expired, Err(Error::Expired(_))),
            "a task 0.5 s past expiry was sent in zone {zone}: {expired:?}"
        );
        let record = store.get(just_expired).await.expect("get");
        assert_eq!(record.status, Status::Failed);
        assert_eq!(handle.succeeded_ids(), [about_to_expire]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instants_the_column_cannot_hold_are_refused_naming_the_field() {
    let db = MysqlTestDb::create("tz_range")
        .await
        .expect("test database");
    let mut conn = db.connect().await.expect("connect");
    let too_late = instant(9999, 12, 31, 23, 59, 59, 999_999) + TimeDelta::microseconds(1);
    for (field, task) in [
        ("expires_at", Task::new("k", 1, "{}").expires_at(too_late)),
        (
            "not_before",
            Task::new("k", 1, "{}").not_before(instant(999, 12, 31, 0, 0, 0, 0)),
        ),
    ] {
        let result = conn
            .transaction::<_, anyhow::Error, _>(async |tx| Ok(db.store().enqueue(tx, task).await?))
            .await;
        let error = result.expect_err("out of range");
        assert_eq!(
            error.downcast_ref::<Error>().and_then(Error::field),
            Some(field)
        );
    }
    assert_eq!(db.count_tasks().await.expect("count"), 0);
}
