//! [`Maintenance`] for [`SqlStore`]: stats, listings, requeue, discard,
//! purge, the next due time and wake-ups.

use std::time::Duration;

use diesel_outbox_core::{
    Ages, Error, Heartbeat, Listed, Maintenance, Page, PageRequest, RelaySeen, Result, Stats,
    TaskFilter, TaskId, Wakeups,
};

use super::SqlStore;
use crate::{Dialect, flows};

/// The most ids a bulk requeue or discard hands one statement or one
/// transaction, whatever batch its caller chose: well inside every
/// database's limit on bound values (SQLite's is 32,766, and a discard
/// binds up to three per id), and short enough that SQLite's write lock is
/// held for milliseconds, not for a whole batch.
const BULK_CHUNK: usize = 256;

impl<D: Dialect> Maintenance for SqlStore<D> {
    async fn stats(&self) -> Result<Stats> {
        self.run(async |conn| {
            let mut stats = self.dialect().stats(conn).await?;
            stats.set_ages(self.dialect().ages(conn).await?);
            let relays = self.dialect().relays(conn).await?;
            stats.live_relays = relays.iter().filter(|relay| relay.live).count() as u64;
            stats.stopped_keys = flows::listing::stopped_keys(self.dialect(), conn).await?;
            Ok(stats)
        })
        .await
    }

    async fn ages(&self) -> Result<Ages> {
        self.run(async |conn| self.dialect().ages(conn).await).await
    }

    async fn beat(&self, beat: &Heartbeat) -> Result<()> {
        self.write(async |conn| self.dialect().beat(conn, beat).await)
            .await
    }

    async fn forget_relay(&self, owner: &str) -> Result<()> {
        self.write(async |conn| self.dialect().forget_relay(conn, owner).await)
            .await
    }

    async fn relays(&self) -> Result<Vec<RelaySeen>> {
        self.run(async |conn| self.dialect().relays(conn).await)
            .await
    }

    async fn inspect(&self, id: TaskId) -> Result<Listed> {
        self.run(async |conn| flows::listing::get(self.dialect(), conn, id).await)
            .await?
            .map(Listed::from)
            .ok_or(Error::NotFound(id))
    }

    async fn requeue_failed(&self, id: TaskId) -> Result<bool> {
        Ok(self.requeue_failed_many(&[id]).await? == 1)
    }

    async fn discard_task(&self, id: TaskId) -> Result<bool> {
        Ok(flows::discard::many(self, &[id]).await? == 1)
    }

    /// One statement per 256 ids (`BULK_CHUNK`).
    async fn requeue_failed_many(&self, ids: &[TaskId]) -> Result<u64> {
        let mut requeued = 0;
        for chunk in ids.chunks(BULK_CHUNK) {
            requeued += self
                .write(async |conn| self.dialect().requeue(conn, chunk).await)
                .await?;
        }
        Ok(requeued)
    }

    /// One transaction per 256 ids (`BULK_CHUNK`), each its keys first.
    async fn discard_many(&self, ids: &[TaskId]) -> Result<u64> {
        let mut discarded = 0;
        for chunk in ids.chunks(BULK_CHUNK) {
            discarded += flows::discard::many(self, chunk).await?;
        }
        Ok(discarded)
    }

    async fn list(&self, filter: &TaskFilter, page: &PageRequest) -> Result<Page> {
        self.run(async |conn| flows::listing::page(self.dialect(), conn, filter, page).await)
            .await
    }

    async fn matching_ids(
        &self,
        filter: &TaskFilter,
        after: Option<TaskId>,
        limit: u32,
    ) -> Result<Vec<TaskId>> {
        self.run(async |conn| flows::listing::ids(self.dialect(), conn, filter, after, limit).await)
            .await
    }

    async fn purge_batch(&self, older_than: Duration, limit: u32) -> Result<u64> {
        self.write(async |conn| self.dialect().purge(conn, older_than, limit).await)
            .await
    }

    async fn next_due(&self) -> Result<Option<Duration>> {
        self.run(async |conn| self.dialect().next_due(conn).await)
            .await
    }

    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        self.dialect().wakeups(self.pool()).await
    }
}
