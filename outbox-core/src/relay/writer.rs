//! A relay's finished results on their way back to the table.
//!
//! Results wait here at most the relay's `write_delay` (or until a batch has
//! piled up), so a finished task never stays leased until its lease lapses
//! and is delivered again. A batch is written by a task of its own on its
//! own pool connection ([`ResultWriter::start`]), so the relay claims and
//! starts handlers while the write is under way; one write is in flight at a
//! time. A result that could not be written because of a passing fault
//! waits for another try, unless its lease lapses meanwhile: then it is
//! dropped instead of retried for ever, and the task (claimable again) runs
//! again.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::RelayReport;
use crate::{
    Result, Status, Store, Worker, WriteReport, telemetry,
    transition::{Completion, INTERRUPTED_ERROR},
};

/// A batch being written: the task writing it and when each claim lapses.
struct Writing {
    task: AbortOnDropHandle<(Vec<Completion>, Result<WriteReport>)>,
    lease_ends: Vec<Instant>,
}

/// What a write in flight came to.
pub(super) type Written =
    std::result::Result<(Vec<Completion>, Result<WriteReport>), tokio::task::JoinError>;

/// The results a relay has not written yet, oldest first.
pub(super) struct ResultWriter {
    /// Results waiting for their write, in arrival order, kept as one slice
    /// so a batch is written without copying it.
    unwritten: Vec<Completion>,
    /// When the claim of each result in `unwritten` lapses.
    lease_ends: Vec<Instant>,
    /// When the oldest unwritten result arrived.
    oldest: Option<Instant>,
    /// After a write failed for a passing fault: when to try again.
    retry_at: Option<Instant>,
    /// The most results that waited at once.
    peak: usize,
    /// Whether a write since the last [`take_retries_written`] scheduled a
    /// retry (a waiting task the maintenance task must promote once due).
    ///
    /// [`take_retries_written`]: ResultWriter::take_retries_written
    retries_written: bool,
    /// The batch being written, if any.
    writing: Option<Writing>,
    delay: Duration,
    batch_size: usize,
    retry_delay: Duration,
}

impl ResultWriter {
    /// Results wait at most `delay`, or until `batch_size` have piled up;
    /// after a failed write, the next try comes `retry_delay` later.
    pub(super) fn new(delay: Duration, batch_size: usize, retry_delay: Duration) -> Self {
        Self {
            unwritten: Vec::new(),
            lease_ends: Vec::new(),
            oldest: None,
            retry_at: None,
            peak: 0,
            retries_written: false,
            writing: None,
            delay,
            batch_size,
            retry_delay,
        }
    }

    /// The most results that waited for a write at once so far.
    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    /// Whether the last write failed and its retry is not due yet.
    pub(super) fn is_retrying(&self) -> bool {
        self.retry_at.is_some_and(|at| at > Instant::now())
    }

    /// Results not written yet, including a batch being written.
    pub(super) fn len(&self) -> usize {
        self.unwritten.len() + self.writing.as_ref().map_or(0, |w| w.lease_ends.len())
    }

    /// Results waiting for a write to start.
    pub(super) fn waiting(&self) -> usize {
        self.unwritten.len()
    }

    /// Whether a batch is being written.
    pub(super) fn is_writing(&self) -> bool {
        self.writing.is_some()
    }

    /// Starts writing the oldest `batch_size` results in a task of their own,
    /// unless a write is under way or nothing waits; the relay hands the
    /// outcome to [`finish`](Self::finish) once [`written`](Self::written)
    /// resolves.
    pub(super) fn start<S: Store>(&mut self, worker: &Worker<S>) {
        if self.writing.is_some() || self.unwritten.is_empty() {
            return;
        }
        let n = self.unwritten.len().min(self.batch_size);
        let batch: Vec<Completion> = self.unwritten.drain(..n).collect();
        let lease_ends = self.lease_ends.drain(..n).collect();
        self.oldest = (!self.unwritten.is_empty()).then(Instant::now);
        let worker = worker.clone();
        let task = tokio::spawn(async move {
            let written = worker.write_results(&batch).await;
            (batch, written)
        });
        self.writing = Some(Writing {
            task: AbortOnDropHandle::new(task),
            lease_ends,
        });
    }

    /// The outcome of the write under way; never resolves when there is none.
    pub(super) async fn written(&mut self) -> Written {
        match &mut self.writing {
            Some(writing) => (&mut writing.task).await,
            None => std::future::pending().await,
        }
    }

    /// Accounts for the write that [`written`](Self::written) returned: its
    /// results counted, or, after a passing fault, put back first in line
    /// for another try.
    pub(super) fn finish(&mut self, written: Written, report: &mut RelayReport) {
        let Some(writing) = self.writing.take() else {
            return;
        };
        match written {
            Ok((_, Ok(written))) => self.count_written(&written, report),
            Ok((batch, Err(error))) => {
                self.unwritten.splice(0..0, batch);
                self.lease_ends.splice(0..0, writing.lease_ends);
                self.failed(&error, report);
            }
            Err(error) => {
                // The write task panicked: its batch is gone with it, and its
                // tasks run again once their leases lapse.
                report.errors += 1;
                report.dropped += writing.lease_ends.len() as u64;
                tracing::warn!(%error, "relay's write task ended abnormally");
            }
        }
        telemetry::unwritten(self.len());
    }

