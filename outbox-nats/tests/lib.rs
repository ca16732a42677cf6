//! JetStream publishing and consuming against a real nats-server, PostgreSQL
//! and MariaDB.

mod consume;
mod crash;
mod end_to_end;
mod publish;
mod services;
