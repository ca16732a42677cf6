//! Every statement of the PostgreSQL store, named as in the other
//! backends' `statements` modules, so one statement reads side by side in
//! three files.
//!
//! Each statement that reads rows by status goes through the partial index
//! holding only rows of that status, at most `limit` of them, and skips rows
//! other workers hold (`SKIP LOCKED`); the rows it locked are then reached
//! through the primary key, handed over as an array (`= ANY(ARRAY(...))`),
//! so that no plan joins them to a scan of the whole table. Their `LIMIT`
//! comes through a subquery (`LIMIT (SELECT $n)`), a value no plan can
//! see: planner statistics of a queue table are stale by nature, and with
//! statistics taken while few rows had a status, a plain `LIMIT 100` let a
//! custom plan gather every row of that status and sort them (213 ms for a
//! claim of 100 beside 340,000 available rows the statistics never saw,
//! against 2 ms walking the index in order). The claim's lower id bound
//! comes the same way, for the reason [`CLAIM_DUE`] gives. The plan tests
//! (`plans/`) check this on real backlogs. Times are the server's `now()`.

// ------------------------------------------------------------------ enqueue

/// One row, every column bound (absent ones as NULL), so the text never
/// varies and each connection prepares it once. The status is
/// [`transition::enqueued`]: blocked unless the task heads its key, else
/// waiting while its `not_before` (on the database clock) is ahead.
///
/// [`transition::enqueued`]: diesel_outbox_core::transition::enqueued
pub(crate) const INSERT_ONE: &str = "\
INSERT INTO outbox_tasks (kind, version, payload, headers, ordering_key, dedup_key,
                          max_attempts, next_attempt_at, expires_at, status)
VALUES ($1, $2, $3, $4, $5, $6, $7, COALESCE($8, now()), $9,
        CASE WHEN NOT $10 THEN 'blocked' WHEN $8 > now() THEN 'waiting' ELSE 'available' END)
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
RETURNING id";

/// [`INSERT_ONE`] for the common task that uses none of the options beyond
/// its headers: no ordering key (so it heads none), no `dedup_key` (so
/// nothing can conflict), no `max_attempts`, `not_before` or `expires_at`.
/// Four values bound instead of ten, and no speculative insertion for a
/// conflict that cannot happen; the row is the one [`INSERT_ONE`] writes for
/// such a task.
pub(crate) const INSERT_PLAIN: &str = "\
INSERT INTO outbox_tasks (kind, version, payload, headers, next_attempt_at, status)
VALUES ($1, $2, $3, $4, now(), 'available')
RETURNING id";

/// [`INSERT_PLAIN`] that also queues [`NOTIFY`]'s notification, for a
/// store that wakes relays at commit: one statement, one round trip, where
/// a separate `NOTIFY` would add a second.
pub(crate) const INSERT_PLAIN_NOTIFY: &str = "\
INSERT INTO outbox_tasks (kind, version, payload, headers, next_attempt_at, status)
VALUES ($1, $2, $3, $4, now(), 'available')
RETURNING id, pg_notify('outbox_tasks', '') AS notified";

