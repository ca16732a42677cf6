//! Fenced completion writes: one statement for a whole batch of results.

use diesel::{
    mysql::Mysql,
    sql_types::{BigInt, Text},
};
use diesel_async::{AsyncMysqlConnection, RunQueryDsl};
use outbox_core::{Result, Status, transition::Completion};
use outbox_diesel::{micros, mysql_error};

/// Writes `completions`; returns how many were still current and applied.
///
/// One `UPDATE` whose `CASE id WHEN ...` arms carry each task's values, and
/// whose `WHERE` applies a result only while `id`, `lease_owner` and
/// `attempts` still match its claim ([`outbox_core::transition::complete`]
/// in SQL). `id IN (...)` keeps it on the primary key. diesel-async reports
/// rows matched, which here is exactly the rows whose fence held.
pub(crate) async fn write(
    conn: &mut AsyncMysqlConnection,
    completions: &[Completion],
) -> Result<u64> {
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
    let arms = |arm: &str| arm.repeat(completions.len());
    let retrying: Vec<&Completion> = completions
        .iter()
        .filter(|c| c.retry_in.is_some())
        .collect();
    let with_error: Vec<&Completion> = completions
        .iter()
        .filter(|c| c.last_error.is_some())
        .collect();
    let ids = vec!["?"; completions.len()].join(", ");
    let sql = format!(
        "UPDATE outbox_tasks SET \
           status = CASE id {status} END, \
           next_attempt_at = {retry}, \
           last_error = {error}, \
           finished_at = CASE id {finished} END, \
           lease_owner = NULL, lease_expires_at = NULL, updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({ids}) AND status = 'pending' AND CASE id {fence} END",
        status = arms("WHEN ? THEN ? "),
        retry = case_or(
            "next_attempt_at",
            "WHEN ? THEN UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND ",
            retrying.len()
        ),
        error = case_or("last_error", "WHEN ? THEN ? ", with_error.len()),
        finished = arms("WHEN ? THEN IF(?, UTC_TIMESTAMP(6), NULL) "),
        fence = arms("WHEN ? THEN lease_owner = ? AND attempts = ? "),
    );
    let mut query = diesel::sql_query(sql).into_boxed::<Mysql>();
    for c in completions {
        query = query
            .bind::<BigInt, _>(c.fence.id.get())
            .bind::<Text, _>(c.status.as_str());
    }
    for c in &retrying {
        query = query
            .bind::<BigInt, _>(c.fence.id.get())
            .bind::<BigInt, _>(c.retry_in.map_or(0, micros));
    }
    for c in &with_error {
        query = query
            .bind::<BigInt, _>(c.fence.id.get())
            .bind::<Text, _>(c.last_error.as_deref().unwrap_or_default());
    }
    for c in completions {
        query = query
            .bind::<BigInt, _>(c.fence.id.get())
            .bind::<diesel::sql_types::Bool, _>(c.status != Status::Pending);
    }
    for c in completions {
        query = query.bind::<BigInt, _>(c.fence.id.get());
    }
    for c in completions {
        query = query
            .bind::<BigInt, _>(c.fence.id.get())
            .bind::<Text, _>(&c.fence.owner)
            .bind::<BigInt, _>(c.fence.attempt);
    }
    let applied = query.execute(conn).await.map_err(mysql_error)?;
    Ok(applied as u64)
}

/// `CASE id <arm × n> ELSE column END`, or just `column` when there is no arm.
fn case_or(column: &str, arm: &str, n: usize) -> String {
    if n == 0 {
        column.to_owned()
    } else {
        format!("CASE id {} ELSE {column} END", arm.repeat(n))
    }
}

/// The common case, all succeeded for one owner: only the fence varies by row.
async fn succeed(
    conn: &mut AsyncMysqlConnection,
    owner: &str,
    completions: &[Completion],
) -> Result<u64> {
    let ids = vec!["?"; completions.len()].join(", ");
    let sql = format!(
        "UPDATE outbox_tasks SET status = 'succeeded', last_error = '', \
           finished_at = UTC_TIMESTAMP(6), lease_owner = NULL, lease_expires_at = NULL, \
           updated_at = UTC_TIMESTAMP(6) \
         WHERE id IN ({ids}) AND status = 'pending' AND lease_owner = ? \
           AND CASE id {fence} END",
        fence = "WHEN ? THEN attempts = ? ".repeat(completions.len()),
    );
    let mut query = diesel::sql_query(sql).into_boxed::<Mysql>();
    for c in completions {
        query = query.bind::<BigInt, _>(c.fence.id.get());
    }
    query = query.bind::<Text, _>(owner);
    for c in completions {
        query = query
            .bind::<BigInt, _>(c.fence.id.get())
            .bind::<BigInt, _>(c.fence.attempt);
    }
    let applied = query.execute(conn).await.map_err(mysql_error)?;
    Ok(applied as u64)
}
