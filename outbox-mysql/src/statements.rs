//! Every statement of the MySQL/MariaDB store, named as in the other
//! backends' `statements` modules, so one statement reads side by side in
//! three files.
//!
//! The store's transactions run at READ COMMITTED: no gap locks, so they
//! never block the application's inserts, and each statement reads what was
//! committed before it started. A statement that reads rows by status goes
//! through the `(status, ...)` index named outright; one that writes rows it
//! found reaches them by primary key, in key order, as completion writes
//! lock theirs: a scan of a status index would lock other workers' rows on
//! the way and deadlock with them. Lists of rows go as one JSON document read
//! back with `JSON_TABLE` where the text must stay fixed (prepared once per
//! connection), or as integers written into the text. Times come from
//! `UTC_TIMESTAMP(6)`. MySQL has no `RETURNING`: ids come from
//! `LAST_INSERT_ID()`, and what a write changed is read first, under lock.

/// `?, ?, ...`: one placeholder per value.
pub(crate) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// The ids as an SQL list of integers, written into a statement's text.
pub(crate) fn id_list(ids: impl IntoIterator<Item = i64>) -> String {
    ids.into_iter()
        .map(|id| id.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

// ------------------------------------------------------------------ enqueue

/// The start of every insert; `VALUES` tuples follow (see `insert.rs`).
pub(crate) const INSERT: &str = "INSERT INTO outbox_tasks (kind, version, payload, headers, \
    ordering_key, dedup_key, max_attempts, next_attempt_at, expires_at, status, last_error, \
    created_at, updated_at) VALUES ";

/// The `VALUES` tuple of each row of a multi-row insert whose rows differ in
/// shape: every column bound (absent values as `NULL`), so the text depends
/// only on the length. The status is [`transition::enqueued`], with "due"
/// on the database clock.
///
/// [`transition::enqueued`]: diesel_outbox_core::transition::enqueued
pub(crate) const BOUND_VALUES: &str = "(?, ?, ?, ?, ?, ?, ?, COALESCE(?, UTC_TIMESTAMP(6)), ?, \
    CASE WHEN ? THEN 'blocked' WHEN ? > UTC_TIMESTAMP(6) THEN 'waiting' ELSE 'available' END, \
    '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))";

/// After a single-row insert of a task with a `dedup_key`: a key already
/// held makes `LAST_INSERT_ID()` answer the holder's id and changes nothing
/// in that row.
pub(crate) const ON_DUPLICATE: &str = " ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)";

/// Where the ids of the last `INSERT` on this connection start, and how far
/// apart they are (the session's `auto_increment_increment`).
pub(crate) const INSERTED_IDS: &str = "SELECT LAST_INSERT_ID() AS first, \
    CAST(@@SESSION.auto_increment_increment AS SIGNED) AS step";

/// The task holding a `dedup_key`, read with a lock so a holder committed
/// meanwhile is seen, and one being inserted is waited for.
pub(crate) const HELD: &str = "SELECT id FROM outbox_tasks WHERE dedup_key = ? LOCK IN SHARE MODE";

/// The server's version and how it hands out ids.
pub(crate) const SERVER: &str = "SELECT VERSION() AS version, \
    CAST(@@innodb_autoinc_lock_mode AS CHAR) AS autoinc_lock_mode";

// ------------------------------------------------------------------- claims

/// A claim by id locks its row, with the database's time.
pub(crate) const LOCK_TASK: &str =
    "SELECT t.*, UTC_TIMESTAMP(6) AS db_now FROM outbox_tasks t WHERE t.id = ? FOR UPDATE";

/// Available rows only, in id order, through the `(status, id)` index named
/// outright: for `ORDER BY id LIMIT n` MariaDB also weighs walking the
/// primary key, costed as if available rows were spread evenly through the
/// table, and with a long retained history before them it would read every
/// finished row first.
pub(crate) const LOCK_DUE: &str = concat!(
    "SELECT ",
    diesel_outbox_sql::task_columns!(),
    ", UTC_TIMESTAMP(6) AS db_now
FROM outbox_tasks t FORCE INDEX (outbox_tasks_claim_idx)
WHERE t.status = 'available' AND t.id > ?
  AND t.next_attempt_at <= COALESCE(?, UTC_TIMESTAMP(6))
ORDER BY t.id
LIMIT ?
FOR UPDATE SKIP LOCKED"
);

/// [`transition::claim`] for the locked rows of a JSON array of ids, to one
/// owner. The ids come as one JSON document, so the text is fixed and
/// prepared once per connection; each id reaches its row through the
/// primary key.
///
/// [`transition::claim`]: diesel_outbox_core::transition::claim
pub(crate) const SET_LEASES: &str = "\
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
STRAIGHT_JOIN outbox_tasks t FORCE INDEX (PRIMARY) ON t.id = j.id
SET t.status = 'running', t.attempts = t.attempts + 1, t.lease_owner = ?,
    t.lease_expires_at = ?, t.updated_at = ?";

/// [`transition::expire`] for the locked rows of a JSON array of ids, like
/// [`SET_LEASES`].
///
/// [`transition::expire`]: diesel_outbox_core::transition::expire
pub(crate) const EXPIRE: &str = "\
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
STRAIGHT_JOIN outbox_tasks t FORCE INDEX (PRIMARY) ON t.id = j.id
SET t.status = 'failed', t.finished_at = ?, t.updated_at = ?, t.last_error = ?,
    t.lease_owner = NULL, t.lease_expires_at = NULL";

/// Fails a row that cannot be read as a task, with the reason, if it is
/// claimable at the time bound.
pub(crate) const FAIL_UNREADABLE: &str = "\
UPDATE outbox_tasks FORCE INDEX (PRIMARY)
SET status = 'failed', finished_at = ?, updated_at = ?,
    last_error = ?, lease_owner = NULL, lease_expires_at = NULL
WHERE id = ? AND status IN ('available', 'waiting', 'running')
  AND next_attempt_at <= ?
  AND (lease_expires_at IS NULL OR lease_expires_at <= ?)";

// --------------------------------------------------------------- completion

/// Completions per statement: a bound on the statement's work and its JSON
/// (also bounded in bytes, see `json_rows::completions`). A stale and a
/// current result for one task may land in different statements: the stale
/// one matches no row in either, so splitting changes nothing but the
/// statement count.
pub(crate) const MAX_COMPLETIONS: usize = 2_000;

/// The completions as `JSON_TABLE` rows (see `json_rows::completions`).
/// Listed first and joined outright, each reaches its row by primary key.
macro_rules! completions_table {
    () => {
        "JSON_TABLE(?, '$[*]' COLUMNS (\
           id BIGINT PATH '$.id', \
           attempts BIGINT PATH '$.attempts', \
           owner VARCHAR(255) CHARACTER SET utf8mb4 PATH '$.owner', \
           status VARCHAR(16) PATH '$.status', \
           finished INT PATH '$.finished', \
           released INT PATH '$.released', \
           retry_us BIGINT PATH '$.retry_us', \
           error LONGTEXT CHARACTER SET utf8mb4 PATH '$.error')) AS j \
         STRAIGHT_JOIN outbox_tasks t FORCE INDEX (PRIMARY) ON t.id = j.id "
    };
}

/// [`transition::complete`]: each result applies only while `id`,
/// `lease_owner` and `attempts` still match its claim. The rows are reached
/// through the primary key from the JSON rows, in their order: left to
/// itself, the optimizer may walk the `(status, ...)` index's range of
/// running rows instead, locking other workers' rows on the way, and two
/// concurrent writes then deadlock. A batch holding a stale and a current
/// result for one task applies the current one, whichever comes first: the
/// stale row's `attempts` no longer matches. No `SET` expression reads a
/// column assigned before it. diesel-async reports rows matched, which here
/// is exactly the rows whose fence held (a row matched twice counts once).
///
/// [`transition::complete`]: diesel_outbox_core::transition::complete
pub(crate) const COMPLETE: &str = concat!(
    "UPDATE ",
    completions_table!(),
    "SET t.status = j.status, \
       t.next_attempt_at = IF(j.retry_us IS NULL, t.next_attempt_at, \
                              UTC_TIMESTAMP(6) + INTERVAL j.retry_us MICROSECOND), \
       t.last_error = IF(j.error IS NULL, t.last_error, j.error), \
       t.released = t.released + j.released, \
       t.finished_at = IF(j.finished = 1, UTC_TIMESTAMP(6), NULL), \
       t.lease_owner = NULL, t.lease_expires_at = NULL, t.updated_at = UTC_TIMESTAMP(6) \
     WHERE t.status = 'running' AND t.attempts = j.attempts AND t.lease_owner = j.owner"
);

/// The `(id, attempts)` of the results whose claim is still current, locked:
/// exactly the rows [`COMPLETE`] then applies to.
pub(crate) const CURRENT_FENCES: &str = concat!(
    "SELECT t.id, t.attempts FROM ",
    completions_table!(),
    "WHERE t.status = 'running' AND t.attempts = j.attempts AND t.lease_owner = j.owner \
     FOR UPDATE"
);

// ------------------------------------------------------------ ordering keys

/// Adds tasks to `n` keys' counts, `(key, added)` pairs in key order, so the
/// locks are taken in key order.
pub(crate) fn open_keys(n: usize) -> String {
    format!(
        "INSERT INTO outbox_ordering_keys (ordering_key, open_tasks) VALUES {} \
         ON DUPLICATE KEY UPDATE open_tasks = open_tasks + VALUES(open_tasks)",
        vec!["(?, ?)"; n].join(", ")
    )
}

/// The counts of `n` keys, their rows locked in key order. After
/// [`open_keys`] in the same transaction it reads that transaction's own
/// versions, written over the latest committed ones.
pub(crate) fn lock_counts(n: usize) -> String {
    format!(
        "SELECT ordering_key, open_tasks FROM outbox_ordering_keys \
         WHERE ordering_key IN ({}) ORDER BY ordering_key FOR UPDATE",
        placeholders(n)
    )
}

/// Sets the counts of `n` keys: `(key, count)` pairs, then the keys.
pub(crate) fn set_counts(n: usize) -> String {
    format!(
        "UPDATE outbox_ordering_keys SET open_tasks = CASE {} END WHERE ordering_key IN ({})",
        "WHEN ordering_key = ? THEN ? ".repeat(n),
        placeholders(n)
    )
}

/// Drops the rows of `n` keys left with no open task.
pub(crate) fn drop_keys(n: usize) -> String {
    format!(
        "DELETE FROM outbox_ordering_keys WHERE ordering_key IN ({})",
        placeholders(n)
    )
}

/// The oldest blocked task of each of `n` keys: `MIN(id)` per key reads one
/// entry of the `(status, ordering_key, id)` index per key.
pub(crate) fn next_blocked(n: usize) -> String {
    format!(
        "SELECT MIN(id) AS id FROM outbox_tasks \
         WHERE status = 'blocked' AND ordering_key IN ({}) GROUP BY ordering_key",
        placeholders(n)
    )
}

/// [`transition::unblock`] for the ids listed.
///
/// [`transition::unblock`]: diesel_outbox_core::transition::unblock
pub(crate) fn unblock(ids: &str) -> String {
    format!(
        "UPDATE outbox_tasks FORCE INDEX (PRIMARY) \
         SET status = IF(next_attempt_at <= UTC_TIMESTAMP(6), 'available', 'waiting'), \
             updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({ids}) AND status = 'blocked'"
    )
}

// -------------------------------------------------------------------- moves

/// Due waiting tasks, up to `?`: a plain read (no lock, so it never waits
/// on a row a claim or a completion holds) of the status's index range.
pub(crate) const DUE: &str = "\
SELECT id FROM outbox_tasks
WHERE status = 'waiting' AND next_attempt_at <= UTC_TIMESTAMP(6)
ORDER BY next_attempt_at
LIMIT ?";

/// [`transition::promote`] for the ids [`DUE`] found, the `WHERE`
/// re-checking the rule, so a row another worker changed meanwhile is left
/// alone.
///
/// [`transition::promote`]: diesel_outbox_core::transition::promote
pub(crate) fn promote(ids: &str) -> String {
    format!(
        "UPDATE outbox_tasks FORCE INDEX (PRIMARY) \
         SET status = 'available', updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({ids}) AND status = 'waiting' AND next_attempt_at <= UTC_TIMESTAMP(6)"
    )
}

/// Running tasks whose lease lapsed, up to `?`, and whether their runs
/// reached `max_attempts` when read: a plain read like [`DUE`].
pub(crate) const LAPSED: &str = "\
SELECT id, CAST(COALESCE(attempts - released >= max_attempts, 0) AS SIGNED) AS exhausted
FROM outbox_tasks
WHERE status = 'running' AND lease_expires_at <= UTC_TIMESTAMP(6)
ORDER BY lease_expires_at
LIMIT ?";

/// [`transition::rescue`] for the ids listed whose runs are below
/// `max_attempts`: available again, with `?` (the lapse) as `last_error`.
///
/// [`transition::rescue`]: diesel_outbox_core::transition::rescue
pub(crate) fn rescue(ids: &str) -> String {
    format!(
        "UPDATE outbox_tasks FORCE INDEX (PRIMARY) SET \
             last_error = ?, status = 'available', \
             lease_owner = NULL, lease_expires_at = NULL, updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({ids}) AND status = 'running' AND lease_expires_at <= UTC_TIMESTAMP(6) \
           AND (max_attempts IS NULL OR attempts - released < max_attempts)"
    )
}

/// [`transition::rescue`] for one task whose runs reached `max_attempts`:
/// failed, the first `?` (the core's text) completed by the count in place
/// of the second. One statement per task, so its count says whether this
/// task was failed. MySQL evaluates `SET` left to right on the updated row;
/// no expression reads a column assigned before it.
///
/// [`transition::rescue`]: diesel_outbox_core::transition::rescue
pub(crate) const RESCUE_EXHAUSTED: &str = "\
UPDATE outbox_tasks FORCE INDEX (PRIMARY) SET
    finished_at = UTC_TIMESTAMP(6),
    last_error = REPLACE(?, ?, attempts - released),
    status = 'failed',
    lease_owner = NULL, lease_expires_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE id = ? AND status = 'running' AND lease_expires_at <= UTC_TIMESTAMP(6)
  AND attempts - released >= max_attempts";

// ----------------------------------------------------------------- operator

/// [`transition::requeue`] for the failed ones of the ids listed.
///
/// [`transition::requeue`]: diesel_outbox_core::transition::requeue
pub(crate) fn requeue(ids: &str) -> String {
    format!(
        "UPDATE outbox_tasks \
         SET status = 'available', next_attempt_at = UTC_TIMESTAMP(6), expires_at = NULL, \
             finished_at = NULL, updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({ids}) AND status = 'failed'"
    )
}

/// The keys of the ids listed, to lock before their rows.
pub(crate) fn keys_of(ids: &str) -> String {
    format!(
        "SELECT DISTINCT ordering_key FROM outbox_tasks \
         WHERE id IN ({ids}) AND ordering_key IS NOT NULL"
    )
}

/// Locks the rows of `n` keys, in key order.
pub(crate) fn lock_keys(n: usize) -> String {
    format!(
        "SELECT ordering_key FROM outbox_ordering_keys WHERE ordering_key IN ({}) \
         ORDER BY ordering_key FOR UPDATE",
        placeholders(n)
    )
}

/// The discardable rows of the ids listed, locked; a row another
/// transaction holds is being claimed, completed or moved right now: it is
/// skipped.
pub(crate) fn discardable(ids: &str) -> String {
    format!(
        "SELECT id, status, ordering_key FROM outbox_tasks WHERE id IN ({ids}) \
         AND status IN ('available', 'waiting', 'blocked', 'failed') FOR UPDATE SKIP LOCKED"
    )
}

/// [`transition::discard`] for the ids [`discardable`] locked.
///
/// [`transition::discard`]: diesel_outbox_core::transition::discard
pub(crate) fn discard(ids: &str) -> String {
    format!(
        "UPDATE outbox_tasks FORCE INDEX (PRIMARY) \
         SET status = 'discarded', finished_at = UTC_TIMESTAMP(6), \
         updated_at = UTC_TIMESTAMP(6), lease_owner = NULL, lease_expires_at = NULL \
         WHERE id IN ({ids})"
    )
}

/// The oldest rows a purge may delete, up to `?`, read without a lock like
/// [`DUE`]: unfinished rows are never purged, nor a failed row that holds
/// its key.
///
/// A single `DELETE ... ORDER BY finished_at LIMIT ?` locked each row
/// through the `finished_at` index and then through the primary key, and
/// two relays purging at once deadlocked on the same oldest rows (each
/// holding a lock the other awaited). Locking them with `SKIP LOCKED`
/// instead was no cure: MariaDB waited for the `finished_at` index
/// records another purge held, and the purges still deadlocked.
pub(crate) const PURGEABLE: &str = "\
SELECT id FROM outbox_tasks
WHERE finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
  AND NOT (status = 'failed' AND ordering_key IS NOT NULL)
ORDER BY finished_at
LIMIT ?";

/// Deletes the rows of a JSON array of the ids [`PURGEABLE`] read, in id
/// order, each reached through the primary key, the `WHERE` re-checking
/// the rule (`?`: the same age). Two purges of the same rows lock them in
/// the same order: the second waits for the first, then finds them gone.
/// Written as `id IN (...)`, MariaDB walked the primary key across the
/// list's range, locking the running rows between its ids, and met the
/// completion writes of those rows in a deadlock.
pub(crate) const PURGE: &str = "\
DELETE t FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
STRAIGHT_JOIN outbox_tasks t FORCE INDEX (PRIMARY) ON t.id = j.id
WHERE t.finished_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
  AND NOT (t.status = 'failed' AND t.ordering_key IS NOT NULL)";

// -------------------------------------------------------------------- reads

/// Exact counts of every status but succeeded, each a range of the
/// `(status, id)` index holding only rows of that status.
pub(crate) const COUNTS: &str = "\
SELECT status, COUNT(*) AS n FROM outbox_tasks
WHERE status IN ('available', 'waiting', 'running', 'blocked', 'failed', 'discarded')
GROUP BY status";

/// The server's estimate of the rows of the table bound second (the tasks
/// table's name), in the database bound first (its schema) or, for NULL,
/// the current one: bound, since a name in a string would be renamed as a
/// table is, with its schema before it.
pub(crate) const TABLE_ROWS: &str = "\
SELECT 'table' AS status, CAST(COALESCE(TABLE_ROWS, 0) AS SIGNED) AS n
FROM information_schema.TABLES
WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?";

/// A relay's heartbeat: its row written anew, the times from ages on the
/// server's clock (up, time to live, since the last claim and write, `NULL`
/// for never), so relays whose hosts' clocks differ agree.
pub(crate) const BEAT: &str = "\
INSERT INTO outbox_relays (owner, host, pid, version, started_at, beat_at, expires_at,
                           last_claim_at, last_write_at)
VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6),
        UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND,
        UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
    host = VALUES(host), pid = VALUES(pid), version = VALUES(version),
    started_at = VALUES(started_at), beat_at = VALUES(beat_at), expires_at = VALUES(expires_at),
    last_claim_at = VALUES(last_claim_at), last_write_at = VALUES(last_write_at)";

