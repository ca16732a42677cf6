//! The diesel schema of `outbox_tasks` on PostgreSQL.

diesel::table! {
    /// The outbox table (docs/semantics.md).
    outbox_tasks (id) {
        /// Task id.
        id -> Int8,
        /// Handler selector.
        kind -> Varchar,
        /// Payload protocol version.
        version -> Int4,
        /// Payload bytes.
        payload -> Bytea,
        /// String headers as a JSON object.
        headers -> Jsonb,
        /// Ordering key.
        ordering_key -> Nullable<Varchar>,
        /// Idempotency key.
        dedup_key -> Nullable<Varchar>,
        /// `available`, `waiting`, `running`, `blocked`, `succeeded`,
        /// `failed` or `discarded`.
        status -> Text,
        /// Claims taken, including those given back unstarted (the fence token).
        attempts -> Int8,
        /// Claims given back before their handler started.
        released -> Int8,
        /// Attempt limit.
        max_attempts -> Nullable<Int4>,
        /// Earliest next claim.
        next_attempt_at -> Timestamptz,
        /// Claiming worker.
        lease_owner -> Nullable<Text>,
        /// End of the claim.
        lease_expires_at -> Nullable<Timestamptz>,
        /// Deadline.
        expires_at -> Nullable<Timestamptz>,
        /// Latest failure.
        last_error -> Text,
        /// Insert time.
        created_at -> Timestamptz,
        /// Last change.
        updated_at -> Timestamptz,
        /// End time.
        finished_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    /// Per ordering key with unfinished tasks: how many are open.
    outbox_ordering_keys (ordering_key) {
        /// The key.
        ordering_key -> Varchar,
        /// Tasks of the key neither succeeded nor discarded.
        open_tasks -> Int8,
    }
}
