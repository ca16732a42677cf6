//! `enqueue` and `enqueue_many`: inserts inside the caller's transaction.

use std::collections::HashMap;

use diesel::{
    prelude::*,
    sql_types::{Array, BigInt, Bool, Bytea, Integer, Jsonb, Nullable, Text, Timestamptz},
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_outbox_core::{Error, Result, Task, TaskId};
use diesel_outbox_sql::{cached, optional_fields, postgres_error, require_transaction};

use crate::{batch_insert, keys, schema::outbox_tasks, timestamp};

/// Validates `task` completely, including the column range of its instants.
fn check(task: &Task) -> Result<serde_json::Value> {
    task.validate()?;
    timestamp::check("expires_at", task.expires_at)?;
    timestamp::check("not_before", task.not_before)?;
    serde_json::to_value(&task.headers).map_err(|e| Error::invalid("headers", e.to_string()))
}

/// Inserts one task; a `dedup_key` already present returns the existing id.
/// A task with an ordering key first locks its key's count
/// ([`keys::open`]), so it knows whether it heads the key.
pub(crate) async fn one(conn: &mut AsyncPgConnection, task: Task) -> Result<TaskId> {
    require_transaction(conn)?;
    let headers = check(&task)?;
    let key = task.ordering_key.as_deref();
    let head = match key {
        Some(key) => {
            let before = keys::open(conn, &keys::tally([key])).await?;
            before.get(key).copied().unwrap_or(0) == 0
        }
        None => true,
    };
    let id = insert_one(conn, &task, headers, head).await;
    if let (Some(key), Ok(Inserted1::Existing(_))) = (key, &id) {
        // Nothing was inserted: give the count back.
        keys::close(conn, &keys::tally([key]), &|_| false).await?;
    }
    id.map(Inserted1::id)
}

/// The id `insert_one` settled on.
enum Inserted1 {
    New(TaskId),
    Existing(TaskId),
}

impl Inserted1 {
    fn id(self) -> TaskId {
        match self {
            Self::New(id) | Self::Existing(id) => id,
        }
    }
}

/// One row, every column bound (absent ones as NULL), so the text never
/// varies and each connection prepares it once. The status is
/// [`transition::enqueued`](diesel_outbox_core::transition::enqueued): blocked
/// unless the task heads its key, else waiting while its `not_before` (on
/// the database clock) is ahead.
const INSERT_ONE: &str = "\
INSERT INTO outbox_tasks (kind, version, payload, headers, ordering_key, dedup_key,
                          max_attempts, next_attempt_at, expires_at, status)
VALUES ($1, $2, $3, $4, $5, $6, $7, COALESCE($8, now()), $9,
        CASE WHEN NOT $10 THEN 'blocked' WHEN $8 > now() THEN 'waiting' ELSE 'available' END)
ON CONFLICT (dedup_key) DO NOTHING
RETURNING id";

/// [`INSERT_ONE`] for the common task that uses none of the options beyond
/// its headers: no ordering key (so it heads none), no `dedup_key` (so
/// nothing can conflict), no `max_attempts`, `not_before` or `expires_at`.
/// Four values bound instead of eleven, and no speculative insertion for a
/// conflict that cannot happen; the row is the one [`INSERT_ONE`] writes for
/// such a task.
const INSERT_PLAIN: &str = "\
INSERT INTO outbox_tasks (kind, version, payload, headers, next_attempt_at, status)
VALUES ($1, $2, $3, $4, now(), 'available')
RETURNING id";

/// Whether `task` goes in with [`INSERT_PLAIN`].
fn plain(task: &Task) -> bool {
    let [_headers, options @ ..] = optional_fields(task);
    !options.contains(&true)
}