/// The rows of relays whose heartbeats stopped a day ago.
pub(crate) const SWEEP_RELAYS: &str =
    "DELETE FROM outbox_relays WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL 1 DAY";

/// A stopped relay's row.
pub(crate) const FORGET_RELAY: &str = "DELETE FROM outbox_relays WHERE owner = ?";

/// The relays heard of within the last day, times as ages in microseconds.
pub(crate) const RELAYS: &str = "\
SELECT owner, host, pid, version,
    TIMESTAMPDIFF(MICROSECOND, started_at, UTC_TIMESTAMP(6)) AS started_us,
    TIMESTAMPDIFF(MICROSECOND, beat_at, UTC_TIMESTAMP(6)) AS beat_us,
    TIMESTAMPDIFF(MICROSECOND, last_claim_at, UTC_TIMESTAMP(6)) AS claim_us,
    TIMESTAMPDIFF(MICROSECOND, last_write_at, UTC_TIMESTAMP(6)) AS write_us,
    CAST(CASE WHEN expires_at > UTC_TIMESTAMP(6) THEN 1 ELSE 0 END AS SIGNED) AS live
FROM outbox_relays WHERE expires_at >= UTC_TIMESTAMP(6) - INTERVAL 1 DAY ORDER BY owner";

/// The exact count of succeeded rows, on a small table.
pub(crate) const COUNT_SUCCEEDED: &str =
    "SELECT 'succeeded' AS status, COUNT(*) AS n FROM outbox_tasks WHERE status = 'succeeded'";

