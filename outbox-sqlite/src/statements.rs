//! Every statement of the SQLite store, named as in the other backends'
//! `statements` modules, so one statement reads side by side in three
//! files.
//!
//! SQLite has one writer at a time, so no statement locks rows: a write
//! holds the database's write lock from its first step to its commit, and
//! a read never waits for it (WAL). Each statement that reads by status
//! names the index holding only rows of that status (`INDEXED BY`), so its
//! cost never grows with rows of other statuses; `plans.rs` checks every
//! plan. Times are bound by the store as microseconds since the epoch.

/// `?, ?, ...`: one placeholder per value.
pub(crate) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

// ------------------------------------------------------------------ enqueue

/// The start of every insert; `VALUES` tuples follow (see `insert.rs`).
pub(crate) const INSERT: &str = "INSERT INTO outbox_tasks (created_at, updated_at, kind, version, \
    payload, headers, ordering_key, dedup_key, max_attempts, next_attempt_at, expires_at, \
    status, last_error) VALUES ";

/// The task holding a `dedup_key`: committed, since the enqueuing
/// transaction holds the write lock and its own insert just met it.
pub(crate) const HELD: &str = "SELECT id FROM outbox_tasks WHERE dedup_key = $1";

// ------------------------------------------------------------------- claims

/// A claim by id reads the row once its transaction holds the write lock.
pub(crate) const LOCK_TASK: &str = "SELECT * FROM outbox_tasks WHERE id = $1";

/// Available rows only, in id order, through the claim index; expired ones
/// met on the way are failed ([`transition::claim`] and
/// [`transition::expire`] in one statement). `$1` now, `$2` the cursor, `$3`
/// due by, `$4` the limit, `$5` the owner, `$6` the lease's end, `$7` the
/// expiry error.
///
/// [`transition::claim`]: diesel_outbox_core::transition::claim
/// [`transition::expire`]: diesel_outbox_core::transition::expire
pub(crate) const CLAIM_DUE: &str = concat!(
    "\
UPDATE outbox_tasks SET
    status = CASE WHEN expires_at <= $1 THEN 'failed' ELSE 'running' END,
    finished_at = CASE WHEN expires_at <= $1 THEN $1 END,
    last_error = CASE WHEN expires_at <= $1 THEN $7 ELSE last_error END,
    attempts = CASE WHEN expires_at <= $1 THEN attempts ELSE attempts + 1 END,
    lease_owner = CASE WHEN expires_at <= $1 THEN NULL ELSE $5 END,
    lease_expires_at = CASE WHEN expires_at <= $1 THEN NULL ELSE $6 END,
    updated_at = $1
WHERE id IN (
    SELECT id FROM outbox_tasks INDEXED BY outbox_tasks_claim_idx
    WHERE status = 'available' AND id > $2 AND next_attempt_at <= $3
    ORDER BY id
    LIMIT $4)
RETURNING ",
    diesel_outbox_sql::claim_columns!()
);

/// Leases the rows listed after `$1` the owner, `$2` the lease's end and
/// `$3` now.
pub(crate) fn set_leases(n: usize) -> String {
    format!(
        "UPDATE outbox_tasks SET status = 'running', attempts = attempts + 1, lease_owner = $1, \
         lease_expires_at = $2, updated_at = $3 WHERE id IN ({})",
        placeholders(n)
    )
}

/// Fails the expired rows listed after `$1` now and `$2` the error; each
/// keeps holding its ordering key.
pub(crate) fn expire(n: usize) -> String {
    format!(
        "UPDATE outbox_tasks SET status = 'failed', finished_at = $1, updated_at = $1, \
         last_error = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id IN ({})",
        placeholders(n)
    )
}

/// Fails row `$3`, which cannot be read as a task, with the reason `$2`, if
/// it is claimable at `$1`.
pub(crate) const FAIL_UNREADABLE: &str = "\
UPDATE outbox_tasks SET status = 'failed', finished_at = $1, updated_at = $1,
    last_error = $2, lease_owner = NULL, lease_expires_at = NULL
