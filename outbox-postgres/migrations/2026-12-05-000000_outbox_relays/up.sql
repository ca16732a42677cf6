-- The relays that run, one row each, written by the relay itself: a heartbeat every few seconds
-- moves beat_at and expires_at on, and the row is deleted when the relay stops. A relay that dies
-- stops beating: once expires_at has passed it no longer counts as live, and a day later the
-- next beat of another relay deletes its row. last_claim_at and last_write_at say when the relay
-- last claimed tasks and last wrote results back: a relay that claims but never writes shows it.
CREATE TABLE outbox_relays (
    owner         TEXT COLLATE "C" PRIMARY KEY,
    host          TEXT NOT NULL,
    pid           BIGINT NOT NULL,
    version       TEXT NOT NULL,
    started_at    TIMESTAMPTZ(6) NOT NULL,
    beat_at       TIMESTAMPTZ(6) NOT NULL,
    expires_at    TIMESTAMPTZ(6) NOT NULL,
    last_claim_at TIMESTAMPTZ(6),
    last_write_at TIMESTAMPTZ(6)
);
