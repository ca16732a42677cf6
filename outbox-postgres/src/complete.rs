//! Fenced completion writes: one statement for a whole batch of results.

use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use outbox_core::{Result, Status, transition::Completion};

use outbox_diesel::{micros, postgres_error};

/// Applies each result only while `id`, `lease_owner` and `attempts` still
/// match its claim ([`outbox_core::transition::complete`] in SQL).
const COMPLETE: &str = "\
UPDATE outbox_tasks t SET
    status = c.status,
    next_attempt_at = CASE WHEN c.status = 'pending'
                           THEN now() + c.retry_us * interval '1 microsecond'
                           ELSE t.next_attempt_at END,
    last_error = COALESCE(c.last_error, t.last_error),
    released = t.released + CASE WHEN c.released THEN 1 ELSE 0 END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    finished_at = CASE WHEN c.status = 'pending' THEN NULL ELSE now() END,
    updated_at = now()
FROM unnest($1::int8[], $2::text[], $3::int8[], $4::text[], $5::int8[], $6::text[],
            $7::bool[])
     AS c(id, owner, attempt, status, retry_us, last_error, released)
WHERE t.id = c.id AND t.lease_owner = c.owner AND t.attempts = c.attempt
  AND t.status = 'pending'";

/// The common case, all succeeded for one owner: fewer arrays to send and a
/// simpler plan.
const SUCCEED: &str = "\
UPDATE outbox_tasks t SET
    status = 'succeeded', last_error = '', lease_owner = NULL, lease_expires_at = NULL,
    finished_at = now(), updated_at = now()
FROM unnest($1::int8[], $2::int8[]) AS c(id, attempt)
WHERE t.id = c.id AND t.attempts = c.attempt AND t.lease_owner = $3 AND t.status = 'pending'";

/// Writes `completions`; returns how many were still current and applied.
pub(crate) async fn write(conn: &mut AsyncPgConnection, completions: &[Completion]) -> Result<u64> {
    let Some(first) = completions.first() else {
        return Ok(0);
    };
    let owner = &first.fence.owner;
    if completions
        .iter()
        .all(|c| c.status == Status::Succeeded && &c.fence.owner == owner)
    {
        return succeed(conn, owner, completions).await;
    }
    let applied = diesel::sql_query(COMPLETE)
        .bind::<Array<BigInt>, _>(column(completions, |c| c.fence.id.get()))
        .bind::<Array<Text>, _>(column(completions, |c| c.fence.owner.as_str()))
        .bind::<Array<BigInt>, _>(column(completions, |c| c.fence.attempt))
        .bind::<Array<Text>, _>(column(completions, |c| c.status.as_str()))
        .bind::<Array<BigInt>, _>(column(completions, |c| c.retry_in.map_or(0, micros)))
        .bind::<Array<Nullable<Text>>, _>(column(completions, |c| c.last_error.as_deref()))
        .bind::<Array<Bool>, _>(column(completions, |c| c.released))
        .execute(conn)
        .await
        .map_err(postgres_error)?;
    Ok(applied as u64)
}

async fn succeed(
    conn: &mut AsyncPgConnection,
    owner: &str,
    completions: &[Completion],
) -> Result<u64> {
    let applied = diesel::sql_query(SUCCEED)
        .bind::<Array<BigInt>, _>(column(completions, |c| c.fence.id.get()))
        .bind::<Array<BigInt>, _>(column(completions, |c| c.fence.attempt))
        .bind::<Text, _>(owner)
        .execute(conn)
        .await
        .map_err(postgres_error)?;
    Ok(applied as u64)
}

/// One array parameter: `value` of every completion, in order.
fn column<'c, T>(completions: &'c [Completion], value: impl Fn(&'c Completion) -> T) -> Vec<T> {
    completions.iter().map(value).collect()
}