WHERE id = $3 AND status IN ('available', 'waiting', 'running')
  AND next_attempt_at <= $1
  AND (lease_expires_at IS NULL OR lease_expires_at <= $1)";

// --------------------------------------------------------------- completion

/// Values bound per result in [`complete`].
pub(crate) const COMPLETE_VALUES: usize = 8;

/// [`transition::complete`] for `n` results: their values first, as a
/// table `c` joined to their rows on the primary key; each applies only
/// while `id`, `lease_owner` and `attempts` still match its claim and the
/// task is running. The time is the last parameter. SQLite evaluates every
/// `SET` expression on the row as it was.
///
/// [`transition::complete`]: diesel_outbox_core::transition::complete
pub(crate) fn complete(n: usize) -> String {
    format!(
        "WITH c (id, owner, attempt, status, next_attempt_at, last_error, released, \
         finished_at) AS (VALUES {values}) \
         UPDATE outbox_tasks SET \
             status = c.status, \
             next_attempt_at = COALESCE(c.next_attempt_at, outbox_tasks.next_attempt_at), \
             last_error = COALESCE(c.last_error, outbox_tasks.last_error), \
             released = outbox_tasks.released + c.released, \
             finished_at = c.finished_at, \
             lease_owner = NULL, \
             lease_expires_at = NULL, \
             updated_at = ?{now} \
         FROM c \
         WHERE outbox_tasks.id = c.id AND outbox_tasks.lease_owner = c.owner \
           AND outbox_tasks.attempts = c.attempt AND outbox_tasks.status = 'running' \
         RETURNING outbox_tasks.id, outbox_tasks.attempts",
        values = vec!["(?, ?, ?, ?, ?, ?, ?, ?)"; n].join(", "),
        now = n * COMPLETE_VALUES + 1,
    )
}

/// The common case, all `n` succeeded for one owner: only the fence varies
/// by row, `?1` the time, then `(id, attempts)` pairs, then the owner.
pub(crate) fn succeed(n: usize) -> String {
    format!(
        "UPDATE outbox_tasks SET status = 'succeeded', last_error = '', finished_at = ?1, \
         updated_at = ?1, lease_owner = NULL, lease_expires_at = NULL \
         WHERE (id, attempts) IN (VALUES {}) AND lease_owner = ?{} AND status = 'running' \
         RETURNING id, attempts",
        vec!["(?, ?)"; n].join(", "),
        2 * n + 2
    )
}

// ------------------------------------------------------------ ordering keys

/// Adds tasks to `n` keys' counts, `(key, added)` pairs, returning the
/// counts after.
pub(crate) fn open_keys(n: usize) -> String {
    format!(
        "INSERT INTO outbox_ordering_keys (ordering_key, open_tasks) VALUES {} \
         ON CONFLICT (ordering_key) DO UPDATE SET open_tasks = open_tasks + excluded.open_tasks \
         RETURNING ordering_key, open_tasks",
        vec!["(?, ?)"; n].join(", ")
    )
}

/// Takes finished tasks off `n` keys' counts, `(key, finished)` pairs and
/// then the keys, returning the counts after.
pub(crate) fn take_keys(n: usize) -> String {
    format!(
        "UPDATE outbox_ordering_keys \
         SET open_tasks = max(open_tasks - CASE ordering_key {} END, 0) \
         WHERE ordering_key IN ({}) RETURNING ordering_key, open_tasks",
        "WHEN ? THEN ? ".repeat(n),
        placeholders(n)
    )
}

/// Drops the rows of `n` keys left with no open task.
pub(crate) fn drop_keys(n: usize) -> String {
    format!(
        "DELETE FROM outbox_ordering_keys WHERE ordering_key IN ({}) AND open_tasks = 0",
        placeholders(n)
    )
}