#[derive(QueryableByName)]
struct NewId {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

async fn insert_one(
    conn: &mut AsyncPgConnection,
    task: &Task,
    headers: serde_json::Value,
    head: bool,
) -> Result<Inserted1> {
    if plain(task) {
        let row: NewId = cached(INSERT_PLAIN)
            .bind::<Text, _>(&task.kind)
            .bind::<Integer, _>(task.version)
            .bind::<Bytea, _>(&task.payload)
            .bind::<Jsonb, _>(&headers)
            .get_result(conn)
            .await
            .map_err(postgres_error)?;
        return Ok(Inserted1::New(TaskId::new(row.id)));
    }
    // A dedup key held by a row that is purged between our conflict and our
    // lookup frees the key again, so a second insert settles it.
    for _ in 0..3 {
        let inserted: Option<NewId> = cached(INSERT_ONE)
            .bind::<Text, _>(&task.kind)
            .bind::<Integer, _>(task.version)
            .bind::<Bytea, _>(&task.payload)
            .bind::<Jsonb, _>(&headers)
            .bind::<Nullable<Text>, _>(task.ordering_key.as_deref())
            .bind::<Nullable<Text>, _>(task.dedup_key.as_deref())
            .bind::<Nullable<Integer>, _>(task.max_attempts)
            .bind::<Nullable<Timestamptz>, _>(task.not_before)
            .bind::<Nullable<Timestamptz>, _>(task.expires_at)
            .bind::<Bool, _>(head)
            .get_result(conn)
            .await
            .optional()
            .map_err(postgres_error)?;
        if let Some(row) = inserted {
            return Ok(Inserted1::New(TaskId::new(row.id)));
        }
        let Some(key) = task.dedup_key.as_deref() else {
            return Err(Error::database("insert returned no id"));
        };
        if let Some(id) = existing(conn, key).await? {
            return Ok(Inserted1::Existing(id));
        }
    }
    Err(Error::database(
        "dedup_key kept conflicting with rows that vanished",
    ))
}

/// Inserts many tasks in one statement. Ids are drawn from the table's
/// sequence inside the statement, so each input row knows its own id whatever
/// order PostgreSQL inserts in; rows skipped for a held `dedup_key` are then
/// resolved to the existing ids.
const INSERT_MANY: &str = "\
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
    ON CONFLICT (dedup_key) DO NOTHING
    RETURNING id
)
SELECT input.id, input.dedup_key, inserted.id IS NOT NULL AS inserted
FROM input LEFT JOIN inserted ON inserted.id = input.id
ORDER BY input.ord";

#[derive(QueryableByName)]
struct Inserted {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Nullable<Text>)]
    dedup_key: Option<String>,
    #[diesel(sql_type = Bool)]
    inserted: bool,
}

