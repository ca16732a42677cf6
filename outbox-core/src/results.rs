//! Writing attempt results so that one bad row never holds back the others:
//! [`Worker::write_results`] and its [`WriteReport`].

use crate::{
    Error, Result, Status, Store, Worker,
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
    /// Results refused and not replaced by a failure (a success or a
    /// give-back, or one whose failure could not be written either); their
    /// tasks stay leased until the lease lapses, then run again.
    pub dropped: u64,
}

impl<S: Store> Worker<S> {
    /// Writes attempt results (each under its fence), isolating the rows a
    /// database refuses.
    ///
    /// The results go in as few statements as the backend allows. If the
    /// database refuses them for what they hold (a constraint, a value it
    /// cannot store) rather than for a passing fault, they are split in halves
    /// until the refused rows stand alone, and the others are written. A
    /// refused retry or failure is then written as a failure of its task whose
    /// `last_error` says why, so the operator sees it and the task is not
    /// delivered again and again; a refused success or give-back carries
    /// nothing that could be at fault, so it is dropped instead (the task runs
    /// again once its lease lapses) and never turned into a failure.
    ///
    /// An error is returned, and the caller may write the same results again
    /// later, for a passing fault (see
    /// [`Error::is_retryable`](crate::Error::is_retryable)) and when the
    /// database refused every row (read-only, say): then nothing is at fault
    /// but the database. Results already applied are refused by their fences
    /// when written again, and change nothing.
    pub async fn write_results(&self, completions: &[Completion]) -> Result<WriteReport> {
        let mut report = WriteReport::default();
        // Rows refused on their own, with the error that refused them.
        let mut refused: Vec<(&Completion, Error)> = Vec::new();
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
            if let [one] = part {
                refused.push((one, error));
            } else {
                let middle = start + part.len() / 2;
                todo.push((middle, end));
                todo.push((start, middle));
            }
        }
        if report.written.is_empty()
            && let Some((_, error)) = refused.pop()
        {
            return Err(error);
        }
        for (completion, error) in refused {
            self.record_refused(completion, &error, &mut report).await?;
        }
        Ok(report)
    }

    /// Records a result the database refused: a failure in its place, or,
    /// for a success or a give-back, nothing.
    async fn record_refused(
        &self,
        refused: &Completion,
        error: &Error,
        report: &mut WriteReport,
    ) -> Result<()> {
        let task_id = refused.fence.id.get();
        if refused.status == Status::Succeeded || refused.released {
            tracing::warn!(
                task_id,
                error = %error.chain(),
                "a result was refused; the task runs again once its lease lapses"
            );
            report.dropped += 1;
            return Ok(());
        }
        tracing::warn!(
            task_id,
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
                    task_id,
                    error = %error.chain(),
                    "nor could its failure be written; the task runs again once its lease lapses"
                );
                report.dropped += 1;
            }
        }
        Ok(())
    }
}