/// [`transition::unblock`] for the oldest blocked task of each of `n` keys:
/// `?` the time (twice), then the keys. `MIN(id)` per key reads one entry of
/// the `(status, ordering_key, id)` index per key.
///
/// [`transition::unblock`]: diesel_outbox_core::transition::unblock
pub(crate) fn unblock(n: usize) -> String {
    format!(
        "UPDATE outbox_tasks \
         SET status = CASE WHEN next_attempt_at <= ? THEN 'available' ELSE 'waiting' END, \
             updated_at = ? \
         WHERE status = 'blocked' AND id IN ( \
             SELECT MIN(id) FROM outbox_tasks INDEXED BY outbox_tasks_ordering_idx \
             WHERE status = 'blocked' AND ordering_key IN ({}) GROUP BY ordering_key)",
        placeholders(n)
    )
}

// -------------------------------------------------------------------- moves

/// [`transition::promote`]: `$1` now, `$2` the limit.
///
/// [`transition::promote`]: diesel_outbox_core::transition::promote
pub(crate) const PROMOTE: &str = "\
UPDATE outbox_tasks SET status = 'available', updated_at = $1
WHERE status = 'waiting' AND id IN (
    SELECT id FROM outbox_tasks INDEXED BY outbox_tasks_due_idx
    WHERE status = 'waiting' AND next_attempt_at <= $1
    ORDER BY next_attempt_at
    LIMIT $2)";

/// [`transition::rescue`]: failed when the runs reached `max_attempts`,
/// with `$4` (the core's text) completed by the count in place of `$5`;
/// available with `$3` otherwise. `$1` now, `$2` the limit.
///
/// [`transition::rescue`]: diesel_outbox_core::transition::rescue
pub(crate) const RESCUE: &str = "\
UPDATE outbox_tasks SET
    status = CASE WHEN attempts - released >= max_attempts THEN 'failed' ELSE 'available' END,
    finished_at = CASE WHEN attempts - released >= max_attempts THEN $1 END,
    last_error = CASE WHEN attempts - released >= max_attempts
                      THEN replace($4, $5, attempts - released)
                      ELSE $3 END,
    lease_owner = NULL, lease_expires_at = NULL, updated_at = $1
WHERE status = 'running' AND id IN (
    SELECT id FROM outbox_tasks INDEXED BY outbox_tasks_lease_idx
    WHERE status = 'running' AND lease_expires_at <= $1
    ORDER BY lease_expires_at
    LIMIT $2)
RETURNING id, status = 'failed' AS failed";

// ----------------------------------------------------------------- operator

/// [`transition::requeue`] for the failed ones of the ids listed after `$1`
/// now.
///
/// [`transition::requeue`]: diesel_outbox_core::transition::requeue
pub(crate) fn requeue(n: usize) -> String {
    format!(
        "UPDATE outbox_tasks \
         SET status = 'available', next_attempt_at = $1, expires_at = NULL, finished_at = NULL, \
             updated_at = $1 \
         WHERE id IN ({}) AND status = 'failed'",
        placeholders(n)
    )
}

/// The discardable rows of the ids listed, with their status and key.
pub(crate) fn discardable(n: usize) -> String {
    format!(
        "SELECT id, status, ordering_key FROM outbox_tasks WHERE id IN ({}) \
         AND status IN ('available', 'waiting', 'blocked', 'failed')",
        placeholders(n)
    )
}

/// [`transition::discard`] for the ids listed after `$1` now, as
/// [`discardable`] read them in the same transaction.
///
/// [`transition::discard`]: diesel_outbox_core::transition::discard
pub(crate) fn discard(n: usize) -> String {
    format!(
        "UPDATE outbox_tasks SET status = 'discarded', finished_at = $1, updated_at = $1, \
         lease_owner = NULL, lease_expires_at = NULL WHERE id IN ({})",
        placeholders(n)
    )
}

/// Unfinished rows are never purged, nor a failed row that holds its key.
/// `$1` the cut-off, `$2` the limit.
pub(crate) const PURGE: &str = "\
DELETE FROM outbox_tasks WHERE id IN (
    SELECT id FROM outbox_tasks INDEXED BY outbox_tasks_finished_idx
    WHERE finished_at IS NOT NULL AND finished_at < $1
      AND NOT (status = 'failed' AND ordering_key IS NOT NULL)
    ORDER BY finished_at
    LIMIT $2)";

