//! The diesel schema of `outbox_tasks` on MySQL/MariaDB.

diesel::table! {
    /// The outbox table (docs/semantics.md).
    outbox_tasks (id) {
        /// Task id.
        id -> Bigint,
        /// Handler selector.
        kind -> Varchar,
        /// Payload protocol version.
        version -> Integer,
        /// Payload bytes.
        payload -> Blob,
        /// String headers as a JSON object (read as text).
        headers -> Text,
        /// Ordering key: UTF-8 in a `VARBINARY(255)` column, so the database
        /// compares it byte for byte; written as text, read as bytes.
        ordering_key -> Nullable<Varbinary>,
        /// Idempotency key: UTF-8 in a `VARBINARY(255)` column, so the
        /// database compares it byte for byte; written as text, read as bytes.
        dedup_key -> Nullable<Varbinary>,
        /// `available`, `waiting`, `running`, `blocked`, `succeeded`,
        /// `failed` or `discarded`.
        status -> Varchar,
        /// Claims taken, including those given back unstarted (the fence token).
        attempts -> Bigint,
        /// Claims given back before their handler started.
        released -> Bigint,
        /// Attempt limit.
        max_attempts -> Nullable<Integer>,
        /// Earliest next claim (UTC).
        next_attempt_at -> Datetime,
        /// Claiming worker.
        lease_owner -> Nullable<Varchar>,
        /// End of the claim (UTC).
        lease_expires_at -> Nullable<Datetime>,
        /// Deadline (UTC).
        expires_at -> Nullable<Datetime>,
        /// Latest failure.
        last_error -> Text,
        /// Insert time (UTC).
        created_at -> Datetime,
        /// Last change (UTC).
        updated_at -> Datetime,
        /// End time (UTC).
        finished_at -> Nullable<Datetime>,
    }
}
