//! Enqueue: tasks inserted in the caller's transaction, each key's count
//! taken first so every task knows whether it heads its key.

use std::collections::HashSet;

use diesel_outbox_core::{Error, Result, Task, TaskId};

use crate::{
    Dialect, Inserted,
    flows::keys::{self, heads, tally},
    require_transaction,
};

/// Inserts `tasks` in the caller's open transaction on `conn` and returns
/// their ids in input order.
///
/// Every task is checked before anything is written. The keys' counts go up
/// by the batch's tasks first ([`Dialect::open_keys`], which locks them), so
/// each task is stored as its key's head or blocked behind it. A task whose
/// `dedup_key` is already held inserts nothing and answers the holder's id;
/// it gives its count back, and when it was to head its key, the key's next
/// task goes instead.
pub async fn many<D: Dialect>(
    dialect: &D,
    conn: &mut D::Conn,
    tasks: Vec<Task>,
) -> Result<Vec<TaskId>> {
    require_transaction(conn)?;
    if tasks.is_empty() {
        return Ok(Vec::new());
    }
    let rows = tasks
        .into_iter()
        .map(|task| dialect.prepare(task))
        .collect::<Result<Vec<_>>>()?;
    let counts = tally(rows.iter().filter_map(key::<D>));
    let open_before = if counts.is_empty() {
        Default::default()
    } else {
        let after = dialect.open_keys(conn, &counts).await?;
        after
            .into_iter()
            .map(|row| {
                let added = counts.get(row.ordering_key.as_str()).copied().unwrap_or(0);
                (row.ordering_key, row.open_tasks - added)
            })
            .collect()
    };
    let heads = heads(rows.iter().map(key::<D>), &open_before);
    let mut ids = Vec::with_capacity(rows.len());
    let (mut skipped, mut headless) = (Vec::new(), HashSet::new());
    while ids.len() < rows.len() {
        let start = ids.len();
        let inserted = dialect
            .insert(conn, &rows[start..], &heads[start..])
            .await?;
        if inserted.is_empty() || inserted.len() > rows.len() - start {
            return Err(Error::database(format!(
                "an insert of {} tasks answered for {}",
                rows.len() - start,
                inserted.len()
            )));
        }
        for (offset, outcome) in inserted.into_iter().enumerate() {
            let row = &rows[start + offset];
            if let (Inserted::Existing(_), Some(key)) = (outcome, key::<D>(row)) {
                skipped.push(key);
                if heads[start + offset] {
                    headless.insert(key);
                }
            }
            ids.push(outcome.id());
        }
    }
    keys::close(dialect, conn, &tally(skipped), &|key| {
        headless.contains(key)
    })
    .await?;
    Ok(ids)
}

/// The ordering key of `row`'s task.
fn key<D: Dialect>(row: &D::Row) -> Option<&str> {
    D::task(row).ordering_key.as_deref()
}
