//! What the project's tools share: the order workload each backend runs and
//! the hand-written SQL the library is measured against ([`raw`]), the
//! statistics their reports print ([`stats`]), and their `--backend`
//! ([`backend`]).
//!
//! The programs are `src/bin/outbox-demo`, `src/bin/outbox-bench` and
//! `src/bin/outbox-chaos`, run through `cargo xtask demo`, `bench` and
//! `chaos`; each is built with the backends its command line chooses
//! (features `postgres`, `mysql`, `sqlite`, `nats`), so it compiles only
//! what it runs.

pub mod backend;
pub mod raw;
pub mod stats;

/// The workspace README's example, compiled as a doctest.
#[cfg(all(doctest, feature = "postgres"))]
#[doc = include_str!("../../README.md")]
pub struct WorkspaceReadmeDoctests;
