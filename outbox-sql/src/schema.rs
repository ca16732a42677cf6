//! [`outbox_schema!`](crate::outbox_schema): the outbox's tables and the
//! row the store reads, defined once for every backend with each backend's
//! column types.

/// Defines a backend crate's `schema` module (the diesel tables
/// `outbox_tasks` and `outbox_ordering_keys`) and its `TaskRow`, the row
/// the store's statements read, with the backend's SQL types and the Rust
/// types they read as. For backend crates; invoke it once, at the crate
/// root.
///
/// - `backend`: the diesel backend;
/// - `bigint`, `int`, `text`, `bytes`: its SQL types for 64- and 32-bit
///   integers, text and bytes;
/// - `json`, `key`, `time` and their `*_doc`: the SQL types of the
///   headers, of the two keys and of instants, with a note on each;
/// - `json_rust`, `key_rust`, `time_rust`: the Rust types those read as,
///   and `json_read`, `key_read`, `time_read`: the functions that read them
///   (`fn(id, column, value) -> Result<_>`, an error naming the column).
#[macro_export]
macro_rules! outbox_schema {
    (
        backend = $backend:path,
        bigint = $bigint:ident,
        int = $int:ident,
        text = $text:ident,
        bytes = $bytes:ident,
        json = $json:ident,
        json_doc = $json_doc:literal,
        key = $key:ident,
        key_doc = $key_doc:literal,
        time = $time:ident,
        time_doc = $time_doc:literal,
        json_rust = $json_rust:ty,
        key_rust = $key_rust:ty,
        time_rust = $time_rust:ty,
        json_read = $json_read:path,
        key_read = $key_read:path,
        time_read = $time_read:path $(,)?
    ) => {
        /// The diesel schema of the outbox's tables, under their default
        /// names: a store with a schema or a table prefix works on other
        /// tables (read
        /// those through the store's listing API, or a `diesel::table!`
        /// of your own).
        pub mod schema {
            diesel::table! {
                /// The outbox table ([semantics.md](https://github.com/outbox-rs/outbox/blob/main/docs/semantics.md)).
                outbox_tasks (id) {
                    /// Task id.
                    id -> $bigint,
                    /// Handler selector.
                    kind -> $text,
                    /// Payload protocol version.
                    version -> $int,
                    /// Payload bytes.
                    payload -> $bytes,
                    #[doc = concat!("String headers as a JSON object", $json_doc, ".")]
                    headers -> $json,
                    #[doc = concat!("Ordering key", $key_doc, ".")]
                    ordering_key -> Nullable<$key>,
                    #[doc = concat!("Idempotency key", $key_doc, ".")]
                    dedup_key -> Nullable<$key>,
                    /// `available`, `waiting`, `running`, `blocked`, `succeeded`,
                    /// `failed` or `discarded`.
                    status -> $text,
                    /// Claims taken, including those given back unstarted (the fence token).
                    attempts -> $bigint,
                    /// Claims given back before their handler started.
                    released -> $bigint,
                    /// Attempt limit.
                    max_attempts -> Nullable<$int>,
                    #[doc = concat!("Earliest next claim", $time_doc, ".")]
                    next_attempt_at -> $time,
                    /// Claiming worker.
                    lease_owner -> Nullable<$text>,
                    #[doc = concat!("End of the claim", $time_doc, ".")]
                    lease_expires_at -> Nullable<$time>,
                    #[doc = concat!("Deadline", $time_doc, ".")]
                    expires_at -> Nullable<$time>,
                    /// Latest failure.
                    last_error -> $text,
                    #[doc = concat!("Insert time", $time_doc, ".")]
                    created_at -> $time,
                    #[doc = concat!("Last change", $time_doc, ".")]
                    updated_at -> $time,
                    #[doc = concat!("End time", $time_doc, ".")]
                    finished_at -> Nullable<$time>,
                }
            }

            diesel::table! {
                /// Per ordering key with unfinished tasks: how many are open.
                outbox_ordering_keys (ordering_key) {
                    /// The key.
                    ordering_key -> $key,
                    /// Tasks of the key neither succeeded nor discarded.
                    open_tasks -> $bigint,
                }
            }
        }

        /// One row of `outbox_tasks` as the store's statements read it:
        /// every column in table order, as its column holds it.
        #[derive(Debug, diesel::Queryable, diesel::QueryableByName, diesel::Selectable)]
        #[diesel(table_name = schema::outbox_tasks, check_for_backend($backend))]
        pub struct TaskRow {
            id: i64,
            kind: String,
            version: i32,
            payload: Vec<u8>,
            headers: $json_rust,
            ordering_key: Option<$key_rust>,
            dedup_key: Option<$key_rust>,
            status: String,
            attempts: i64,
            released: i64,
            max_attempts: Option<i32>,
            next_attempt_at: $time_rust,
            lease_owner: Option<String>,
            lease_expires_at: Option<$time_rust>,
            expires_at: Option<$time_rust>,
            last_error: String,
            created_at: $time_rust,
            updated_at: $time_rust,
            finished_at: Option<$time_rust>,
        }

        impl TaskRow {
            /// The task this row holds, or what a listing shows of it when
            /// a column cannot be read.
            pub(crate) fn decode(self) -> $crate::ReadRow {
                self.stored()
                    .and_then(::diesel_outbox_core::StoredRow::decode)
            }

            /// The row as a claim took it, with its fence.
            #[allow(
                dead_code,
                reason = "only the backends that claim in one statement read it"
            )]
            pub(crate) fn taken(self) -> $crate::flows::claim::Taken<::diesel_outbox_core::Record> {
                $crate::flows::claim::Taken {
                    attempts: self.attempts,
                    row: self.decode(),
                }
            }

            /// The row as stored; when a column cannot be read, what a
            /// listing shows of it, with its status as stored.
            fn stored(
                mut self,
            ) -> ::std::result::Result<
                ::diesel_outbox_core::StoredRow,
                ::diesel_outbox_core::UnreadableRow,
            > {
                // Taken out (an empty `String` allocates nothing) so that an
                // error can still show it, without a copy.
                let status = ::std::mem::take(&mut self.status);
                let id = ::diesel_outbox_core::TaskId::new(self.id);
                match self.read() {
                    Ok(row) => Ok(::diesel_outbox_core::StoredRow { status, ..row }),
                    Err(error) => Err(::diesel_outbox_core::UnreadableRow::new(id, status, &error)),
                }
            }

            /// The row with its columns read; its status is the one left in
            /// `self`.
            fn read(self) -> ::diesel_outbox_core::Result<::diesel_outbox_core::StoredRow> {
                let id = self.id;
                let opt_time = |field, at: Option<$time_rust>| {
                    at.map(|at| $time_read(id, field, at)).transpose()
                };
                let opt_key = |field, key: Option<$key_rust>| {
                    key.map(|key| $key_read(id, field, key)).transpose()
                };
                Ok(::diesel_outbox_core::StoredRow {
                    id,
                    kind: self.kind,
                    version: self.version,
                    payload: self.payload,
                    headers: $json_read(id, "headers", self.headers)?,
                    ordering_key: opt_key("ordering_key", self.ordering_key)?,
                    dedup_key: opt_key("dedup_key", self.dedup_key)?,
                    status: self.status,
                    attempts: self.attempts,
                    released: self.released,
                    max_attempts: self.max_attempts,
                    next_attempt_at: $time_read(id, "next_attempt_at", self.next_attempt_at)?,
                    lease_owner: self.lease_owner,
                    lease_expires_at: opt_time("lease_expires_at", self.lease_expires_at)?,
                    expires_at: opt_time("expires_at", self.expires_at)?,
                    last_error: self.last_error,
                    created_at: $time_read(id, "created_at", self.created_at)?,
                    updated_at: $time_read(id, "updated_at", self.updated_at)?,
                    finished_at: opt_time("finished_at", self.finished_at)?,
                })
            }
        }

        /// The columns of `outbox_tasks` a batch claim returns, in the
        /// order of [`claim_columns!`](diesel_outbox_sql::claim_columns):
        /// what its tasks' deliveries need.
        #[allow(
            dead_code,
            reason = "only the backends that claim in one statement use them"
        )]
        pub(crate) type ClaimColumns = (
            schema::outbox_tasks::id,
            schema::outbox_tasks::kind,
            schema::outbox_tasks::version,
            schema::outbox_tasks::payload,
            schema::outbox_tasks::headers,
            schema::outbox_tasks::ordering_key,
            schema::outbox_tasks::dedup_key,
            schema::outbox_tasks::status,
            schema::outbox_tasks::attempts,
            schema::outbox_tasks::released,
            schema::outbox_tasks::max_attempts,
            schema::outbox_tasks::expires_at,
            schema::outbox_tasks::created_at,
            schema::outbox_tasks::updated_at,
        );

        /// The SQL types of [`ClaimColumns`], to read a claim's rows by
        /// position.
        #[allow(
            dead_code,
            reason = "only the backends that claim in one statement use them"
        )]
        pub(crate) type ClaimSqlType = <ClaimColumns as diesel::Expression>::SqlType;

        /// One row of a batch claim, as its column holds it: the columns of
        /// [`ClaimColumns`], in their order.
        #[derive(Debug, diesel::Queryable, diesel::Selectable)]
        #[diesel(table_name = schema::outbox_tasks, check_for_backend($backend))]
        #[allow(
            dead_code,
            reason = "only the backends that claim in one statement read it"
        )]
        pub(crate) struct ClaimRow {
            id: i64,
            kind: String,
            version: i32,
            payload: Vec<u8>,
            headers: $json_rust,
            ordering_key: Option<$key_rust>,
            dedup_key: Option<$key_rust>,
            status: String,
            attempts: i64,
            released: i64,
            max_attempts: Option<i32>,
            expires_at: Option<$time_rust>,
            created_at: $time_rust,
            updated_at: $time_rust,
        }

        #[allow(
            dead_code,
            reason = "only the backends that claim in one statement read it"
        )]
        impl ClaimRow {
            /// The row as the claim took it, with its fence.
            pub(crate) fn taken(
                mut self,
            ) -> $crate::flows::claim::Taken<::diesel_outbox_core::ClaimedTask> {
                let attempts = self.attempts;
                // Taken out, as in `TaskRow::stored`, so that an error can
                // still show it.
                let status = ::std::mem::take(&mut self.status);
                let id = ::diesel_outbox_core::TaskId::new(self.id);
                let row = match self.read() {
                    Ok(row) => ::diesel_outbox_core::StoredClaim { status, ..row }.decode(),
                    Err(error) => Err(::diesel_outbox_core::UnreadableRow::new(id, status, &error)),
                };
                $crate::flows::claim::Taken { row, attempts }
            }

            /// The row with its columns read; its status is the one left in
            /// `self`.
            fn read(self) -> ::diesel_outbox_core::Result<::diesel_outbox_core::StoredClaim> {
                let id = self.id;
                let opt_key = |field, key: Option<$key_rust>| {
                    key.map(|key| $key_read(id, field, key)).transpose()
                };
                Ok(::diesel_outbox_core::StoredClaim {
                    id,
                    kind: self.kind,
                    version: self.version,
                    payload: self.payload,
                    headers: $json_read(id, "headers", self.headers)?,
                    ordering_key: opt_key("ordering_key", self.ordering_key)?,
                    dedup_key: opt_key("dedup_key", self.dedup_key)?,
                    status: self.status,
                    attempts: self.attempts,
                    released: self.released,
                    max_attempts: self.max_attempts,
                    expires_at: self
                        .expires_at
                        .map(|at| $time_read(id, "expires_at", at))
                        .transpose()?,
                    created_at: $time_read(id, "created_at", self.created_at)?,
                    updated_at: $time_read(id, "updated_at", self.updated_at)?,
                })
            }
        }

        #[cfg(test)]
        mod task_row {
            use diesel::{QueryDsl as _, SelectableHelper as _};

            /// Rows read by position come back right only if the store's
            /// column list, the table's column order and the row's field
            /// order agree.
            #[test]
            fn positional_columns_match_the_schema_and_the_row_fields() {
                use super::schema::outbox_tasks;
                let listed = $crate::listed_columns($crate::task_columns!());
                let schema = $crate::selected_columns::<$backend>(
                    outbox_tasks::table.select(outbox_tasks::all_columns),
                );
                let fields = $crate::selected_columns::<$backend>(
                    outbox_tasks::table.select(super::TaskRow::as_select()),
                );
                assert_eq!(listed.len(), 19);
                assert_eq!(listed, schema);
                assert_eq!(listed, fields);
            }

            /// The same for a batch claim's rows: the statements' list, the
            /// columns whose SQL types they are read as, and the row's
            /// fields agree.
            #[test]
            fn claim_columns_match_their_types_and_the_row_fields() {
                use super::schema::outbox_tasks;
                let listed = $crate::listed_columns($crate::claim_columns!());
                // The type makes this the list of `ClaimColumns`, in order.
                let columns: super::ClaimColumns = (
                    outbox_tasks::id,
                    outbox_tasks::kind,
                    outbox_tasks::version,
                    outbox_tasks::payload,
                    outbox_tasks::headers,
                    outbox_tasks::ordering_key,
                    outbox_tasks::dedup_key,
                    outbox_tasks::status,
                    outbox_tasks::attempts,
                    outbox_tasks::released,
                    outbox_tasks::max_attempts,
                    outbox_tasks::expires_at,
                    outbox_tasks::created_at,
                    outbox_tasks::updated_at,
                );
                let typed =
                    $crate::selected_columns::<$backend>(outbox_tasks::table.select(columns));
                let fields = $crate::selected_columns::<$backend>(
                    outbox_tasks::table.select(super::ClaimRow::as_select()),
                );
                assert_eq!(listed.len(), 14);
                assert_eq!(listed, typed);
                assert_eq!(listed, fields);
            }
        }
    };
}

