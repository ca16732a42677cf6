//! Where Asynq keeps a queue's tasks in Redis: the key names its server
//! reads.

/// The set of every queue's name, which Asynq's server and tools list.
pub const ALL_QUEUES: &str = "asynq:queues";

/// The hash of one task (`msg`, `state`, `pending_since`).
pub fn task_key(queue: &str, id: &str) -> String {
    format!("asynq:{{{queue}}}:t:{id}")
}

/// The list of a queue's pending task ids, pushed on the left and popped
/// on the right by the server.
pub fn pending_key(queue: &str) -> String {
    format!("asynq:{{{queue}}}:pending")
}

/// The list of a queue's running task ids.
pub fn active_key(queue: &str) -> String {
    format!("asynq:{{{queue}}}:active")
}

/// The sorted set of running tasks' lease expirations.
pub fn lease_key(queue: &str) -> String {
    format!("asynq:{{{queue}}}:lease")
}

/// The key that pauses a queue when it exists.
pub fn paused_key(queue: &str) -> String {
    format!("asynq:{{{queue}}}:paused")
}

/// The prefix of a queue's task hashes.
pub fn task_key_prefix(queue: &str) -> String {
    format!("asynq:{{{queue}}}:t:")
}
