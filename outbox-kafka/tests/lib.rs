//! The Kafka publisher and consumer against a real Kafka-protocol broker
//! (the one `cargo xtask test` starts), on PostgreSQL.

mod consume;
mod publish;
mod support;