/// Inserts many tasks, some with a `dedup_key`, in one statement. Ids are
/// drawn from the table's sequence inside the statement, so each input row
/// knows its own id whatever order PostgreSQL inserts in; rows skipped for
/// a held `dedup_key` come back with `inserted` false. (A batch without
/// `dedup_key`s takes the insert `batch_insert.rs` shapes to it.)
pub(crate) const INSERT_MANY: &str = "\
WITH input AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('outbox_tasks', 'id')) AS id, i.*
    FROM unnest($1::text[], $2::int4[], $3::bytea[], $4::jsonb[], $5::text[], $6::text[],
                $7::int4[], $8::timestamptz[], $9::timestamptz[], $10::bool[])
         WITH ORDINALITY AS i(kind, version, payload, headers, ordering_key, dedup_key,
                              max_attempts, next_attempt_at, expires_at, head, ord)
), inserted AS (
    INSERT INTO outbox_tasks (id, kind, version, payload, headers, ordering_key, dedup_key,
                              max_attempts, next_attempt_at, expires_at, status)
    SELECT id, kind, version, payload, headers, ordering_key, dedup_key,
           max_attempts, COALESCE(next_attempt_at, now()), expires_at,
           CASE WHEN NOT head THEN 'blocked'
                WHEN COALESCE(next_attempt_at, now()) > now() THEN 'waiting'
                ELSE 'available' END
    FROM input ORDER BY ord
    ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT input.id, input.dedup_key, inserted.id IS NOT NULL AS inserted
FROM input LEFT JOIN inserted ON inserted.id = input.id
ORDER BY input.ord";

/// The tasks holding the `dedup_key`s listed.
pub(crate) const HELD: &str =
    "SELECT dedup_key, id FROM outbox_tasks WHERE dedup_key = ANY($1::text[])";

// ------------------------------------------------------------------- claims

/// [`transition::claim`] by id: available, or waiting and due, or running
/// with a lapsed lease; not expired ([`transition::availability`] in SQL).
///
/// [`transition::claim`]: diesel_outbox_core::transition::claim
/// [`transition::availability`]: diesel_outbox_core::transition::availability
pub(crate) const CLAIM_ONE: &str = concat!(
    "\
UPDATE outbox_tasks t
SET status = 'running', attempts = t.attempts + 1, lease_owner = $2,
    lease_expires_at = now() + $3 * interval '1 microsecond', updated_at = now()
WHERE t.id = $1 AND t.status IN ('available', 'waiting', 'running')
  AND t.next_attempt_at <= now()
  AND (t.lease_expires_at IS NULL OR t.lease_expires_at <= now())
  AND (t.expires_at IS NULL OR t.expires_at > now())
RETURNING ",
    diesel_outbox_sql::task_columns!()
);

/// A row a claim by id did not take, with the database's time, for
/// [`transition::availability`] to say why.
///
/// [`transition::availability`]: diesel_outbox_core::transition::availability
pub(crate) const INSPECT: &str = "SELECT t.*, now() AS db_now FROM outbox_tasks t WHERE t.id = $1";

/// [`transition::expire`] for one row a claim by id found expired.
///
/// [`transition::expire`]: diesel_outbox_core::transition::expire
pub(crate) const EXPIRE_ONE: &str = "\
UPDATE outbox_tasks
SET status = 'failed', finished_at = now(), updated_at = now(), last_error = $2,
    lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 AND status IN ('available', 'waiting', 'running') AND expires_at <= now()
  AND (lease_expires_at IS NULL OR lease_expires_at <= now())";

/// Available rows only, in id order; expired ones met on the way are
/// failed ([`transition::claim`] and [`transition::expire`] in one
/// statement).
///
/// The ids are locked first and handed to the update as an array
/// (`= ANY(ARRAY(...))`), so each row is reached through the primary key
/// on all but the smallest tables. Joined as a row set instead, the batch's
/// estimated size made PostgreSQL hash it against a full scan of the table
/// whenever the table held fewer than some tens of thousands of rows: 10,000
/// rows read for a claim of 256.
///
/// Its lower id bound comes through a subquery too (`d.id > (SELECT $1)`),
/// like its `LIMIT`. A claim from the lowest id binds 0, below the lowest
/// id the planner's statistics hold, and a custom plan that sees such a
/// bound asks the primary key for the table's real lowest id: a walk from
/// its low end past every entry that retention's purges left until vacuum,
/// at every claim. Under sustained load, where a claim from the lowest id
/// follows every short claim, that planning took about a third of the
/// server's CPU and the relays fell behind; the plan test
/// `planning_after_a_purge_of_the_oldest_rows` checks it stays a few
/// buffers.
///
/// [`transition::claim`]: diesel_outbox_core::transition::claim
/// [`transition::expire`]: diesel_outbox_core::transition::expire
pub(crate) const CLAIM_DUE: &str = concat!(
    "\
UPDATE outbox_tasks t SET
    status = CASE WHEN t.expires_at <= now() THEN 'failed' ELSE 'running' END,
    finished_at = CASE WHEN t.expires_at <= now() THEN now() END,
    last_error = CASE WHEN t.expires_at <= now() THEN $5 ELSE t.last_error END,
    attempts = CASE WHEN t.expires_at <= now() THEN t.attempts ELSE t.attempts + 1 END,
    lease_owner = CASE WHEN t.expires_at <= now() THEN NULL ELSE $3 END,
    lease_expires_at = CASE WHEN t.expires_at <= now() THEN NULL
                            ELSE now() + $4 * interval '1 microsecond' END,
    updated_at = now()
WHERE t.id = ANY(ARRAY(
    SELECT d.id FROM outbox_tasks d
    WHERE d.status = 'available' AND d.id > (SELECT $1)
      AND d.next_attempt_at <= COALESCE($6, now())
    ORDER BY d.id
    LIMIT (SELECT $2)
    FOR UPDATE SKIP LOCKED))
RETURNING ",
    diesel_outbox_sql::claim_columns!()
);

// --------------------------------------------------------------- completion

/// [`transition::complete`]: each result applies only while `id`,
/// `lease_owner` and `attempts` still match its claim and the task is
/// running.
///
/// The running check is written `t.status || '' = 'running'` so that it
/// cannot select the partial index of running tasks: each row is reached
/// from the batch through the primary key. Planner statistics of a queue
/// table are stale by nature (taken when the tasks were still available),
/// and with `status = 'running'` written plainly the planner walks that
/// index instead, past every entry the claims and completions before left
/// in it until vacuum, and joins the batch to all of it: measured on a
/// 20,000-task drain, 75 ms per write of 100 instead of 3 ms.
///
/// Each array reaches `unnest` through a scalar subquery (`(SELECT $1)`),
/// so the planner does not size the batch from the values bound, in custom
/// plans as in generic ones: it takes the batch for a few rows and looks
/// each one up by primary key. Sized from the values, a write of 256 on a
/// table of 10,000 was planned as a hash join over a full scan of the
/// table (measured: 13 ms instead of 4).
///
/// [`transition::complete`]: diesel_outbox_core::transition::complete
pub(crate) const COMPLETE: &str = concat!(complete!(), "\nRETURNING t.id, t.attempts");

/// [`COMPLETE`] without its `RETURNING`, for a write that needs only how
/// many applied.
pub(crate) const COMPLETE_COUNTED: &str = complete!();

/// The text of [`COMPLETE`] before its `RETURNING`.
macro_rules! complete {
    () => {
        "\
UPDATE outbox_tasks t SET
    status = c.status,
    next_attempt_at = CASE WHEN c.status IN ('available', 'waiting')
                           THEN now() + c.retry_us * interval '1 microsecond'
                           ELSE t.next_attempt_at END,
    last_error = COALESCE(c.last_error, t.last_error),
    released = t.released + CASE WHEN c.released THEN 1 ELSE 0 END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    finished_at = CASE WHEN c.status IN ('available', 'waiting') THEN NULL ELSE now() END,
    updated_at = now()
FROM unnest((SELECT $1::int8[]), (SELECT $2::text[]), (SELECT $3::int8[]),
            (SELECT $4::text[]), (SELECT $5::int8[]), (SELECT $6::text[]),
            (SELECT $7::bool[]))
     AS c(id, owner, attempt, status, retry_us, last_error, released)
WHERE t.id = c.id AND t.lease_owner = c.owner AND t.attempts = c.attempt
  AND t.status || '' = 'running'"
    };
}
use complete;

/// The common case, all succeeded for one owner: fewer arrays to send and a
/// simpler plan (the running check and the arrays written as in
/// [`COMPLETE`]).
pub(crate) const SUCCEED: &str = concat!(succeed!(), "\nRETURNING t.id, t.attempts");

/// [`SUCCEED`] without its `RETURNING`.
pub(crate) const SUCCEED_COUNTED: &str = succeed!();

/// The text of [`SUCCEED`] before its `RETURNING`.
macro_rules! succeed {
    () => {
        "\
UPDATE outbox_tasks t SET
    status = 'succeeded', last_error = '', lease_owner = NULL, lease_expires_at = NULL,
    finished_at = now(), updated_at = now()
FROM unnest((SELECT $1::int8[]), (SELECT $2::int8[])) AS c(id, attempt)
WHERE t.id = c.id AND t.attempts = c.attempt AND t.lease_owner = $3
  AND t.status || '' = 'running'"
    };
}
use succeed;

// ------------------------------------------------------------ ordering keys

/// Adds tasks to their keys' counts, in key order, returning the counts
/// after; each key's row stays locked until the transaction ends.
pub(crate) const OPEN_KEYS: &str = "\
INSERT INTO outbox_ordering_keys (ordering_key, open_tasks)
SELECT k, n FROM unnest($1::text[], $2::int8[]) AS u(k, n) ORDER BY k
ON CONFLICT (ordering_key)
DO UPDATE SET open_tasks = outbox_ordering_keys.open_tasks + EXCLUDED.open_tasks
RETURNING ordering_key, open_tasks";

/// Takes finished tasks off their keys' counts, the rows locked in key
/// order first, returning the counts after.
pub(crate) const TAKE_KEYS: &str = "\
WITH locked AS (
    SELECT ordering_key FROM outbox_ordering_keys
    WHERE ordering_key = ANY($1::text[])
    ORDER BY ordering_key
    FOR UPDATE
)
UPDATE outbox_ordering_keys k SET open_tasks = GREATEST(k.open_tasks - d.n, 0)
FROM unnest($1::text[], $2::int8[]) AS d(key, n), locked
WHERE k.ordering_key = d.key AND locked.ordering_key = d.key
RETURNING k.ordering_key, k.open_tasks";

