//! Asynq interop: tasks written in Asynq's own layout, so that an
//! unmodified Asynq server (Go) runs them.

mod envelope;
pub mod layout;
mod publisher;
mod task_message;

pub use envelope::Envelope;
pub use publisher::{
    AsynqPublisher, AsynqPublisherBuilder, DEFAULT_RETRY, DEFAULT_TIMEOUT, Payload,
};
pub use task_message::TaskMessage;