/// Runs one of the batch inserts with every column of `tasks` as arrays.
async fn insert_rows<R>(
    conn: &mut AsyncPgConnection,
    sql: &'static str,
    tasks: &[Task],
    headers: Vec<serde_json::Value>,
    heads: &[bool],
) -> Result<Vec<R>>
where
    R: QueryableByName<diesel::pg::Pg> + Send + 'static,
{
    cached(sql)
        .bind::<Array<Text>, _>(tasks.iter().map(|t| t.kind.as_str()).collect::<Vec<_>>())
        .bind::<Array<Integer>, _>(tasks.iter().map(|t| t.version).collect::<Vec<_>>())
        .bind::<Array<Bytea>, _>(
            tasks
                .iter()
                .map(|t| t.payload.as_slice())
                .collect::<Vec<_>>(),
        )
        .bind::<Array<Jsonb>, _>(headers)
        .bind::<Array<Nullable<Text>>, _>(
            tasks
                .iter()
                .map(|t| t.ordering_key.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind::<Array<Nullable<Text>>, _>(
            tasks
                .iter()
                .map(|t| t.dedup_key.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind::<Array<Nullable<Integer>>, _>(
            tasks.iter().map(|t| t.max_attempts).collect::<Vec<_>>(),
        )
        .bind::<Array<Nullable<Timestamptz>>, _>(
            tasks.iter().map(|t| t.not_before).collect::<Vec<_>>(),
        )
        .bind::<Array<Nullable<Timestamptz>>, _>(
            tasks.iter().map(|t| t.expires_at).collect::<Vec<_>>(),
        )
        .bind::<Array<Bool>, _>(heads)
        .load(conn)
        .await
        .map_err(postgres_error)
}

/// Inserts `tasks` in one statement and returns their ids in input order.
pub(crate) async fn many(conn: &mut AsyncPgConnection, tasks: Vec<Task>) -> Result<Vec<TaskId>> {
    require_transaction(conn)?;
    if tasks.is_empty() {
        return Ok(Vec::new());
    }
    let headers = tasks.iter().map(check).collect::<Result<Vec<_>>>()?;
    let heads = heads(conn, &tasks).await?;
    if tasks.iter().all(|t| t.dedup_key.is_none()) {
        // Nothing can conflict: a plain insert shaped to the batch does.
        return batch_insert::insert(conn, &tasks, headers, &heads).await;
    }
    let rows: Vec<Inserted> = insert_rows(conn, INSERT_MANY, &tasks, headers, &heads).await?;
    if rows.len() != tasks.len() {
        return Err(Error::database(format!(
            "inserted {} rows for {} tasks",
            rows.len(),
            tasks.len()
        )));
    }
    give_back_skipped(conn, &rows, &tasks, &heads).await?;
    let skipped: Vec<&str> = rows
        .iter()
        .filter(|row| !row.inserted)
        .filter_map(|row| row.dedup_key.as_deref())
        .collect();
    let held: HashMap<String, i64> = if skipped.is_empty() {
        HashMap::new()
    } else {
        outbox_tasks::table
            .filter(outbox_tasks::dedup_key.eq_any(&skipped))
            .select((outbox_tasks::dedup_key.assume_not_null(), outbox_tasks::id))
            .load::<(String, i64)>(conn)
            .await
            .map_err(postgres_error)?
            .into_iter()
            .collect()
    };
    let mut ids = Vec::with_capacity(rows.len());
    for (row, task) in rows.into_iter().zip(tasks) {
        let held_id = row.dedup_key.as_ref().and_then(|key| held.get(key));
        ids.push(match (row.inserted, held_id) {
            (true, _) => TaskId::new(row.id),
            (false, Some(&id)) => TaskId::new(id),
            // The holder was purged meanwhile, or the row had no key at all.
            (false, None) => one(conn, task).await?,
        });
    }
    Ok(ids)
}

/// Whether each task heads its ordering key: a task without a key always
/// does; of the tasks of one key, only the first, and only when the key had
/// no open task before. Locks the keys' counts ([`keys::open`]).
async fn heads(conn: &mut AsyncPgConnection, tasks: &[Task]) -> Result<Vec<bool>> {
    let counts = keys::tally(tasks.iter().filter_map(|t| t.ordering_key.as_deref()));
    let before = keys::open(conn, &counts).await?;
    let mut seen = std::collections::HashSet::new();
    Ok(tasks
        .iter()
        .map(|task| match task.ordering_key.as_deref() {
            None => true,
            Some(key) => seen.insert(key) && before.get(key).copied().unwrap_or(0) == 0,
        })
        .collect())
}

/// Takes the tasks a held `dedup_key` kept out off their keys' counts; when
/// one of them was to head its key, the key's next task goes instead.
async fn give_back_skipped(
    conn: &mut AsyncPgConnection,
    rows: &[Inserted],
    tasks: &[Task],
    heads: &[bool],
) -> Result<()> {
    let mut skipped = Vec::new();
    let mut headless = std::collections::HashSet::new();
    for ((row, task), &head) in rows.iter().zip(tasks).zip(heads) {
        if let (false, Some(key)) = (row.inserted, task.ordering_key.as_deref()) {
            skipped.push(key);
            if head {
                headless.insert(key);
            }
        }
    }
    keys::close(conn, &keys::tally(skipped), &|key| headless.contains(key)).await
}

async fn existing(conn: &mut AsyncPgConnection, key: &str) -> Result<Option<TaskId>> {
    outbox_tasks::table
        .filter(outbox_tasks::dedup_key.eq(key))
        .select(outbox_tasks::id)
        .first::<i64>(conn)
        .await
        .optional()
        .map(|id| id.map(TaskId::new))
        .map_err(postgres_error)
}
