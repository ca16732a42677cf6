//! The crate's error: a setting that cannot work, or Redis failing.

/// What went wrong building or running a publisher or a consumer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisError {
    /// A setting that can never work, named.
    #[error("{field}: {reason}")]
    Config {
        /// The setting (`routes`, `url`, `stream`, ...).
        field: &'static str,
        /// Why it cannot work.
        reason: String,
    },
    /// Redis refused a command or could not be reached.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}
