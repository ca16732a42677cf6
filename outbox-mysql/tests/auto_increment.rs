//! `enqueue_many` returns the right ids whatever step and offset the
//! session's auto-increment uses (Galera and other multi-primary setups set
//! `auto_increment_increment` to the node count).

use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use diesel_outbox_mysql::outbox::{Store, Task};
use diesel_outbox_testkit::{TestBackend, mysql::MysqlTestDb};

fn task(n: usize) -> Task {
    Task::new("order.created", 1, format!("{{\"order\":{n}}}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_many_ids_follow_the_session_auto_increment() {
    let db = MysqlTestDb::create("auto_increment_step")
        .await
        .expect("test database");
    for (increment, offset) in [(2, 1), (3, 2), (7, 4)] {
        let mut conn = db.connect().await.expect("connect");
        conn.batch_execute(&format!(
            "SET SESSION auto_increment_increment = {increment}, \
             auto_increment_offset = {offset}"
        ))
        .await
        .expect("set the auto-increment step");
        // A keyed task in the middle splits the batch into two multi-row runs.
        let tasks: Vec<Task> = (0..7)
            .map(|n| match n {
                3 => task(n).dedup_key(format!("key-{increment}")),
                _ => task(n),
            })
            .collect();
        let ids = conn
            .transaction::<_, anyhow::Error, _>(async |tx| {
                Ok(db.store().enqueue_many(tx, tasks.clone()).await?)
            })
            .await
            .expect("enqueue_many");
        let case = format!("step {increment}, offset {offset}");
        for (n, (id, task)) in ids.iter().zip(&tasks).enumerate() {
            let record = db
                .store()
                .get(*id)
                .await
                .unwrap_or_else(|error| panic!("{case}: id {id} of position {n}: {error}"));
            assert_eq!(
                record.task.payload, task.payload,
                "{case}: id {id} of position {n} is another task's"
            );
            assert_eq!(
                record.task.dedup_key, task.dedup_key,
                "{case}: position {n}"
            );
        }
        // Not vacuous: the session's step reached the server.
        assert_eq!(ids[1].get() - ids[0].get(), increment, "{case}");
    }
}
