-- The transactional outbox table (DESIGN §3) for MySQL 8.0.1+ and MariaDB 10.6+.
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
    status           VARCHAR(16) NOT NULL DEFAULT 'pending',
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
    -- Claims walk pending rows in id order: a range on (status, id) skips
    -- finished rows however many there are.
    KEY outbox_tasks_claim_idx (status, id),
    -- "When is the next retry or scheduled task due?", for the relay's sleep.
    KEY outbox_tasks_due_idx (status, next_attempt_at),
    -- Ordering keys: "is an older task with my key unfinished?"
    KEY outbox_tasks_ordering_idx (ordering_key, id),
    -- Retention: purge finished rows oldest first.
    KEY outbox_tasks_finished_idx (finished_at),
    CONSTRAINT outbox_tasks_kind_check CHECK (kind <> ''),
    CONSTRAINT outbox_tasks_version_check CHECK (version > 0),
    CONSTRAINT outbox_tasks_status_check CHECK (status IN ('pending', 'succeeded', 'failed')),
    CONSTRAINT outbox_tasks_attempts_check CHECK (attempts >= 0),
    CONSTRAINT outbox_tasks_released_check CHECK (released >= 0 AND released <= attempts),
    CONSTRAINT outbox_tasks_max_attempts_check CHECK (max_attempts > 0),
    CONSTRAINT outbox_tasks_finished_check CHECK ((status = 'pending') = (finished_at IS NULL))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
