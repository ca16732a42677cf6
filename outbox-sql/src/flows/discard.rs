//! Discards: an operator gives tasks up, each key locked before its rows,
//! as enqueue locks it, so a completion that holds the key cannot be
//! unblocking one of these tasks at the same time.

use std::collections::HashSet;

use diesel_outbox_core::{Result, TaskId};

use crate::{
    Dialect, SqlStore,
    flows::keys::{self, tally},
};

/// Discards those of `ids` that may be, in one write transaction that takes
/// their keys first, in key order; returns how many. Each key loses its
/// discarded tasks, and moves on if one of them was its head. A row another
/// transaction holds this instant (a claim, a completion) is left alone.
pub async fn many<D: Dialect>(store: &SqlStore<D>, ids: &[TaskId]) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let dialect = store.dialect();
    store
        .write(async |conn| {
            // The keys never change, so they can be read before the transaction.
            let keys = dialect.keys_of(conn, ids).await?;
            crate::transact(dialect, conn, async |conn| {
                if !keys.is_empty() {
                    dialect.lock_keys(conn, &keys).await?;
                }
                let discarded = dialect.discard_rows(conn, ids).await?;
                let keyed = || {
                    discarded
                        .iter()
                        .filter_map(|(status, key)| key.as_deref().map(|key| (key, status)))
                };
                // Only a key whose head was among them lets its next task go.
                let heads: HashSet<&str> = keyed()
                    .filter(|(_, status)| status.as_str() != "blocked")
                    .map(|(key, _)| key)
                    .collect();
                let counts = tally(keyed().map(|(key, _)| key));
                keys::close(dialect, conn, &counts, &|key| heads.contains(key)).await?;
                Ok(discarded.len() as u64)
            })
            .await
        })
        .await
}
