-- The relays that run, one row each, written by the relay itself: a heartbeat every few seconds
-- moves beat_at and expires_at on, and the row is deleted when the relay stops. A relay that dies
-- stops beating: once expires_at has passed it no longer counts as live, and a day later the
-- next beat of another relay deletes its row. last_claim_at and last_write_at say when the relay
-- last claimed tasks and last wrote results back: a relay that claims but never writes shows it.
-- Times are DATETIME(6) holding UTC, as in outbox_tasks; owner is lease_owner's type.
CREATE TABLE outbox_relays (
    owner         VARCHAR(255) NOT NULL,
    host          VARCHAR(255) NOT NULL,
    pid           BIGINT NOT NULL,
    version       VARCHAR(64) NOT NULL,
    started_at    DATETIME(6) NOT NULL,
    beat_at       DATETIME(6) NOT NULL,
    expires_at    DATETIME(6) NOT NULL,
    last_claim_at DATETIME(6) NULL,
    last_write_at DATETIME(6) NULL,
    PRIMARY KEY (owner)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
