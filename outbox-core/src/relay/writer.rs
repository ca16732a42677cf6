//! A relay's finished results on their way back to the table.
//!
//! Results wait here at most the relay's `write_delay` (or until a batch has
//! piled up), so a finished task never stays leased until its lease lapses
//! and is delivered again. A result that could not be written because of a
//! passing fault waits for another try, unless its lease lapses meanwhile:
//! then it is dropped instead of retried for ever, and the task (claimable
//! again) runs again.

use std::time::Duration;

use tokio::time::Instant;

use super::RelayReport;
use crate::{
    Status, Store, Worker, telemetry,
    transition::{Completion, INTERRUPTED_ERROR},
};

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

    /// Results waiting for a write.
    pub(super) fn len(&self) -> usize {
        self.unwritten.len()
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
    /// else when the oldest has waited `write_delay`; `None` when empty.
    pub(super) fn deadline(&self) -> Option<Instant> {
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

    /// Writes every result, `batch_size` per statement. A batch refused for
    /// what it holds (not for a passing fault) is split to isolate the rows
    /// that cannot be written ([`Worker::write_results`]). At the first
    /// passing fault (connection lost, pool timeout) the rest waits for the
    /// next try; of what waits, results whose lease has lapsed since are
    /// dropped rather than retried for ever: their tasks are claimable again.
    /// Whether a write since the last call scheduled a retry.
    pub(super) fn take_retries_written(&mut self) -> bool {
        std::mem::take(&mut self.retries_written)
    }

    pub(super) async fn flush<S: Store>(&mut self, worker: &Worker<S>, report: &mut RelayReport) {
        // A batch leaves the list only once its write returned, so a flush
        // cut short (at the shutdown deadline) loses nothing it has not written.
        while !self.unwritten.is_empty() {
            let n = self.unwritten.len().min(self.batch_size);
            match worker.write_results(&self.unwritten[..n]).await {
                Ok(written) => {
                    self.unwritten.drain(..n);
                    self.lease_ends.drain(..n);
                    for completion in &written.written {
                        count(report, completion);
                        self.retries_written |= completion.status == Status::Waiting;
                    }
                    report.dropped += written.dropped;
                }
                Err(error) => {
                    report.errors += 1;
                    tracing::warn!(
                        error = %error.chain(),
                        unwritten = self.unwritten.len(),
                        "relay could not write results; will retry"
                    );
                    break;
                }
            }
        }
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
        telemetry::unwritten(self.unwritten.len());
    }

    /// Gives up on every result still waiting (the relay is stopping and its
    /// last write failed): their tasks run again once their leases lapse.
    pub(super) fn abandon(&mut self, report: &mut RelayReport) {
        let left = self.unwritten.len();
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