/// The ages [`Ages::from_us`] takes, each through its status's index:
/// how long the available task first in claim order and the waiting task
/// due first have been due (negative: not yet), and how long the running
/// task whose lease ends first has been claimed. One row, `NULL` where no
/// task has that status.
///
/// [`Ages::from_us`]: diesel_outbox_core::Ages::from_us
pub(crate) const AGES: &str = "\
SELECT
    (SELECT TIMESTAMPDIFF(MICROSECOND, next_attempt_at, UTC_TIMESTAMP(6))
     FROM outbox_tasks FORCE INDEX (outbox_tasks_claim_idx)
     WHERE status = 'available' ORDER BY id LIMIT 1) AS available,
    (SELECT TIMESTAMPDIFF(MICROSECOND, next_attempt_at, UTC_TIMESTAMP(6))
     FROM outbox_tasks FORCE INDEX (outbox_tasks_due_idx)
     WHERE status = 'waiting' ORDER BY next_attempt_at LIMIT 1) AS waiting,
    (SELECT TIMESTAMPDIFF(MICROSECOND, updated_at, UTC_TIMESTAMP(6))
     FROM outbox_tasks FORCE INDEX (outbox_tasks_lease_idx)
     WHERE status = 'running' AND lease_expires_at IS NOT NULL
     ORDER BY lease_expires_at LIMIT 1) AS running";

/// Microseconds until the next waiting task is due.
pub(crate) const NEXT_DUE: &str = "\
SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(next_attempt_at)) AS us
FROM outbox_tasks WHERE status = 'waiting'";

// -------------------------------------------------------------------- inbox

/// One row affected: new; none: the key is held. A concurrent insert of the
/// same key waits for the first transaction to end, then inserts nothing (it
/// committed) or inserts (it rolled back).
///
/// Not `ON DUPLICATE KEY UPDATE`: diesel-async's MySQL connection sets
/// `CLIENT_FOUND_ROWS`, under which a duplicate left unchanged counts as one
/// affected row, like an insert. `IGNORE` turns other errors into warnings
/// too, but none can happen here: both values are bound, never NULL, and
/// checked against the column widths before the insert.
pub(crate) const RECORD: &str = "\
INSERT IGNORE INTO outbox_inbox (consumer, message_id, applied_at)
VALUES (?, ?, UTC_TIMESTAMP(6))";

/// The oldest records first, applied more than `?` microseconds ago, at
/// most `?`.
pub(crate) const PURGE_INBOX: &str = "\
DELETE FROM outbox_inbox
WHERE applied_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY applied_at
LIMIT ?";
