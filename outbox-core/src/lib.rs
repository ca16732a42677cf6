//! The backend-free core of a transactional outbox.
//!
//! Record a message in the same database transaction as the business data,
//! send it right after commit, and never lose it: this crate holds the parts
//! every backend shares. Users normally depend on a backend crate
//! ([`diesel-outbox-postgres`](https://docs.rs/diesel-outbox-postgres),
//! [`diesel-outbox-mysql`](https://docs.rs/diesel-outbox-mysql) for MySQL and
//! MariaDB, or [`diesel-outbox-sqlite`](https://docs.rs/diesel-outbox-sqlite)),
//! which re-exports everything here as `outbox`. The guide is in the
//! repository's [docs](https://github.com/outbox-rs/outbox/blob/main/docs/README.md).
//!
//! - [`Task`] is what you enqueue; [`Record`] is what the table holds.
//! - [`transition`] holds the state machine as pure functions.
//! - [`Handler`]s are registered per `(kind, version)` in a [`Registry`];
//!   a [`BatchHandler`] takes the deliveries of one claim in one call.
//! - A [`Worker`] sends one task right after commit ([`Worker::send`],
//!   [`Worker::send_async`]) and runs compensation rounds
//!   ([`Worker::retry_pending`]) over a [`Store`].
//! - [`telemetry`] describes the metrics and spans; with the `opentelemetry`
//!   feature, a handler's spans join the trace that enqueued its task.
//! - On the consumer's side, an [`Inbox`] records each message id in the
//!   consumer's transaction, so its effect applies once; [`consume`] is the
//!   flow every broker's consumer runs each delivery through.
//!
//! ```
//! use diesel_outbox_core::{handler_fn, Delivery, HandlerError, Registry, Task};
//!
//! // What the order service enqueues inside its transaction...
//! let task = Task::json("order.created", 1, &serde_json::json!({ "id": 42 }))?
//!     .header("correlation-id", "req-7f3a")
//!     .ordering_key("customer-9");
//! task.validate()?;
//!
//! // ...and what delivers it after commit.
//! let registry = Registry::builder()
//!     .handler("order.created", 1, handler_fn(|delivery: Delivery| async move {
//!         let order: serde_json::Value = delivery.json()?;
//!         if order["id"].is_null() {
//!             return Err(HandlerError::permanent(anyhow::anyhow!("order without id")));
//!         }
//!         Ok(())
//!     }))
//!     .build()?;
//! assert_eq!(registry.len(), 1);
//! # Ok::<(), diesel_outbox_core::Error>(())
//! ```

mod activity;
mod attempt;
mod batch_handler;
mod claimed;
mod config;
pub mod consume;
mod db_error;
mod delivery;
mod error;
mod failure;
mod failure_groups;
mod handler;
mod id;
pub mod inbox;
pub mod limits;
mod listing;
mod maintenance;
mod record;
mod registry;
mod relay;
mod relays;
mod results;
mod retry;
mod round;
mod status;
mod store;
mod task;
pub mod telemetry;
pub mod transition;
mod tx;
mod unit;
pub mod wire;
mod worker;

pub use async_trait::async_trait;
pub use batch_handler::{BatchHandler, BatchHandlerFn, Handling, batch_handler_fn};
pub use claimed::{ClaimedTask, StoredClaim};
pub use config::WorkerConfig;
pub use db_error::DatabaseErrorKind;
pub use delivery::Delivery;
pub use error::{BoxError, Error, Result};
pub use failure::OnFailed;
pub use failure_groups::{FailureGroup, UNREADABLE, error_class, failure_groups};
pub use handler::{Handler, HandlerError, HandlerFn, HandlerKey, handler_fn};
pub use id::{OutboxId, TaskId};
pub use inbox::{Inbox, Receipt};
pub use listing::{Order, Page, PageRequest, TaskFilter};
pub use maintenance::{Ages, Maintenance, Stats, Wakeups};
pub use record::{Lease, Listed, Record, StoredRow, UnreadableRow};
pub use registry::{Registry, RegistryBuilder};
pub use relay::{Relay, RelayConfig, RelayReport};
pub use relays::{BEAT_INTERVAL, BEAT_TTL, Heartbeat, RelaySeen};
pub use results::WriteReport;
pub use retry::RetryPolicy;
pub use round::RoundReport;
pub use status::{Status, UnknownStatus};
pub use store::{BatchRequest, ClaimOutcome, LeaseRequest, Rescued, Store};
pub use task::{Headers, Task};
pub use tokio_util::sync::CancellationToken;
pub use tx::{Tx, TxBody};
pub use worker::Worker;

/// The crate's README, whose examples compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
