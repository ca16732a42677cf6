//! One compensation round: [`Worker::retry_pending`] and its [`RoundReport`].

use std::time::Instant;

use futures_util::{StreamExt, stream};
use tracing::{Instrument, Span};

use crate::{
    BatchRequest, ClaimedTask, Error, Result, Status, Store, Worker, WriteReport,
    limits::MAX_BATCH_SIZE,
    relay::maintainer::drain,
    telemetry,
    transition::{self, Completion},
};

/// A claimed batch, the claim's span, and when the claim went out.
struct Claimed {
    records: Vec<ClaimedTask>,
    span: Span,
    at: Instant,
}

/// What one call of [`Worker::retry_pending`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoundReport {
    /// Tasks claimed for an attempt.
    pub claimed: u64,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed and will be retried (including tasks with no handler).
    pub retried: u64,
    /// Attempts that failed for good.
    pub failed: u64,
    /// Tasks found past their deadline and marked failed without an attempt.
    pub expired: u64,
    /// Claims given back unstarted because too little of their lease was left.
    pub released: u64,
    /// Results that could not be written, nor a failure in their place; their
    /// tasks run again once their lease lapses.
    pub dropped: u64,
    /// Waiting tasks made available because their time had come.
    pub promoted: u64,
    /// Running tasks whose lease had lapsed, made available again (or failed
    /// when out of attempts).
    pub rescued: u64,
}

impl RoundReport {
    /// Counts the results of one batch's write.
    fn tally(&mut self, written: &WriteReport) {
        for completion in &written.written {
            self.count(completion);
        }
        self.dropped += written.dropped;
    }

    fn count(&mut self, completion: &Completion) {
        match completion.status {
            _ if completion.released => self.released += 1,
            Status::Succeeded => self.succeeded += 1,
            Status::Failed | Status::Discarded => self.failed += 1,
            Status::Available | Status::Waiting | Status::Running | Status::Blocked => {
                self.retried += 1
            }
        }
    }
}

impl<S: Store> Worker<S> {
    /// One compensation round over every due task.
    ///
    /// First makes due waiting tasks available and rescues lapsed leases,
    /// `batch_size` rows per statement. Then claims available tasks in id
    /// order, `batch_size` at a time, with `SKIP LOCKED` so that several
    /// workers share the work. A round considers only
    /// tasks due when it began, so each task is tried at most once per round
    /// even when its retry is due at once or another worker runs a round
    /// concurrently. Handlers run concurrently (up to the configured
    /// concurrency) and results are written back one statement per batch,
    /// while the next batch is claimed on another pooled connection (after
    /// the write instead, when it lets an ordering key move on; SQLite runs
    /// the two one after the other, as it does every write); a
    /// result the database refuses is recorded as a failure of its task
    /// instead ([`Worker::write_results`]). The round stops early on a passing
    /// database fault (returned; a batch claimed beside the failed write is
    /// given back unstarted) and never on a handler error (recorded on
    /// the task). Dropping the future cancels the round;
    /// tasks it had claimed become claimable again when their lease ends.
    pub async fn retry_pending(&self, batch_size: usize) -> Result<RoundReport> {
        if batch_size == 0 || batch_size > MAX_BATCH_SIZE {
            return Err(Error::invalid(
                "batch_size",
                format!("must be between 1 and {MAX_BATCH_SIZE}"),
            ));
        }
        let span = telemetry::round_span(batch_size);
        let report = self.round(batch_size).instrument(span.clone()).await?;
        span.record("outbox.claimed", telemetry::int(report.claimed));
        Ok(report)
    }

    /// The body of [`retry_pending`](Self::retry_pending), `batch_size` checked.
    async fn round(&self, batch_size: usize) -> Result<RoundReport> {
        let mut report = RoundReport::default();
        // Bounded by MAX_BATCH_SIZE by the caller.
        let step = u32::try_from(batch_size).unwrap_or(u32::MAX);
        report.promoted = drain(step, || self.store().promote(step)).await?;
        report.rescued = self.rescue(step).await?;
        telemetry::moved(report.promoted, report.rescued);
        let mut request = BatchRequest {
            lease: self.lease_request(),
            limit: batch_size,
            after: None,
            due_by: None,
        };
        let mut claimed = self.claim_batch(&request).await?;
        loop {
            let Claimed {
                mut records,
                span: claim,
                at: claimed_at,
            } = claimed;
            let Some(last) = records.iter().map(|r| r.id).max() else {
                break;
            };
            request.after = Some(last);
            // The first claim's database time marks the round's start.
            if request.due_by.is_none() {
                request.due_by = records.iter().map(|r| r.claimed_at).min();
            }
            let exhausted = records.len() < batch_size;
            report.expired += self.set_aside_expired(&mut records);
            report.claimed += records.len() as u64;
            let completions: Vec<Completion> = stream::iter(self.units(records))
                .map(|unit| self.attempt_unit_within_lease(unit, claimed_at, claim.clone()))
                .buffer_unordered(self.config().concurrency)
                .flat_map(stream::iter)
                .collect()
                .await;
            // After the last batch there is nothing to claim. A write that
            // lets an ordering key move on makes the key's next task
            // available: the next claim follows it, so the round sees that
            // task, as it would without the overlap.
            if exhausted || completions.iter().any(transition::moves_key_on) {
                report.tally(&self.write_results(&completions).await?);
                if exhausted {
                    break;
                }
                claimed = self.claim_batch(&request).await?;
                continue;
            }
            // Otherwise the next claim goes out beside this batch's write,
            // each on a connection of its own: between two batches a round
            // waits for one round trip, not two.
            let (written, next) = futures_util::future::join(
                self.write_results(&completions),
                self.claim_batch(&request),
            )
            .await;
            match (written, next) {
                (Ok(written), next) => {
                    report.tally(&written);
                    claimed = next?;
                }
                (Err(error), Ok(next)) => {
                    self.give_back(next.records).await;
                    return Err(error);
                }
                (Err(error), Err(claim_error)) => {
                    tracing::warn!(
                        error = %claim_error.chain(),
                        "the claim beside a failed write failed too"
                    );
                    return Err(error);
                }
            }
        }
        Ok(report)
    }

    /// Claims the next batch of `request`, noting when the claim went out.
    async fn claim_batch(&self, request: &BatchRequest) -> Result<Claimed> {
        let at = Instant::now();
        let (records, span) = self.claim_due(request).await?;
        Ok(Claimed { records, span, at })
    }

    /// Gives back a batch claimed but never started, after its round
    /// stopped on a fault: each task is claimable again at once, and the
    /// claim does not count as a run. Expired tasks came back failed and
    /// only go to the failure hook. If the give-back cannot be written
    /// either, the leases lapse and the tasks run later.
    async fn give_back(&self, mut records: Vec<ClaimedTask>) {
        self.set_aside_expired(&mut records);
        let releases: Vec<Completion> = records
            .iter()
            .map(|record| transition::release(self.fence(record)))
            .collect();
        if let Err(error) = self.write(&releases).await {
            tracing::warn!(
                error = %error.chain(),
                "could not give back the batch claimed when the round stopped; \
                 its tasks run again once their leases lapse"
            );
        }
    }
}
