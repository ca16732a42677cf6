//! The RabbitMQ publisher and inbox consumer against a real broker.

mod consume;
mod publish;