/// Every column of `outbox_tasks` (as `t`), in the order of the schema and
/// of `TaskRow`'s fields, for statements whose rows are read by position.
#[macro_export]
macro_rules! task_columns {
    () => {
        "t.id, t.kind, t.version, t.payload, t.headers, t.ordering_key, t.dedup_key, \
         t.status, t.attempts, t.released, t.max_attempts, t.next_attempt_at, \
         t.lease_owner, t.lease_expires_at, t.expires_at, t.last_error, t.created_at, \
         t.updated_at, t.finished_at"
    };
}

/// The columns of `outbox_tasks` a batch claim returns, unqualified (SQLite
/// takes no table name in `RETURNING`), in the order of a backend's
/// `ClaimRow` fields: what a claimed task's delivery,
/// fence and outcome need ([`ClaimedTask`](diesel_outbox_core::ClaimedTask)),
/// without the lease, the last error and the schedule, which a claim's
/// caller never reads. Fewer columns to decode in every claimed row.
#[macro_export]
macro_rules! claim_columns {
    () => {
        "id, kind, version, payload, headers, ordering_key, dedup_key, status, attempts, \
         released, max_attempts, expires_at, created_at, updated_at"
    };
}

/// Reads a column as it is (for [`outbox_schema!`](crate::outbox_schema)'s
/// `*_read` functions where the column already holds the core's type).
pub fn as_is<T>(_id: i64, _field: &'static str, value: T) -> diesel_outbox_core::Result<T> {
    Ok(value)
}

/// Reads a key column's bytes as text; [`Error::Corrupt`] naming the column
/// when they are not UTF-8 (a key another program wrote fails its own row,
/// not the whole claim).
///
/// [`Error::Corrupt`]: diesel_outbox_core::Error::Corrupt
pub fn utf8_key(
    id: i64,
    field: &'static str,
    bytes: Vec<u8>,
) -> diesel_outbox_core::Result<String> {
    String::from_utf8(bytes).map_err(|e| diesel_outbox_core::Error::Corrupt {
        id: diesel_outbox_core::TaskId::new(id),
        field,
        reason: e.to_string(),
    })
}

/// Reads headers stored as text: text that is not JSON becomes a JSON
/// string, which the core's decoding then reports as corrupt headers.
pub fn json_text(
    _id: i64,
    _field: &'static str,
    text: String,
) -> diesel_outbox_core::Result<serde_json::Value> {
    Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
}
