//! Reads of `outbox_tasks` for operators: one row, and the rows a
//! [`TaskFilter`] matches, a keyset page at a time. Plain SQL every backend
//! runs as it is, its placeholders written by each backend's driver.

use chrono::{DateTime, Utc};
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{Order, Page, PageRequest, Result, TaskFilter, TaskId};

use crate::{CachedQuery, Dialect, ReadRow, SqlBackend, cached, uncached};

/// One row by id.
const GET: &str = "SELECT * FROM outbox_tasks WHERE id = ?";

/// The failed heads that stop their key: failed tasks with an ordering key
/// (a failed task holds its key) and tasks blocked behind them. Both
/// sides read the indexes holding only failed and only blocked rows.
/// How many ordering keys a failed task stops: keys with a failed task and
/// a blocked one (as `id`, the one column the backends' id reader takes).
const STOPPED_KEYS: &str = "\
SELECT COUNT(DISTINCT f.ordering_key) AS id FROM outbox_tasks f
WHERE f.status = 'failed' AND f.ordering_key IS NOT NULL
  AND EXISTS (SELECT 1 FROM outbox_tasks b
              WHERE b.status = 'blocked' AND b.ordering_key = f.ordering_key)";

/// Every column of `outbox_tasks` but the payload, which `{no_bytes}` (the
/// backend's empty bytes literal) stands in for.
const WITHOUT_PAYLOAD: &str = "id, kind, version, {no_bytes} AS payload, headers, ordering_key, \
dedup_key, status, attempts, released, max_attempts, next_attempt_at, lease_owner, \
lease_expires_at, expires_at, last_error, created_at, updated_at, finished_at";

/// A value a listing binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value<'f> {
    Text(&'f str),
    Int(i64),
    Instant(DateTime<Utc>),
}

/// The statement reading `columns` of the rows `filter` matches past
/// `cursor` in `order`, at most `limit`, every criterion combined with AND;
/// and its values in order.
fn select<'f>(
    columns: &str,
    filter: &'f TaskFilter,
    cursor: Option<TaskId>,
    order: Order,
    limit: u32,
) -> (String, Vec<Value<'f>>) {
    let mut conditions = Vec::new();
    let mut values = Vec::new();
    if let Some(status) = filter.status {
        conditions.push("status = ?");
        values.push(Value::Text(status.as_str()));
    }
    if let Some(kind) = &filter.kind {
        conditions.push("kind = ?");
        values.push(Value::Text(kind));
    }
    if let Some(key) = &filter.ordering_key {
        // Byte for byte: MySQL compares its binary column with text as bytes.
        conditions.push("ordering_key = ?");
        values.push(Value::Text(key));
    }
    if let Some(since) = filter.since {
        conditions.push("created_at >= ?");
        values.push(Value::Instant(since));
    }
    if let Some(after) = cursor {
        conditions.push(match order {
            Order::NewestFirst => "id < ?",
            Order::OldestFirst => "id > ?",
        });
        values.push(Value::Int(after.get()));
    }
    let mut sql = format!("SELECT {columns} FROM outbox_tasks");
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    sql.push_str(match order {
        Order::NewestFirst => " ORDER BY id DESC LIMIT ?",
        Order::OldestFirst => " ORDER BY id LIMIT ?",
    });
    values.push(Value::Int(i64::from(limit)));
    (sql, values)
}

/// `query` with `values` bound in order; an instant the backend's column
/// cannot hold is an error naming `since`.
fn bind<'f, D: Dialect>(
    mut query: CachedQuery<'f, D::Backend>,
    values: &[Value<'f>],
) -> Result<CachedQuery<'f, D::Backend>> {
    for value in values {
        query = match *value {
            Value::Text(text) => D::Backend::text(query, text),
            Value::Int(n) => D::Backend::int(query, n),
            Value::Instant(at) => D::bind_instant(query, "since", at)?,
        };
    }
    Ok(query)
}

/// Row `id`; one that cannot be read as a task comes back as what a
/// listing shows of it.
pub async fn get<D: Dialect>(
    dialect: &D,
    conn: &mut D::Conn,
    id: TaskId,
) -> Result<Option<ReadRow>> {
    let rows: Vec<D::TaskRow> = D::Backend::int(cached(&dialect.sql(GET)), id.get())
        .load(conn)
        .await
        .map_err(D::error)?;
    Ok(rows.into_iter().next().map(D::decode))
}

/// One page of the tasks `filter` matches, with their payloads unless
/// `request` leaves them out; a row that cannot be read shows as such,
/// never hiding the others.
pub async fn page<D: Dialect>(
    dialect: &D,
    conn: &mut D::Conn,
    filter: &TaskFilter,
    request: &PageRequest,
) -> Result<Page> {
    let columns = if request.payloads() {
        "*".to_owned()
    } else {
        WITHOUT_PAYLOAD.replace("{no_bytes}", D::NO_BYTES)
    };
    let (sql, values) = select(
        &columns,
        filter,
        request.cursor(),
        request.ordering(),
        request.limit(),
    );
    let sql = dialect.names().render(&sql);
    let rows: Vec<D::TaskRow> = bind::<D>(uncached(&sql), &values)?
        .load(conn)
        .await
        .map_err(D::error)?;
    Ok(Page::new(
        rows.into_iter().map(D::decode).collect(),
        request,
    ))
}

/// How many ordering keys are stopped behind a task that failed for good,
/// later tasks of the key waiting behind it
/// ([`Stats::stopped_keys`](diesel_outbox_core::Stats::stopped_keys)).
pub async fn stopped_keys<D: Dialect>(dialect: &D, conn: &mut D::Conn) -> Result<u64> {
    let counts = D::Backend::ids(cached(&dialect.sql(STOPPED_KEYS)), conn)
        .await
        .map_err(D::error)?;
    let count = counts.into_iter().next().unwrap_or(0);
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Up to `limit` ids `filter` matches above `after`, lowest first.
pub async fn ids<D: Dialect>(
    dialect: &D,
    conn: &mut D::Conn,
    filter: &TaskFilter,
    after: Option<TaskId>,
    limit: u32,
) -> Result<Vec<TaskId>> {
    let (sql, values) = select("id", filter, after, Order::OldestFirst, limit);
    let sql = dialect.names().render(&sql);
    let query = bind::<D>(uncached(&sql), &values)?;
    let ids = D::Backend::ids(query, conn).await.map_err(D::error)?;
    Ok(ids.into_iter().map(TaskId::new).collect())
}

#[cfg(test)]
mod tests {
    use diesel_outbox_core::{Order, Status, TaskFilter, TaskId};

    use super::{Value, select};

    #[test]
    fn every_criterion_is_one_condition_with_its_value_in_order() {
        let filter = TaskFilter::new()
            .status(Status::Failed)
            .kind("order.created")
            .ordering_key("k");
        let (sql, values) = select("id", &filter, Some(TaskId::new(7)), Order::NewestFirst, 50);
        assert_eq!(
            sql,
            "SELECT id FROM outbox_tasks WHERE status = ? AND kind = ? AND ordering_key = ? \
             AND id < ? ORDER BY id DESC LIMIT ?"
        );
        assert_eq!(
            values,
            [
                Value::Text("failed"),
                Value::Text("order.created"),
                Value::Text("k"),
                Value::Int(7),
                Value::Int(50)
            ]
        );
        let (sql, _) = select("*", &TaskFilter::new(), None, Order::OldestFirst, 1);
        assert_eq!(sql, "SELECT * FROM outbox_tasks ORDER BY id LIMIT ?");
    }
}
