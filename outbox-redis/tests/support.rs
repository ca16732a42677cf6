//! What the tests share: a worker on a test database, enqueueing.

use diesel_async::AsyncConnection;
use diesel_outbox_postgres::{
    PgStore,
    outbox::{Registry, RegistryBuilder, RetryPolicy, Store, Task, TaskId, Worker, WorkerConfig},
};
use diesel_outbox_testkit::{TestBackend, postgres::PgTestDb};

/// A worker whose registry `register` fills, retrying at once.
pub(crate) fn worker(
    db: &PgTestDb,
    register: impl FnOnce(RegistryBuilder) -> RegistryBuilder,
) -> Worker<PgStore> {
    let registry = register(Registry::builder()).build().expect("registry");
    let config = WorkerConfig::default().retry(
        RetryPolicy::new(std::time::Duration::ZERO, std::time::Duration::ZERO, 0.0)
            .expect("policy"),
    );
    Worker::with_config(db.store().clone(), registry, config).expect("worker")
}

/// Enqueues `task` in a transaction of its own.
pub(crate) async fn enqueue(db: &PgTestDb, task: Task) -> TaskId {
    let mut conn = db.connect().await.expect("connect");
    conn.transaction::<_, anyhow::Error, _>(async |tx| Ok(db.store().enqueue(tx, task).await?))
        .await
        .expect("enqueue")
}

/// A URL where nothing listens.
pub(crate) fn closed_url() -> String {
    let port = diesel_outbox_testkit::private_server::free_port().expect("a free port");
    format!("redis://127.0.0.1:{port}")
}