/// [`transition::unblock`] for the oldest blocked task of each key in `$1`,
/// and the rows of the keys in `$2` dropped, in one statement.
///
/// [`transition::unblock`]: diesel_outbox_core::transition::unblock
pub(crate) const MOVE_KEYS_ON: &str = "\
WITH next AS (
    SELECT b.id FROM unnest($1::text[]) AS k(key)
    CROSS JOIN LATERAL (
        SELECT id FROM outbox_tasks
        WHERE status = 'blocked' AND ordering_key = k.key
        ORDER BY id LIMIT 1
    ) b
), unblocked AS (
    UPDATE outbox_tasks t
    SET status = CASE WHEN t.next_attempt_at <= now() THEN 'available' ELSE 'waiting' END,
        updated_at = now()
    FROM next WHERE t.id = next.id AND t.status = 'blocked'
    RETURNING t.id
), emptied AS (
    DELETE FROM outbox_ordering_keys WHERE ordering_key = ANY($2::text[]) AND open_tasks = 0
)
SELECT COUNT(*) AS open_tasks, '' AS ordering_key FROM unblocked";

// -------------------------------------------------------------------- moves

/// [`transition::promote`] for up to `$1` due waiting tasks.
///
/// [`transition::promote`]: diesel_outbox_core::transition::promote
pub(crate) const PROMOTE: &str = "\
UPDATE outbox_tasks t SET status = 'available', updated_at = now()
WHERE t.id = ANY(ARRAY(
    SELECT id FROM outbox_tasks
    WHERE status = 'waiting' AND next_attempt_at <= now()
    ORDER BY next_attempt_at
    LIMIT (SELECT $1)
    FOR UPDATE SKIP LOCKED))
  AND t.status = 'waiting'";

