//! The scenarios' database on a private server: orders (the business rows)
//! and their `order.created` tasks, written the way a service writes them.

use std::future::Future;

use diesel_async::AsyncConnection;
use diesel_outbox_core::{Store, Task, TaskId, Worker};
use diesel_outbox_testkit::url;

use crate::raw::{Prepare, Raw};

/// The kind every scenario enqueues.
pub(crate) const KIND: &str = "order.created";

/// What an `order.created` task carries.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Payload {
    /// The order's id (the business row's key).
    pub(crate) order: i64,
    /// Whether the hang scenario's relay should hang on it.
    #[serde(default)]
    pub(crate) hang: bool,
}

/// The task of order `order`.
pub(crate) fn task(order: i64, hang: bool) -> anyhow::Result<Task> {
    Ok(Task::json(KIND, 1, &Payload { order, hang })?)
}

/// What the scenarios need of a backend beyond the benchmark's statements.
pub(crate) trait ChaosDb: Raw {
    /// The database server the backend runs on.
    type Server: super::servers::DbServer;

    /// Commits order `order` and its task through the backend's
    /// `transaction` helper, which sends the task after commit. (Not `Send`:
    /// the compiler cannot yet prove it for the helper's async closure.)
    fn place_order(
        worker: &Worker<Self::Store>,
        conn: &mut Self::Conn,
        order: i64,
    ) -> impl Future<Output = anyhow::Result<TaskId>>;

    /// [`place_order`](Self::place_order) on a connection from the worker's
    /// own pool.
    fn place_order_pooled(
        worker: &Worker<Self::Store>,
        order: i64,
    ) -> impl Future<Output = anyhow::Result<TaskId>>;

    /// Commits order `order` and its task, with ordering key `key`, through
    /// the backend's `transaction_pooled` helper on a connection of
    /// `business`'s pool (the service's own, apart from the worker's; closed
    /// at once if the future is dropped), without sending it.
    fn place_keyed_order(
        worker: &Worker<Self::Store>,
        business: &Self::Store,
        order: i64,
        key: &str,
    ) -> impl Future<Output = anyhow::Result<TaskId>> + Send;

    /// Commits `orders` and their tasks in one transaction on a connection
    /// from `store`'s pool, without sending them.
    fn enqueue_orders_pooled(
        store: &Self::Store,
        orders: &[i64],
    ) -> impl Future<Output = anyhow::Result<Vec<TaskId>>> + Send;

    /// The ids of every committed order.
    fn order_ids(&self) -> impl Future<Output = anyhow::Result<Vec<i64>>> + Send;

    /// The sessions on this database that have sat idle inside a
    /// transaction for at least `idle_for` (whole seconds), one line each:
    /// the session, how long it has been idle, when its transaction began.
    /// A session between two statements of a live transaction is idle for
    /// milliseconds; one whose caller abandoned it stays idle for good.
    fn idle_in_transaction(
        &self,
        idle_for: std::time::Duration,
    ) -> impl Future<Output = anyhow::Result<Vec<String>>> + Send;
}

/// Creates database `name` on the server at `admin_url` (whose database
/// part is replaced), applies the outbox migrations as users do, and creates
/// the orders table.
pub(crate) async fn create<B: ChaosDb>(admin_url: &str, name: &str) -> anyhow::Result<B> {
    B::attach(admin_url)
        .await?
        .execute_sql(&format!("CREATE DATABASE {name}"))
        .await?;
    let db = B::attach(&url::with_database(admin_url, name)).await?;
    db.migrate().await?;
    db.create_orders().await?;
    Ok(db)
}

/// Commits order `order` and its task in a transaction of its own on
/// `conn`, without sending it (a relay delivers it).
pub(crate) async fn enqueue_order<B: ChaosDb>(
    store: &B::Store,
    conn: &mut B::Conn,
    order: i64,
    hang: bool,
) -> anyhow::Result<TaskId> {
    let task = task(order, hang)?;
    conn.transaction::<_, anyhow::Error, _>(async |tx| {
        B::insert_order(tx, order, Prepare::Once).await?;
        Ok(store.enqueue(tx, task).await?)
    })
    .await
}

/// A line of text read back.
#[derive(diesel::QueryableByName)]
struct Line {
    #[diesel(sql_type = diesel::sql_types::Text)]
    line: String,
}

/// An order id read back.
#[derive(diesel::QueryableByName)]
struct OrderId {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    id: i64,
}

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;

/// Whether every task in `ids` has finished (succeeded or failed for good),
/// read through the public [`Store::get`].
pub(crate) async fn all_finished<S: Store>(
    store: &S,
    ids: &[TaskId],
) -> anyhow::Result<Vec<TaskId>> {
    let mut open = Vec::new();
    for id in ids {
        if store.get(*id).await?.finished_at.is_none() {
            open.push(*id);
        }
    }
    Ok(open)
}

/// Waits until every task in `ids` has finished, at most `limit`; fails
/// naming how many have not.
pub(crate) async fn wait_finished<S: Store>(
    store: &S,
    ids: &[TaskId],
    limit: std::time::Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut open = ids.to_vec();
    loop {
        open = all_finished(store, &open).await?;
        if open.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{} tasks still unfinished after {limit:?} (first: {})",
            open.len(),
            open[0]
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The ids of every `order.created` task committed.
pub(crate) async fn task_ids<B: ChaosDb>(db: &B) -> anyhow::Result<Vec<TaskId>> {
    let mut conn = db.connect().await?;
    B::task_ids(&mut conn, Some(KIND)).await
}
