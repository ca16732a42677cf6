//! What users and the outbox's own tests test with.
//!
//! - [`handler`]: scriptable handler doubles (record, fail, block, panic) with
//!   signals to wait on instead of sleeping.
//! - [`TestBackend`]: an isolated, migrated database per test, dropped after a
//!   passing test and kept after a failing one; [`postgres::PgTestDb`] with
//!   the `postgres` feature, [`mysql::MysqlTestDb`] with the `mysql` feature,
//!   [`sqlite::SqliteTestDb`] (a temporary file, no server) with the
//!   `sqlite` feature.
//! - [`assert`](mod@assert): "this kind was enqueued", "these tasks were delivered".
//! - [`metrics`]: the outbox's metrics, captured for assertions.
//! - `traces` (with the `opentelemetry` feature): the outbox's spans,
//!   captured as OpenTelemetry spans, with the W3C propagator installed.
//! - [`relay_claims`]: when a relay's claims start and come back, to commit
//!   while it sleeps until its poll without sleeping in the test.
//! - [`backlog`]: table shapes a claim must walk past (waiting, blocked and
//!   finished rows), filled in bulk.
//! - [`conformance`]: one suite of scenarios, written once and generic over
//!   the backend, that every store must pass; [`conformance_tests!`] expands
//!   it into `#[tokio::test]`s.
//! - `kafka` (with the `kafka` feature): a topic per test on the broker
//!   `cargo xtask test` starts, records read back and written raw.
//!
//! Servers come from `OUTBOX_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and `OUTBOX_MYSQL_URL` (default
//! `mysql://root@127.0.0.1:3306/test`). A test whose server is down
//! fails with the URL and the command that starts it; it never skips.
//! SQLite needs no server: its test databases are files in
//! `OUTBOX_SQLITE_DIR` (default: the system's temporary directory).
//!
//! ```
//! use diesel_outbox_core::{Delivery, Handler, Task, TaskId};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let (handler, handle) = diesel_outbox_testkit::handler::recording();
//! handler.handle(Delivery::new(TaskId::new(1), 1, Task::new("order.created", 1, "{}"))).await.ok();
//! assert_eq!(handle.succeeded_ids(), [TaskId::new(1)]);
//! # }
//! ```

pub mod assert;
mod backend;
pub mod backlog;
pub mod conformance;
mod drop_database;
pub mod handler;
pub mod isolated;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod metrics;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod private_server;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "redis")]
pub mod redis;
pub mod relay_claims;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod test_names;
#[cfg(feature = "opentelemetry")]
pub mod traces;
pub mod url;
pub mod wait;

pub use backend::TestBackend;
pub use test_names::{
    DefaultNames, SchemaTenantNames, TENANT_PREFIX, TENANT_SCHEMA, TenantNames, TestNames,
};

/// An `id` row.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[derive(Debug, diesel::QueryableByName)]
pub(crate) struct IdRow {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub(crate) id: i64,
}

/// A `COUNT(*) AS n` row.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[derive(Debug, diesel::QueryableByName)]
pub(crate) struct Count {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub(crate) n: i64,
}
