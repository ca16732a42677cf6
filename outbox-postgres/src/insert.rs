//! Inserts into `outbox_tasks`: the PostgreSQL dialect's `insert`, a whole
//! batch in one statement.

use std::collections::HashMap;

use diesel::{
    OptionalExtension, QueryableByName,
    sql_types::{Array, BigInt, Bool, Bytea, Integer, Jsonb, Nullable, Text, Timestamptz},
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_outbox_core::{Error, Result, Task, TaskId};
use diesel_outbox_sql::{Inserted, Names, cached, optional_fields, postgres_error, rows::Id};

use crate::{batch_insert, statements as sql, timestamp};

/// A validated task with its headers as JSON.
#[derive(Debug)]
pub struct Row {
    pub(crate) task: Task,
    pub(crate) headers: serde_json::Value,
}

/// Checks `task` completely, including the column range of its instants.
pub(crate) fn prepare(task: Task) -> Result<Row> {
    task.validate()?;
    timestamp::check("expires_at", task.expires_at)?;
    timestamp::check("not_before", task.not_before)?;
    let headers = serde_json::to_value(&task.headers)
        .map_err(|e| Error::invalid("headers", e.to_string()))?;
    Ok(Row { task, headers })
}

/// Inserts every one of `rows` in one statement: one task by the single-row
/// statements, a batch without `dedup_key`s by the insert shaped to it, any
/// other batch by `INSERT_MANY`. With `notify`, queues the notification
/// that wakes relays at commit (and is dropped on rollback): inside the
/// insert for a plain task, else by a statement of its own.
pub(crate) async fn insert(
    conn: &mut AsyncPgConnection,
    names: &Names,
    rows: &[Row],
    heads: &[bool],
    notify: bool,
) -> Result<Vec<Inserted>> {
    let (inserted, notified) = match (rows, heads) {
        ([row], [_]) if notify && plain(&row.task) => (
            vec![insert_plain(conn, names, row, sql::INSERT_PLAIN_NOTIFY).await?],
            true,
        ),
        ([row], [head]) => (vec![one(conn, names, row, *head).await?], false),
        _ if rows.iter().all(|row| row.task.dedup_key.is_none()) => {
            let ids = batch_insert::insert(conn, names, rows, heads).await?;
            (ids.into_iter().map(Inserted::New).collect(), false)
        }
        _ => (many(conn, names, rows, heads).await?, false),
    };
    if notify && !notified {
        cached(&names.sql(sql::NOTIFY))
            .execute(conn)
            .await
            .map_err(postgres_error)?;
    }
    Ok(inserted)
}

/// Inserts a plain task ([`plain`]) by `statement`: [`sql::INSERT_PLAIN`],
/// or [`sql::INSERT_PLAIN_NOTIFY`], which queues the relays' wake-up too.
async fn insert_plain(
    conn: &mut AsyncPgConnection,
    names: &Names,
    row: &Row,
    statement: &'static str,
) -> Result<Inserted> {
    let task = &row.task;
    let id: Id = cached(&names.sql(statement))
        .bind::<Text, _>(&task.kind)
        .bind::<Integer, _>(task.version)
        .bind::<Bytea, _>(&task.payload)
        .bind::<Jsonb, _>(&row.headers)
        .get_result(conn)
        .await
        .map_err(postgres_error)?;
    Ok(Inserted::New(TaskId::new(id.id)))
}

/// Whether `task` goes in with `INSERT_PLAIN`.
fn plain(task: &Task) -> bool {
    let [_headers, options @ ..] = optional_fields(task);
    !options.contains(&true)
}

/// Inserts one task; a `dedup_key` already held answers the holder.
async fn one(
    conn: &mut AsyncPgConnection,
    names: &Names,
    row: &Row,
    head: bool,
) -> Result<Inserted> {
    let task = &row.task;
    if plain(task) {
        return insert_plain(conn, names, row, sql::INSERT_PLAIN).await;
    }
    // A dedup key held by a row that is purged between our conflict and our
    // lookup frees the key again, so a second insert settles it.
    for _ in 0..3 {
        let inserted: Option<Id> = cached(&names.sql(sql::INSERT_ONE))
            .bind::<Text, _>(&task.kind)
            .bind::<Integer, _>(task.version)
            .bind::<Bytea, _>(&task.payload)
            .bind::<Jsonb, _>(&row.headers)
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
        if let Some(id) = inserted {
            return Ok(Inserted::New(TaskId::new(id.id)));
        }
        let Some(key) = task.dedup_key.as_deref() else {
            return Err(Error::database("insert returned no id"));
        };
        if let Some(&id) = held(conn, names, &[key]).await?.get(key) {
            return Ok(Inserted::Existing(id));
        }
    }
    Err(Error::database(
        "dedup_key kept conflicting with rows that vanished",
    ))
}

#[derive(QueryableByName)]
struct InsertedRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Nullable<Text>)]
    dedup_key: Option<String>,
    #[diesel(sql_type = Bool)]
    inserted: bool,
}

