//! [`Store`] for [`SqlStore`]: enqueue on the caller's connection, claims,
//! completion writes, reads and the periodic moves on the pool's.

use diesel_outbox_core::{
    BatchRequest, ClaimOutcome, ClaimedTask, Error, LeaseRequest, OutboxId, Record, Rescued,
    Result, Store, Task, TaskId, telemetry, transition::Completion,
};

use super::SqlStore;
use crate::{Dialect, flows};

impl<D: Dialect> Store for SqlStore<D> {
    type Conn = D::Conn;

    async fn enqueue(&self, conn: &mut D::Conn, task: Task) -> Result<TaskId> {
        telemetry::traced_enqueue(task, async |task| {
            let ids = flows::enqueue::many(self.dialect(), conn, vec![task]).await?;
            let id = ids
                .into_iter()
                .next()
                .ok_or_else(|| Error::database("an enqueue answered no id"))?;
            Ok(id)
        })
        .await
    }

    async fn enqueue_many(&self, conn: &mut D::Conn, tasks: Vec<Task>) -> Result<Vec<TaskId>> {
        telemetry::traced_enqueue_many(tasks, async |tasks| {
            flows::enqueue::many(self.dialect(), conn, tasks).await
        })
        .await
    }

    async fn claim(&self, id: TaskId, lease: &LeaseRequest) -> Result<ClaimOutcome> {
        self.write(async |conn| {
            self.dialect().ready(conn).await?;
            self.dialect().claim_one(conn, id, lease).await
        })
        .await
    }

    async fn claim_due(&self, request: &BatchRequest) -> Result<Vec<ClaimedTask>> {
        self.write(async |conn| {
            self.dialect().ready(conn).await?;
            self.dialect().claim_due(conn, request).await
        })
        .await
    }

    async fn complete(&self, completions: &[Completion]) -> Result<u64> {
        if completions.is_empty() {
            return Ok(0);
        }
        self.write(async |conn| flows::complete::counted(self.dialect(), conn, completions).await)
            .await
    }

    async fn complete_applied(&self, completions: &[Completion]) -> Result<Vec<(TaskId, i64)>> {
        if completions.is_empty() {
            return Ok(Vec::new());
        }
        self.write(async |conn| flows::complete::applied(self.dialect(), conn, completions).await)
            .await
    }

    async fn get(&self, id: TaskId) -> Result<Record> {
        self.run(async |conn| flows::listing::get(self.dialect(), conn, id).await)
            .await?
            .ok_or(Error::NotFound(id))?
            .map_err(Error::from)
    }

    async fn outbox_id(&self) -> Result<OutboxId> {
        self.outbox
            .get_or_try_init(|| self.run(async |conn| self.dialect().outbox_id(conn).await))
            .await
            .cloned()
    }

    async fn promote(&self, limit: u32) -> Result<u64> {
        self.write(async |conn| self.dialect().promote(conn, limit).await)
            .await
    }

    async fn rescue(&self, limit: u32) -> Result<Rescued> {
        self.write(async |conn| self.dialect().rescue(conn, limit).await)
            .await
    }
}