/// [`transition::rescue`] for up to `$1` running tasks whose lease lapsed:
/// failed when the runs reached `max_attempts`, with `$3` (the core's text)
/// completed by the count in place of `$4`; available with `$2` otherwise.
///
/// [`transition::rescue`]: diesel_outbox_core::transition::rescue
pub(crate) const RESCUE: &str = "\
UPDATE outbox_tasks t SET
    status = CASE WHEN t.attempts - t.released >= t.max_attempts THEN 'failed'
                  ELSE 'available' END,
    finished_at = CASE WHEN t.attempts - t.released >= t.max_attempts THEN now() END,
    last_error = CASE WHEN t.attempts - t.released >= t.max_attempts
                      THEN replace($3, $4, (t.attempts - t.released)::text)
                      ELSE $2 END,
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE t.id = ANY(ARRAY(
    SELECT id FROM outbox_tasks
    WHERE status = 'running' AND lease_expires_at <= now()
    ORDER BY lease_expires_at
    LIMIT (SELECT $1)
    FOR UPDATE SKIP LOCKED))
  AND t.status = 'running' AND t.lease_expires_at <= now()
RETURNING t.id, t.status = 'failed' AS failed";

// ----------------------------------------------------------------- operator

/// [`transition::requeue`] for the failed ones of the ids in `$1`.
///
/// [`transition::requeue`]: diesel_outbox_core::transition::requeue
pub(crate) const REQUEUE: &str = "\
UPDATE outbox_tasks
SET status = 'available', next_attempt_at = now(), expires_at = NULL, finished_at = NULL,
    updated_at = now()
