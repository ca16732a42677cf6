//! Completion writes: the results of a batch under their fences, and, when
//! a result lets an ordering key move on, the key's next task in the same
//! transaction.

use std::{collections::HashSet, future::Future};

use diesel_outbox_core::{
    Result, TaskId,
    transition::{self, Completion},
};

use crate::{
    Dialect,
    flows::keys::{self, tally},
};

/// Writes `completions`; returns how many were still current and applied.
/// Without a result that lets a key move on, no transaction is opened:
/// each statement stands alone.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would leave its future's Send to inference at each caller (rust-lang/rust#100013)"
)]
pub fn counted<'a, D: Dialect>(
    dialect: &'a D,
    conn: &'a mut D::Conn,
    completions: &'a [Completion],
) -> impl Future<Output = Result<u64>> + Send + 'a {
    async move {
        if !completions.iter().any(transition::moves_key_on) {
            return dialect.apply_counted(conn, completions).await;
        }
        Ok(applied(dialect, conn, completions).await?.len() as u64)
    }
}

/// Writes `completions` in one write transaction; returns the `(id,
/// attempt)` of the claims whose result was still current and applied.
/// The keys of the results that applied and let their key move on lose
/// their finished head, and the next task of each goes.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would leave its future's Send to inference at each caller (rust-lang/rust#100013)"
)]
pub fn applied<'a, D: Dialect>(
    dialect: &'a D,
    conn: &'a mut D::Conn,
    completions: &'a [Completion],
) -> impl Future<Output = Result<Vec<(TaskId, i64)>>> + Send + 'a {
    crate::transact(dialect, conn, async |conn| {
        let applied = dialect.apply_completions(conn, completions).await?;
        let current: HashSet<&(TaskId, i64)> = applied.iter().collect();
        let finished = completions
            .iter()
            .filter(|c| transition::moves_key_on(c))
            .filter(|c| current.contains(&(c.fence.id, c.fence.attempt)))
            .filter_map(|c| c.fence.ordering_key.as_deref());
        // A running task is always its key's head.
        keys::close(dialect, conn, &tally(finished), &|_| true).await?;
        Ok(applied)
    })
}
