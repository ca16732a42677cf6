//! Writing attempt results so that one bad row never holds back the others:
//! [`Worker::write_results`] and its [`WriteReport`].

use crate::{
    Result, Store, Worker,
    transition::{self, Completion},
};

/// What [`Worker::write_results`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteReport {
    /// Results whose fence still held, so they changed their task.
    pub applied: u64,
    /// The results written, in the form they were written: a result that could
    /// not be written is replaced by the failure recorded in its place.
    pub written: Vec<Completion>,
    /// Results that could not be written, nor a failure in their place; their
    /// tasks stay leased until the lease lapses, then run again.
    pub dropped: u64,
}

impl<S: Store> Worker<S> {
    /// Writes attempt results (each under its fence), isolating the rows a
    /// database refuses.
    ///
    /// The results go in one statement. If the database refuses it for what
    /// it holds (a constraint, a value it cannot store) rather than for a
    /// passing fault, the batch is split in halves until the refused rows are
    /// alone; each of those is then written as a failure of its task whose
    /// `last_error` says why, so the operator sees it and the task is not
    /// delivered again and again. A passing fault (see
    /// [`Error::is_retryable`](crate::Error::is_retryable)) is returned, and
    /// the caller may write the same results again later: results already
    /// applied are refused by their fences and change nothing.
    pub async fn write_results(&self, completions: &[Completion]) -> Result<WriteReport> {
        let mut report = WriteReport::default();
        // Slices still to write, as (start, end) into `completions`.
        let mut todo = vec![(0, completions.len())];
        while let Some((start, end)) = todo.pop() {
            let part = &completions[start..end];
            if part.is_empty() {
                continue;
            }
            let error = match self.write(part).await {
                Ok(applied) => {
                    report.applied += applied;
                    report.written.extend_from_slice(part);
                    continue;
                }
                Err(error) if error.is_retryable() => return Err(error),
                Err(error) => error,
            };
            if part.len() > 1 {
                let middle = start + part.len() / 2;
                todo.push((middle, end));
                todo.push((start, middle));
                continue;
            }
            let refused = &part[0];
            tracing::warn!(
                task_id = refused.fence.id.get(),
                error = %error.chain(),
                "a result could not be written; recording the failure instead"
            );
            let reason = format!(
                "the attempt's result could not be written: {}",
                error.chain()
            );
            let failure = transition::fail(refused.fence.clone(), &reason);
            match self.write(std::slice::from_ref(&failure)).await {
                Ok(applied) => {
                    report.applied += applied;
                    report.written.push(failure);
                }
                Err(error) if error.is_retryable() => return Err(error),
                Err(error) => {
                    tracing::warn!(
                        task_id = refused.fence.id.get(),
                        error = %error.chain(),
                        "nor could its failure be written; the task runs again once its lease lapses"
                    );
                    report.dropped += 1;
                }
            }
        }
        Ok(report)
    }
}