WHERE id = ANY($1) AND status = 'failed'";

/// The keys of a batch, to lock before its rows.
pub(crate) const KEYS_OF: &str = "\
SELECT DISTINCT ordering_key FROM outbox_tasks
WHERE id = ANY($1) AND ordering_key IS NOT NULL
ORDER BY ordering_key";

/// Locks the rows of the keys in `$1`, in key order.
pub(crate) const LOCK_KEYS: &str = "\
SELECT ordering_key FROM outbox_ordering_keys WHERE ordering_key = ANY($1)
ORDER BY ordering_key FOR UPDATE";

/// [`transition::discard`] for the ids in `$1`. A row another transaction
/// holds is being claimed, completed or moved right now: it is skipped.
///
/// [`transition::discard`]: diesel_outbox_core::transition::discard
pub(crate) const DISCARD: &str = "\
WITH target AS (
    SELECT id, status, ordering_key FROM outbox_tasks
    WHERE id = ANY($1) AND status IN ('available', 'waiting', 'blocked', 'failed')
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_tasks t SET status = 'discarded', finished_at = now(), updated_at = now(),
    lease_owner = NULL, lease_expires_at = NULL
FROM target WHERE t.id = target.id
RETURNING target.status, target.ordering_key";

/// Unfinished rows are never purged, nor a failed row that holds its key.
/// The rows it locked are deleted through the primary key, handed over as
/// an array as in the moves.
pub(crate) const PURGE: &str = "\
DELETE FROM outbox_tasks WHERE id = ANY(ARRAY(
    SELECT id FROM outbox_tasks
    WHERE finished_at < now() - $1 * interval '1 microsecond'
      AND NOT (status = 'failed' AND ordering_key IS NOT NULL)
    ORDER BY finished_at
    LIMIT (SELECT $2)
    FOR UPDATE SKIP LOCKED))";

// -------------------------------------------------------------------- reads

/// Exact counts, each through the index holding only its status; the
/// planner's row estimate of the table, from which the succeeded rows are
/// estimated on a large table.
pub(crate) const STATS: &str = "\
SELECT 'available' AS status, COUNT(*) AS n FROM outbox_tasks WHERE status = 'available'
UNION ALL SELECT 'waiting', COUNT(*) FROM outbox_tasks WHERE status = 'waiting'
UNION ALL SELECT 'running', COUNT(*) FROM outbox_tasks WHERE status = 'running'
UNION ALL SELECT 'blocked', COUNT(*) FROM outbox_tasks WHERE status = 'blocked'
UNION ALL SELECT 'failed', COUNT(*) FROM outbox_tasks WHERE status = 'failed'
UNION ALL SELECT 'discarded', COUNT(*) FROM outbox_tasks WHERE status = 'discarded'
UNION ALL SELECT 'table', reltuples::bigint FROM pg_class WHERE oid = 'outbox_tasks'::regclass";

/// The ages [`Ages::from_us`] takes, each through its status's index: how
/// long the available task first in claim order and the waiting task due
/// first have been due (negative: not yet), and how long the running task
/// whose lease ends first has been claimed. One row, `NULL` where no task
/// has that status.
///
/// [`Ages::from_us`]: diesel_outbox_core::Ages::from_us
pub(crate) const AGES: &str = "\
SELECT
    (SELECT (EXTRACT(EPOCH FROM now() - next_attempt_at) * 1000000)::bigint
     FROM outbox_tasks WHERE status = 'available' ORDER BY id LIMIT 1) AS available,
    (SELECT (EXTRACT(EPOCH FROM now() - next_attempt_at) * 1000000)::bigint
     FROM outbox_tasks WHERE status = 'waiting' ORDER BY next_attempt_at LIMIT 1) AS waiting,
    (SELECT (EXTRACT(EPOCH FROM now() - updated_at) * 1000000)::bigint
     FROM outbox_tasks WHERE status = 'running' AND lease_expires_at IS NOT NULL
     ORDER BY lease_expires_at LIMIT 1) AS running";

