-- The transactional outbox table for MySQL 8.0.1+ and MariaDB 10.6+ (columns and states described
-- in docs/semantics.md and docs/architecture.md).
--
-- Times are DATETIME(6) holding UTC, and every database-side time is taken
-- from UTC_TIMESTAMP(6): unlike TIMESTAMP(6), the column does not end in
-- January 2038 and nothing depends on the session's time_zone.
CREATE TABLE outbox_tasks (
    id               BIGINT NOT NULL AUTO_INCREMENT,
    kind             VARCHAR(64) NOT NULL,
    version          INT NOT NULL,
    payload          LONGBLOB NOT NULL,
    headers          JSON NOT NULL,
    -- Keys hold UTF-8 compared byte for byte. Under utf8mb4_bin, a PAD SPACE
    -- collation, 'k' and 'k ' would be one key; the NO PAD binary collations
    -- have other names on MySQL and MariaDB, and none before MySQL 8.0.17.
    ordering_key     VARBINARY(255) NULL,
    dedup_key        VARBINARY(255) NULL,
    -- Rows inserted by other programs default to available; with an ordering key they must go
    -- through enqueue, which keeps the key's count in outbox_ordering_keys.
    status           VARCHAR(16) NOT NULL DEFAULT 'available',
    attempts         BIGINT NOT NULL DEFAULT 0,
    released         BIGINT NOT NULL DEFAULT 0,
    max_attempts     INT NULL,
    next_attempt_at  DATETIME(6) NOT NULL,
    lease_owner      VARCHAR(255) NULL,
    lease_expires_at DATETIME(6) NULL,
    expires_at       DATETIME(6) NULL,
    last_error       TEXT NOT NULL,
    created_at       DATETIME(6) NOT NULL,
    updated_at       DATETIME(6) NOT NULL,
    finished_at      DATETIME(6) NULL,
    PRIMARY KEY (id),
    UNIQUE KEY outbox_tasks_dedup_key (dedup_key),
    -- Every index starts with the status, so each step reads a range holding only the rows of
    -- the status it acts on, whatever else the table holds.
    -- Claims walk available rows in id order; counts per status.
    KEY outbox_tasks_claim_idx (status, id),
    -- Promotion of waiting rows once due, and the relay's "when is the next one due?".
    KEY outbox_tasks_due_idx (status, next_attempt_at),
    -- Rescue of running rows whose lease lapsed.
    KEY outbox_tasks_lease_idx (status, lease_expires_at),
    -- The next blocked task of an ordering key.
    KEY outbox_tasks_ordering_idx (status, ordering_key, id),
    -- Retention: purge finished rows oldest first.
    KEY outbox_tasks_finished_idx (finished_at),
    CONSTRAINT outbox_tasks_kind_check CHECK (kind <> ''),
    CONSTRAINT outbox_tasks_version_check CHECK (version > 0),
    CONSTRAINT outbox_tasks_status_check CHECK (status IN ('available', 'waiting', 'running',
        'blocked', 'succeeded', 'failed', 'discarded')),
    CONSTRAINT outbox_tasks_attempts_check CHECK (attempts >= 0),
    CONSTRAINT outbox_tasks_released_check CHECK (released >= 0 AND released <= attempts),
    CONSTRAINT outbox_tasks_max_attempts_check CHECK (max_attempts > 0),
    CONSTRAINT outbox_tasks_finished_check
        CHECK ((status IN ('succeeded', 'failed', 'discarded')) = (finished_at IS NOT NULL)),
    CONSTRAINT outbox_tasks_lease_check CHECK ((status = 'running') = (lease_owner IS NOT NULL))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per ordering key with unfinished tasks: how many of its tasks are neither succeeded nor
-- discarded. Enqueue and every write that lets a key move on lock the key's row first, so they
-- take turns per key, and a task is the key's head exactly when it was enqueued at count zero.
CREATE TABLE outbox_ordering_keys (
    ordering_key VARBINARY(255) NOT NULL,
    open_tasks   BIGINT NOT NULL,
    PRIMARY KEY (ordering_key),
    CONSTRAINT outbox_ordering_keys_open_check CHECK (open_tasks >= 0)
) ENGINE = InnoDB;
