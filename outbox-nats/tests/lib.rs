//! JetStream publishing against a real nats-server and PostgreSQL.

mod crash;
mod publish;
