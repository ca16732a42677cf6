//! Operator listings on SQLite: the tasks a [`TaskFilter`] matches,
//! a keyset page at a time, and bulk requeues of them.

use diesel::{
    dsl::sql,
    prelude::*,
    sql_types::{BigInt, Bool, Text},
    sqlite::Sqlite,
};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{Order, Page, PageRequest, Record, Result, TaskFilter, TaskId};
use diesel_outbox_sql::{sqlite_error, uncached};

use crate::{AsyncSqliteConnection, row::TaskRow, schema::outbox_tasks, timestamp};

/// The rows `filter` matches, every criterion combined with AND.
fn matching(filter: &TaskFilter) -> Result<outbox_tasks::BoxedQuery<'_, Sqlite>> {
    let mut query = outbox_tasks::table.into_boxed();
    if let Some(status) = filter.status {
        query = query.filter(outbox_tasks::status.eq(status.as_str()));
    }
    if let Some(kind) = &filter.kind {
        query = query.filter(outbox_tasks::kind.eq(kind));
    }
    if let Some(key) = &filter.ordering_key {
        // Stored as text (enqueue binds it so): a blob would never equal it.
        query = query.filter(sql::<Bool>("ordering_key = ").bind::<Text, _>(key.clone()));
    }
    if let Some(since) = filter.since {
        let since = timestamp::to_column("since", since)?;
        query = query.filter(outbox_tasks::created_at.ge(since));
    }
    Ok(query)
}

/// One page of the tasks `filter` matches.
pub(crate) async fn page(
    conn: &mut AsyncSqliteConnection,
    filter: &TaskFilter,
    request: &PageRequest,
) -> Result<Page> {
    let mut query = matching(filter)?;
    query = match (request.ordering(), request.cursor()) {
        (Order::NewestFirst, Some(after)) => query.filter(outbox_tasks::id.lt(after.get())),
        (Order::OldestFirst, Some(after)) => query.filter(outbox_tasks::id.gt(after.get())),
        (_, None) => query,
    };
    query = match request.ordering() {
        Order::NewestFirst => query.order(outbox_tasks::id.desc()),
        Order::OldestFirst => query.order(outbox_tasks::id.asc()),
    };
    let rows: Vec<TaskRow> = query
        .limit(i64::from(request.limit()))
        .select(TaskRow::as_select())
        .load(conn)
        .await
        .map_err(sqlite_error)?;
    let records = rows
        .into_iter()
        .map(Record::try_from)
        .collect::<Result<Vec<_>>>()?;
    Ok(Page::new(records, request))
}

/// Up to `limit` ids `filter` matches above `after`, lowest first.
pub(crate) async fn ids(
    conn: &mut AsyncSqliteConnection,
    filter: &TaskFilter,
    after: Option<TaskId>,
    limit: u32,
) -> Result<Vec<TaskId>> {
    let mut query = matching(filter)?;
    if let Some(after) = after {
        query = query.filter(outbox_tasks::id.gt(after.get()));
    }
    let ids: Vec<i64> = query
        .order(outbox_tasks::id.asc())
        .limit(i64::from(limit))
        .select(outbox_tasks::id)
        .load(conn)
        .await
        .map_err(sqlite_error)?;
    Ok(ids.into_iter().map(TaskId::new).collect())
}

/// [`transition::requeue`](diesel_outbox_core::transition::requeue) in SQL,
/// for every failed task of a batch: the single-task statement with a list
/// of ids (integers, written into the text).
const REQUEUE_MANY: &str = "\
UPDATE outbox_tasks
SET status = 'available', next_attempt_at = $1, expires_at = NULL, finished_at = NULL,
    updated_at = $1
WHERE id IN ({ids}) AND status = 'failed'";

/// Requeues the failed tasks among `ids`; returns how many. The caller
/// holds the write turn.
pub(crate) async fn requeue(conn: &mut AsyncSqliteConnection, ids: &[TaskId]) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let list = ids
        .iter()
        .map(|id| id.get().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let sql = REQUEUE_MANY.replace("{ids}", &list);
    let changed = uncached::<Sqlite>(&sql)
        .bind::<BigInt, _>(timestamp::to_micros(timestamp::now()))
        .execute(conn)
        .await
        .map_err(sqlite_error)?;
    Ok(changed as u64)
}