/// A relay's heartbeat: its row written anew, the times from ages on the
/// server's clock (`$5` up, `$6` time to live, `$7` and `$8` since the
/// last claim and write, `NULL` for never), so relays whose hosts' clocks
/// differ agree.
pub(crate) const BEAT: &str = "\
INSERT INTO outbox_relays (owner, host, pid, version, started_at, beat_at, expires_at,
                           last_claim_at, last_write_at)
VALUES ($1, $2, $3, $4, now() - $5 * interval '1 microsecond', now(),
        now() + $6 * interval '1 microsecond', now() - $7 * interval '1 microsecond',
        now() - $8 * interval '1 microsecond')
ON CONFLICT (owner) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, version = excluded.version,
    started_at = excluded.started_at, beat_at = excluded.beat_at,
    expires_at = excluded.expires_at, last_claim_at = excluded.last_claim_at,
    last_write_at = excluded.last_write_at";

/// The rows of relays whose heartbeats stopped a day ago.
pub(crate) const SWEEP_RELAYS: &str =
    "DELETE FROM outbox_relays WHERE expires_at < now() - interval '1 day'";

/// A stopped relay's row.
pub(crate) const FORGET_RELAY: &str = "DELETE FROM outbox_relays WHERE owner = $1";

/// The relays heard of within the last day, times as ages in microseconds.
pub(crate) const RELAYS: &str = "\
SELECT owner, host, pid, version,
    (EXTRACT(EPOCH FROM now() - started_at) * 1000000)::bigint AS started_us,
    (EXTRACT(EPOCH FROM now() - beat_at) * 1000000)::bigint AS beat_us,
    (EXTRACT(EPOCH FROM now() - last_claim_at) * 1000000)::bigint AS claim_us,
    (EXTRACT(EPOCH FROM now() - last_write_at) * 1000000)::bigint AS write_us,
    (CASE WHEN expires_at > now() THEN 1 ELSE 0 END)::bigint AS live
FROM outbox_relays WHERE expires_at >= now() - interval '1 day' ORDER BY owner";

/// The exact count of succeeded rows, on a small table.
pub(crate) const COUNT_SUCCEEDED: &str =
    "SELECT 'succeeded' AS status, COUNT(*) AS n FROM outbox_tasks WHERE status = 'succeeded'";

/// Microseconds until the next waiting task is due.
pub(crate) const NEXT_DUE: &str = "\
SELECT (EXTRACT(EPOCH FROM MIN(next_attempt_at) - now()) * 1000000)::bigint AS us
FROM outbox_tasks WHERE status = 'waiting'";

// -------------------------------------------------------------------- inbox

/// A concurrent insert of the same key waits for the first transaction to
/// end, then inserts nothing (it committed) or inserts (it rolled back).
/// Only the key's conflict is absorbed: any other failure is an error.
pub(crate) const RECORD: &str = "\
INSERT INTO outbox_inbox (consumer, message_id) VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO NOTHING";

/// The oldest records first, at most `$2`, passing over those another purge
/// holds. The locked rows reach the `DELETE` by their address (`ctid`),
/// which PostgreSQL reads with a TID scan on all but the smallest tables
/// (about a thousand records, where reading them all costs less): matched
/// by key instead, a table of a few thousand was planned as a scan of all
/// of them. The library never updates a record; one that another program
/// updates while the purge runs is locked at an address the statement's
/// snapshot does not see, so it stays for a later purge.
pub(crate) const PURGE_INBOX: &str = "\
DELETE FROM outbox_inbox WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM outbox_inbox
    WHERE applied_at < now() - $1 * interval '1 microsecond'
    ORDER BY applied_at
    LIMIT (SELECT $2)
    FOR UPDATE SKIP LOCKED))";

// ----------------------------------------------------------------- wake-ups

/// A notification on [`CHANNEL`](crate::CHANNEL), which PostgreSQL delivers
/// at commit (and drops on rollback); several in one transaction arrive as
/// one.
pub(crate) const NOTIFY: &str = "SELECT pg_notify('outbox_tasks', '')";