// -------------------------------------------------------------------- reads

/// Exact counts of every status, succeeded included: one pass over the
/// `(status, id)` index (about 35 ms for a million rows, release build), so
/// even a long retained history costs a fraction of a second. It runs as a
/// read, which in WAL mode never waits for writers nor holds them up.
pub(crate) const COUNTS: &str = "\
SELECT status, COUNT(*) AS n FROM outbox_tasks INDEXED BY outbox_tasks_claim_idx
GROUP BY status";

/// The instants behind [`Ages::from_us`]'s ages, each through its
/// status's index: when the available task first in claim order and the
/// waiting task due first became (or become) due, and when the running
/// task whose lease ends first was claimed. One row, `NULL` where no task
/// has that status.
///
/// [`Ages::from_us`]: diesel_outbox_core::Ages::from_us
pub(crate) const AGES: &str = "\
SELECT
    (SELECT next_attempt_at FROM outbox_tasks INDEXED BY outbox_tasks_claim_idx
     WHERE status = 'available' ORDER BY id LIMIT 1) AS available,
    (SELECT next_attempt_at FROM outbox_tasks INDEXED BY outbox_tasks_due_idx
     WHERE status = 'waiting' ORDER BY next_attempt_at LIMIT 1) AS waiting,
    (SELECT updated_at FROM outbox_tasks INDEXED BY outbox_tasks_lease_idx
     WHERE status = 'running' AND lease_expires_at IS NOT NULL
     ORDER BY lease_expires_at LIMIT 1) AS running";

/// A relay's heartbeat: its row written anew (`?5` to `?9`: instants in
/// microseconds, as the store's clock reads them).
pub(crate) const BEAT: &str = "\
INSERT INTO outbox_relays (owner, host, pid, version, started_at, beat_at, expires_at,
                           last_claim_at, last_write_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (owner) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, version = excluded.version,
    started_at = excluded.started_at, beat_at = excluded.beat_at,
    expires_at = excluded.expires_at, last_claim_at = excluded.last_claim_at,
    last_write_at = excluded.last_write_at";

/// The rows of relays whose heartbeats stopped before `?1`, a day ago.
pub(crate) const SWEEP_RELAYS: &str = "DELETE FROM outbox_relays WHERE expires_at < ?1";

/// A stopped relay's row.
pub(crate) const FORGET_RELAY: &str = "DELETE FROM outbox_relays WHERE owner = ?1";

/// The relays whose heartbeats stopped after `?1` (a day ago), times as
/// stored, `live` from the expiry (`?2` now).
pub(crate) const RELAYS: &str = "\
SELECT owner, host, pid, version, started_at AS started_us, beat_at AS beat_us,
    last_claim_at AS claim_us, last_write_at AS write_us,
    CASE WHEN expires_at > ?2 THEN 1 ELSE 0 END AS live
FROM outbox_relays WHERE expires_at >= ?1 ORDER BY owner";

/// When the next waiting task is due.
pub(crate) const NEXT_DUE: &str = "\
SELECT MIN(next_attempt_at) AS us FROM outbox_tasks INDEXED BY outbox_tasks_due_idx
WHERE status = 'waiting'";

// -------------------------------------------------------------------- inbox

/// Only the key's conflict is absorbed (not `INSERT OR IGNORE`, which would
/// also skip a row that breaks a `CHECK`). Writers take turns on SQLite, so
/// a second delivery of one id finds the first one's committed record.
pub(crate) const RECORD: &str = "\
INSERT INTO outbox_inbox (consumer, message_id, applied_at) VALUES ($1, $2, $3)
ON CONFLICT (consumer, message_id) DO NOTHING";

/// The oldest records first, applied before `$1`, at most `$2`.
pub(crate) const PURGE_INBOX: &str = "\
DELETE FROM outbox_inbox WHERE rowid IN (
    SELECT rowid FROM outbox_inbox INDEXED BY outbox_inbox_applied_idx
    WHERE applied_at < $1
    ORDER BY applied_at
    LIMIT $2)";
