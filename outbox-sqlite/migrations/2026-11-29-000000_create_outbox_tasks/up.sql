-- The transactional outbox table for SQLite 3.35+ (columns and states described in
-- docs/semantics.md and docs/architecture.md).
--
-- Times are INTEGER microseconds since the Unix epoch in UTC: they sort as numbers, keep
-- microseconds, and mean the same whatever the process time zone. Each time column refuses any
-- other type, so a text date written by hand fails loudly instead of sorting after every number.
-- The defaults (the host clock, to the millisecond) serve rows inserted by other programs; the
-- store always writes its own times.
CREATE TABLE outbox_tasks (
    -- AUTOINCREMENT: an id is never handed out twice, even after the newest rows were purged
    -- (task ids name messages downstream, for example JetStream message ids).
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT NOT NULL CHECK (kind <> '' AND length(CAST(kind AS BLOB)) <= 64),
    version          INTEGER NOT NULL CHECK (version > 0 AND version <= 2147483647),
    payload          BLOB NOT NULL CHECK (length(payload) <= 1048576),
    headers          TEXT NOT NULL DEFAULT '{}',
    -- Keys compare byte for byte (SQLite's BINARY collation): 'k' and 'k ' are different keys.
    ordering_key     TEXT CHECK (length(CAST(ordering_key AS BLOB)) <= 255),
    dedup_key        TEXT UNIQUE CHECK (length(CAST(dedup_key AS BLOB)) <= 255),
    -- Rows inserted by other programs default to available; with an ordering key they must go
    -- through enqueue, which keeps the key's count in outbox_ordering_keys.
    status           TEXT NOT NULL DEFAULT 'available'
                     CHECK (status IN ('available', 'waiting', 'running', 'blocked',
                                       'succeeded', 'failed', 'discarded')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    released         INTEGER NOT NULL DEFAULT 0 CHECK (released >= 0 AND released <= attempts),
    max_attempts     INTEGER CHECK (max_attempts > 0 AND max_attempts <= 2147483647),
    next_attempt_at  INTEGER NOT NULL
                     DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000000.0) AS INTEGER))
                     CHECK (typeof(next_attempt_at) = 'integer'),
    lease_owner      TEXT,
    lease_expires_at INTEGER CHECK (typeof(lease_expires_at) IN ('integer', 'null')),
    expires_at       INTEGER CHECK (typeof(expires_at) IN ('integer', 'null')),
    last_error       TEXT NOT NULL DEFAULT '' CHECK (length(CAST(last_error AS BLOB)) <= 4096),
    created_at       INTEGER NOT NULL
                     DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000000.0) AS INTEGER))
                     CHECK (typeof(created_at) = 'integer'),
    updated_at       INTEGER NOT NULL
                     DEFAULT (CAST(round((julianday('now') - 2440587.5) * 86400000000.0) AS INTEGER))
                     CHECK (typeof(updated_at) = 'integer'),
    finished_at      INTEGER CHECK (typeof(finished_at) IN ('integer', 'null')),
    CHECK ((status IN ('succeeded', 'failed', 'discarded')) = (finished_at IS NOT NULL)),
    CHECK ((status = 'running') = (lease_owner IS NOT NULL))
);

-- Every index starts with the status, so each step reads a range holding only the rows of the
-- status it acts on, whatever else the table holds. The store names the index it reads
-- (INDEXED BY), so a plan never changes with the table's statistics.

-- Claims walk available rows in id order; counts per status.
CREATE INDEX outbox_tasks_claim_idx ON outbox_tasks (status, id);

-- Promotion of waiting rows once due, and the relay's "when is the next one due?".
CREATE INDEX outbox_tasks_due_idx ON outbox_tasks (status, next_attempt_at);

-- Rescue of running rows whose lease lapsed.
CREATE INDEX outbox_tasks_lease_idx ON outbox_tasks (status, lease_expires_at);

-- The next blocked task of an ordering key.
CREATE INDEX outbox_tasks_ordering_idx ON outbox_tasks (status, ordering_key, id);

-- Retention: purge finished rows oldest first.
CREATE INDEX outbox_tasks_finished_idx ON outbox_tasks (finished_at) WHERE finished_at IS NOT NULL;

-- One row per ordering key with unfinished tasks: how many of its tasks are neither succeeded nor
-- discarded. SQLite has one writer at a time, and every transaction of the store that changes it
-- is a write transaction from its first statement, so writers of a key take turns and a task is
-- the key's head exactly when it was enqueued at count zero.
CREATE TABLE outbox_ordering_keys (
    ordering_key TEXT NOT NULL PRIMARY KEY,
    open_tasks   INTEGER NOT NULL CHECK (open_tasks >= 0)
) WITHOUT ROWID;