    fn count_written(&mut self, written: &WriteReport, report: &mut RelayReport) {
        for completion in &written.written {
            count(report, completion);
            self.retries_written |= completion.status == Status::Waiting;
        }
        report.dropped += written.dropped;
    }

    /// After a write failed for a passing fault: drops the waiting results
    /// whose lease lapsed meanwhile, and schedules the next try.
    fn failed(&mut self, error: &crate::Error, report: &mut RelayReport) {
        report.errors += 1;
        tracing::warn!(
            error = %error.chain(),
            unwritten = self.unwritten.len(),
            "relay could not write results; will retry"
        );
        let now = Instant::now();
        let mut live = self.lease_ends.iter().map(|ends| *ends > now);
        self.unwritten.retain(|_| live.next().unwrap_or(false));
        let lapsed = self.lease_ends.len() - self.unwritten.len();
        self.lease_ends.retain(|ends| *ends > now);
        if lapsed > 0 {
            report.dropped += lapsed as u64;
            tracing::warn!(
                lapsed,
                "relay dropped unwritten results whose lease lapsed meanwhile"
            );
        }
        self.oldest = (!self.unwritten.is_empty()).then_some(now);
        self.retry_at = self.oldest.map(|now| super::later(now, self.retry_delay));
    }

    /// Adds a result whose claim lapses at `lease_ends`.
    pub(super) fn push(&mut self, completion: Completion, lease_ends: Instant) {
        self.oldest.get_or_insert_with(Instant::now);
        self.unwritten.push(completion);
        self.lease_ends.push(lease_ends);
        self.peak = self.peak.max(self.unwritten.len());
        telemetry::unwritten(self.unwritten.len());
    }

    /// When the results must be written: at once when a batch has piled up,
    /// else when the oldest has waited `write_delay`; `None` when empty or
    /// while a write is under way (its end is awaited instead).
    pub(super) fn deadline(&self) -> Option<Instant> {
        if self.writing.is_some() {
            return None;
        }
        let oldest = self.oldest?;
        if let Some(at) = self.retry_at {
            return Some(at);
        }
        if self.unwritten.len() >= self.batch_size {
            return Some(oldest);
        }
        Some(super::later(oldest, self.delay))
    }

    /// Whether the results are due for their write now.
    pub(super) fn is_due(&self) -> bool {
        self.deadline().is_some_and(|at| at <= Instant::now())
    }

    /// Whether a write since the last call scheduled a retry.
    pub(super) fn take_retries_written(&mut self) -> bool {
        std::mem::take(&mut self.retries_written)
    }

    /// Writes every result now, `batch_size` per statement, after the write
    /// under way if any: the relay's last write at shutdown. A batch refused
    /// for what it holds (not for a passing fault) is split to isolate the
    /// rows that cannot be written ([`Worker::write_results`]). At the first
    /// passing fault (connection lost, pool timeout) the rest waits; of what
    /// waits, results whose lease has lapsed since are dropped.
    pub(super) async fn flush<S: Store>(&mut self, worker: &Worker<S>, report: &mut RelayReport) {
        if self.writing.is_some() {
            let written = self.written().await;
            self.finish(written, report);
        }
        // A batch leaves the list only once its write returned, so a flush
        // cut short (at the shutdown deadline) loses nothing it has not written.
        while !self.unwritten.is_empty() {
            let n = self.unwritten.len().min(self.batch_size);
            match worker.write_results(&self.unwritten[..n]).await {
                Ok(written) => {
                    self.unwritten.drain(..n);
                    self.lease_ends.drain(..n);
                    self.count_written(&written, report);
                }
                Err(error) => {
                    self.failed(&error, report);
                    break;
                }
            }
        }
        if self.unwritten.is_empty() {
            self.oldest = None;
            self.retry_at = None;
        }
        telemetry::unwritten(self.len());
    }

    /// Gives up on every result still waiting (the relay is stopping and its
    /// last write failed): their tasks run again once their leases lapse.
    pub(super) fn abandon(&mut self, report: &mut RelayReport) {
        let left = self.len();
        // Dropping the handle aborts a write still under way.
        self.writing = None;
        if left > 0 {
            report.dropped += left as u64;
            tracing::warn!(
                left,
                "relay stopped with results it could not write; their tasks run again once their leases lapse"
            );
        }
        self.unwritten.clear();
        self.lease_ends.clear();
        self.oldest = None;
        self.retry_at = None;
        telemetry::unwritten(0);
    }
}

/// Counts a written result in the report.
fn count(report: &mut RelayReport, completion: &Completion) {
    let interrupted = completion.last_error.as_deref() == Some(INTERRUPTED_ERROR);
    match completion.status {
        Status::Succeeded => report.succeeded += 1,
        Status::Failed | Status::Discarded => report.failed += 1,
        _ if completion.released || interrupted => report.released += 1,
        Status::Available | Status::Waiting | Status::Running | Status::Blocked => {
            report.retried += 1
        }
    }
}
