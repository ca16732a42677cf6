//! The consumer's side of every broker, written once: decode, record in the
//! inbox and apply in one transaction, commit, then acknowledge, hand back
//! or give up.
//!
//! A broker adapter (the JetStream [`InboxConsumer`], the RabbitMQ
//! consumer, the Redis Streams consumer) turns the broker's messages into a stream of [`Received`]
//! items, each of which decodes into an [`Incoming`] and knows the broker's
//! three answers ([`Acknowledge`]): acknowledge, hand back after a delay,
//! give up (copy to a dead-letter destination, then end its deliveries).
//! [`ConsumeFlow::run`] takes that stream and runs each message through
//! [`ConsumeFlow::process`], many at once, until shutdown.
//! The flow decides which answer each delivery gets:
//!
//! | the delivery | answer |
//! |---|---|
//! | the transaction committed (a new message), or the inbox has it already | acknowledge |
//! | it does not decode, or its message id cannot be stored | give up, at once |
//! | the handler failed permanently, or the store's error cannot pass by retrying | give up, at once |
//! | any other failure (handler, timeout, panic, a database error that may pass) | hand back after the retry policy's delay, until `max_deliveries`; then give up |
//!
//! The acknowledgement goes only after the commit, so a crash between the
//! two costs a redelivery, which the inbox answers as a duplicate. A message
//! whose copy to the dead-letter destination fails is handed back instead
//! of given up: it is never lost.
//!
//! [`InboxConsumer`]: https://docs.rs/diesel-outbox-nats

mod flow;
mod incoming;
pub mod metrics;
mod receive;

pub use flow::{Acknowledge, ConsumeFlow, ConsumerReport, ConsumerSettings, Outcome, Undecodable};
pub use incoming::{ConsumeHandler, Incoming};
pub use receive::{FIRST_RECEIVE_PAUSE, MAX_RECEIVE_PAUSE, Ran, Received};
