//! Operator listings on PostgreSQL: the tasks a [`TaskFilter`] matches, a
//! keyset page at a time, and bulk requeues of them.

use diesel::{pg::Pg, prelude::*, sql_types::Array, sql_types::BigInt};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_outbox_core::{Order, Page, PageRequest, Record, Result, TaskFilter, TaskId};
use diesel_outbox_sql::{cached, postgres_error};

use crate::{row::TaskRow, schema::outbox_tasks};

/// The rows `filter` matches, every criterion combined with AND.
fn matching(filter: &TaskFilter) -> outbox_tasks::BoxedQuery<'_, Pg> {
    let mut query = outbox_tasks::table.into_boxed();
    if let Some(status) = filter.status {
        query = query.filter(outbox_tasks::status.eq(status.as_str()));
    }
    if let Some(kind) = &filter.kind {
        query = query.filter(outbox_tasks::kind.eq(kind));
    }
    if let Some(key) = &filter.ordering_key {
        query = query.filter(outbox_tasks::ordering_key.eq(key));
    }
    if let Some(since) = filter.since {
        query = query.filter(outbox_tasks::created_at.ge(since));
    }
    query
}

/// One page of the tasks `filter` matches.
pub(crate) async fn page(
    conn: &mut AsyncPgConnection,
    filter: &TaskFilter,
    request: &PageRequest,
) -> Result<Page> {
    let mut query = matching(filter);
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
        .map_err(postgres_error)?;
    let records = rows
        .into_iter()
        .map(Record::try_from)
        .collect::<Result<Vec<_>>>()?;
    Ok(Page::new(records, request))
}

/// Up to `limit` ids `filter` matches above `after`, lowest first.
pub(crate) async fn ids(
    conn: &mut AsyncPgConnection,
    filter: &TaskFilter,
    after: Option<TaskId>,
    limit: u32,
) -> Result<Vec<TaskId>> {
    let mut query = matching(filter);
    if let Some(after) = after {
        query = query.filter(outbox_tasks::id.gt(after.get()));
    }
    let ids: Vec<i64> = query
        .order(outbox_tasks::id.asc())
        .limit(i64::from(limit))
        .select(outbox_tasks::id)
        .load(conn)
        .await
        .map_err(postgres_error)?;
    Ok(ids.into_iter().map(TaskId::new).collect())
}

/// [`transition::requeue`](diesel_outbox_core::transition::requeue) in SQL,
/// for every failed task of a batch: the single-task statement with a list
/// of ids.
const REQUEUE_MANY: &str = "\
UPDATE outbox_tasks
SET status = 'available', next_attempt_at = now(), expires_at = NULL, finished_at = NULL,
    updated_at = now()
WHERE id = ANY($1) AND status = 'failed'";

/// Requeues the failed tasks among `ids`; returns how many.
pub(crate) async fn requeue(conn: &mut AsyncPgConnection, ids: &[TaskId]) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let changed = cached(REQUEUE_MANY)
        .bind::<Array<BigInt>, _>(ids.iter().map(|id| id.get()).collect::<Vec<_>>())
        .execute(conn)
        .await
        .map_err(postgres_error)?;
    Ok(changed as u64)
}
