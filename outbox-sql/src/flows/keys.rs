//! Ordering keys: counting a batch's tasks per key, which of them head
//! their key, and closing keys when tasks finish.
//!
//! Every statement that changes which task of a key may run locks the
//! key's row first (enqueue, discard) or right after the task rows it
//! finished (completion writes), always in key order, so writers of one key
//! take turns and two writers of several keys cannot deadlock. A task
//! enqueued while its key's count was zero is the key's head
//! ([`transition::enqueued`](diesel_outbox_core::transition::enqueued)); the
//! others are blocked until every task before them succeeded or was
//! discarded.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
};

use diesel_outbox_core::Result;

use crate::{Dialect, KeyCounts};

/// Counts the keys of `keys` (one entry per task) in key order.
///
/// ```
/// let counts = diesel_outbox_sql::tally(["b", "a", "b"]);
/// assert_eq!(counts.into_iter().collect::<Vec<_>>(), [("a", 1), ("b", 2)]);
/// ```
pub fn tally<'k>(keys: impl IntoIterator<Item = &'k str>) -> KeyCounts<'k> {
    let mut counts = KeyCounts::new();
    for key in keys {
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

/// Whether each task heads its ordering key, given how many tasks of each
/// key were open before (`open_before`, from [`Dialect::open_keys`]): a task
/// without a key always does; of a batch's tasks of one key, only the
/// first, and only when the key had no open task before.
///
/// ```
/// use std::collections::HashMap;
///
/// let open = HashMap::from([("busy".to_owned(), 2)]);
/// let heads = diesel_outbox_sql::flows::keys::heads(
///     [None, Some("new"), Some("new"), Some("busy")],
///     &open,
/// );
/// assert_eq!(heads, [true, true, false, false]);
/// ```
pub fn heads<'t>(
    keys: impl IntoIterator<Item = Option<&'t str>>,
    open_before: &HashMap<String, i64>,
) -> Vec<bool> {
    let mut seen = HashSet::new();
    keys.into_iter()
        .map(|key| match key {
            None => true,
            Some(key) => seen.insert(key) && open_before.get(key).copied().unwrap_or(0) == 0,
        })
        .collect()
}

/// Takes `counts` finished tasks off their keys (succeeded, discarded, or
/// never inserted). For the keys `heads_done` names, whose head was among
/// them, the next blocked task goes; keys left with no open task lose their
/// row. Runs inside the transaction that finished the tasks, after it did.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would leave its future's Send to inference at each caller (rust-lang/rust#100013)"
)]
pub fn close<'a, 'k: 'a, D: Dialect>(
    dialect: &'a D,
    conn: &'a mut D::Conn,
    counts: &'a KeyCounts<'k>,
    heads_done: &'a (dyn Fn(&str) -> bool + Sync),
) -> impl Future<Output = Result<()>> + Send + 'a {
    async move {
        if counts.is_empty() {
            return Ok(());
        }
        let left = dialect.take_keys(conn, counts).await?;
        let (mut next, mut emptied) = (Vec::new(), Vec::new());
        for row in &left {
            if row.open_tasks <= 0 {
                emptied.push(row.ordering_key.as_str());
            } else if heads_done(&row.ordering_key) {
                next.push(row.ordering_key.as_str());
            }
        }
        if next.is_empty() && emptied.is_empty() {
            return Ok(());
        }
        dialect.move_keys_on(conn, &next, &emptied).await
    }
}
