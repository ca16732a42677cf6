//! The Redis Streams publisher and consumer and the Asynq publisher
//! against a real Redis.

mod asynq;
mod restart;
mod streams_consume;
mod streams_publish;
mod support;
