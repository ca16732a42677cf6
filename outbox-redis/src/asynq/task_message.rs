//! Asynq's `TaskMessage`, the protobuf message stored in a task's `msg`
//! field, with the fields this publisher sets and an Asynq server reads.

use std::collections::HashMap;

/// A task as Asynq stores it (`asynq.TaskMessage`, proto3), its fields in
/// the order of their numbers, which are Asynq's; fields this publisher never sets (`retried`, `error_msg`,
/// `last_failed_at`, `unique_key`, `group_key`, `retention`,
/// `completed_at`) are kept so that a decoded message shows them.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct TaskMessage {
    /// The task type a Go handler is registered for (`mux.HandleFunc`).
    #[prost(string, tag = "1")]
    pub r#type: String,
    /// The bytes the handler reads with `task.Payload()`.
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
    /// The task id, unique in its queue.
    #[prost(string, tag = "3")]
    pub id: String,
    /// The queue the task is in.
    #[prost(string, tag = "4")]
    pub queue: String,
    /// Retries left to the server after the first failure.
    #[prost(int32, tag = "5")]
    pub retry: i32,
    /// Retries done so far.
    #[prost(int32, tag = "6")]
    pub retried: i32,
    /// The last failure's message.
    #[prost(string, tag = "7")]
    pub error_msg: String,
    /// How long one run may take, seconds (0: none).
    #[prost(int64, tag = "8")]
    pub timeout: i64,
    /// When the task must be done by, Unix seconds (0: none).
    #[prost(int64, tag = "9")]
    pub deadline: i64,
    /// The uniqueness lock's key (empty: none).
    #[prost(string, tag = "10")]
    pub unique_key: String,
    /// The last failure's time, Unix seconds (0: none).
    #[prost(int64, tag = "11")]
    pub last_failed_at: i64,
    /// How long a completed task is kept, seconds.
    #[prost(int64, tag = "12")]
    pub retention: i64,
    /// When the task completed, Unix seconds.
    #[prost(int64, tag = "13")]
    pub completed_at: i64,
    /// The aggregation group (empty: none).
    #[prost(string, tag = "14")]
    pub group_key: String,
    /// Metadata the handler reads with `task.Headers()`.
    #[prost(map = "string, string", tag = "15")]
    pub headers: HashMap<String, String>,
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::TaskMessage;

    /// The bytes are Asynq's wire format, field by field (tag, length,
    /// value), so a wrong field number fails here, not only in Go.
    #[test]
    fn a_task_message_encodes_with_asynqs_field_numbers() {
        let message = TaskMessage {
            r#type: "t".into(),
            payload: b"p".to_vec(),
            id: "i".into(),
            queue: "q".into(),
            retry: 3,
            timeout: 120,
            deadline: 5,
            retention: 9,
            headers: [("h".to_owned(), "v".to_owned())].into(),
            ..TaskMessage::default()
        };
        let expected: &[u8] = &[
            0x0a, 1, b't', // 1: type
            0x12, 1, b'p', // 2: payload
            0x1a, 1, b'i', // 3: id
            0x22, 1, b'q', // 4: queue
            0x28, 3, // 5: retry
            0x40, 120, // 8: timeout
            0x48, 5, // 9: deadline
            0x60, 9, // 12: retention
            0x7a, 6, 0x0a, 1, b'h', 0x12, 1, b'v', // 15: headers, one entry
        ];
        assert_eq!(message.encode_to_vec(), expected);
        assert_eq!(TaskMessage::decode(expected).expect("decode"), message);
    }
}