/// A batch with `dedup_key`s in one statement; the rows a held key kept out
/// are resolved to their holders, and one whose holder vanished meanwhile
/// (purged) is inserted on its own.
async fn many(
    conn: &mut AsyncPgConnection,
    names: &Names,
    rows: &[Row],
    heads: &[bool],
) -> Result<Vec<Inserted>> {
    let tasks = || rows.iter().map(|row| &row.task);
    let inserted: Vec<InsertedRow> = cached(&names.sql(sql::INSERT_MANY))
        .bind::<Array<Text>, _>(tasks().map(|t| t.kind.as_str()).collect::<Vec<_>>())
        .bind::<Array<Integer>, _>(tasks().map(|t| t.version).collect::<Vec<_>>())
        .bind::<Array<Bytea>, _>(tasks().map(|t| t.payload.as_slice()).collect::<Vec<_>>())
        .bind::<Array<Jsonb>, _>(rows.iter().map(|row| &row.headers).collect::<Vec<_>>())
        .bind::<Array<Nullable<Text>>, _>(
            tasks()
                .map(|t| t.ordering_key.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind::<Array<Nullable<Text>>, _>(
            tasks().map(|t| t.dedup_key.as_deref()).collect::<Vec<_>>(),
        )
        .bind::<Array<Nullable<Integer>>, _>(tasks().map(|t| t.max_attempts).collect::<Vec<_>>())
        .bind::<Array<Nullable<Timestamptz>>, _>(tasks().map(|t| t.not_before).collect::<Vec<_>>())
        .bind::<Array<Nullable<Timestamptz>>, _>(tasks().map(|t| t.expires_at).collect::<Vec<_>>())
        .bind::<Array<Bool>, _>(heads)
        .load(conn)
        .await
        .map_err(postgres_error)?;
    if inserted.len() != rows.len() {
        return Err(Error::database(format!(
            "inserted {} rows for {} tasks",
            inserted.len(),
            rows.len()
        )));
    }
    let skipped: Vec<&str> = inserted
        .iter()
        .filter(|row| !row.inserted)
        .filter_map(|row| row.dedup_key.as_deref())
        .collect();
    let holders = if skipped.is_empty() {
        HashMap::new()
    } else {
        held(conn, names, &skipped).await?
    };
    let mut outcomes = Vec::with_capacity(rows.len());
    for ((outcome, row), &head) in inserted.iter().zip(rows).zip(heads) {
        let holder = outcome
            .dedup_key
            .as_deref()
            .and_then(|key| holders.get(key));
        outcomes.push(match (outcome.inserted, holder) {
            (true, _) => Inserted::New(TaskId::new(outcome.id)),
            (false, Some(&id)) => Inserted::Existing(id),
            // The holder was purged meanwhile, or the row had no key at all.
            (false, None) => one(conn, names, row, head).await?,
        });
    }
    Ok(outcomes)
}

/// The tasks holding `keys`, by key.
async fn held(
    conn: &mut AsyncPgConnection,
    names: &Names,
    keys: &[&str],
) -> Result<HashMap<String, TaskId>> {
    #[derive(QueryableByName)]
    struct Holder {
        #[diesel(sql_type = Text)]
        dedup_key: String,
        #[diesel(sql_type = BigInt)]
        id: i64,
    }
    let holders: Vec<Holder> = cached(&names.sql(sql::HELD))
        .bind::<Array<Text>, _>(keys)
        .load(conn)
        .await
        .map_err(postgres_error)?;
    Ok(holders
        .into_iter()
        .map(|holder| (holder.dedup_key, TaskId::new(holder.id)))
        .collect())
}
