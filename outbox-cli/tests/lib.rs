//! The `outbox` binary as a user runs it, against real PostgreSQL and
//! MariaDB databases (one per test), and its dashboard in a real browser.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    clippy::cast_possible_truncation
)]

mod bulk;
mod commands;
mod dashboard;
mod incident;
mod support;
