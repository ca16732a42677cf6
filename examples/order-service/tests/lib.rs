//! The order service tested the way its users would: an isolated database
//! per test from `diesel-outbox-testkit`, recording handlers, no sleeps.

mod guide;
mod http;
mod mysql;
mod postgres;
