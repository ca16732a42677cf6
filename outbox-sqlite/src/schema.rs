//! The diesel schema of `outbox_tasks` on SQLite.

diesel::table! {
    /// The outbox table (docs/semantics.md).
    outbox_tasks (id) {
        /// Task id.
        id -> BigInt,
        /// Handler selector.
        kind -> Text,
        /// Payload protocol version.
        version -> Integer,
        /// Payload bytes.
        payload -> Binary,
        /// String headers as a JSON object.
        headers -> Text,
        /// Ordering key: UTF-8 text compared byte for byte; read as bytes,
        /// so a key another program wrote that is not UTF-8 fails its own
        /// row only.
        ordering_key -> Nullable<Binary>,
        /// Idempotency key, like `ordering_key`.
        dedup_key -> Nullable<Binary>,
        /// `available`, `waiting`, `running`, `blocked`, `succeeded`,
        /// `failed` or `discarded`.
        status -> Text,
        /// Claims taken, including those given back unstarted (the fence token).
        attempts -> BigInt,
        /// Claims given back before their handler started.
        released -> BigInt,
        /// Attempt limit.
        max_attempts -> Nullable<Integer>,
        /// Earliest next claim (microseconds since the epoch, UTC).
        next_attempt_at -> BigInt,
        /// Claiming worker.
        lease_owner -> Nullable<Text>,
        /// End of the claim (microseconds since the epoch, UTC).
        lease_expires_at -> Nullable<BigInt>,
        /// Deadline (microseconds since the epoch, UTC).
        expires_at -> Nullable<BigInt>,
        /// Latest failure.
        last_error -> Text,
        /// Insert time (microseconds since the epoch, UTC).
        created_at -> BigInt,
        /// Last change (microseconds since the epoch, UTC).
        updated_at -> BigInt,
        /// End time (microseconds since the epoch, UTC).
        finished_at -> Nullable<BigInt>,
    }
}
