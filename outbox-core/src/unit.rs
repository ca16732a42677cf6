//! Claimed tasks in the units their handlers take them: [`Unit`], one
//! delivery or a batch handler's batch, and what a unit came to,
//! [`Finished`].

use std::{future::Future, sync::Arc};

use futures_util::{FutureExt, future::Either};
use tracing::Span;

use crate::{
    BatchHandler, ClaimedTask, HandlerKey, Handling, Store, Worker, attempt::run_batch, transition,
    transition::Completion,
};

/// What one handler call takes: one record, or the records of one kind
/// registered with a [`BatchHandler`], in claim order.
#[allow(
    clippy::large_enum_variant,
    reason = "a unit lives from its claim to its handler's start; boxing the common case would cost an allocation per delivery"
)]
pub(crate) enum Unit {
    /// A task whose kind has a per-delivery handler, or none.
    One(ClaimedTask),
    /// Tasks of one batch-handled kind and version.
    Batch(Arc<dyn BatchHandler>, Vec<ClaimedTask>),
}

impl Unit {
    /// The records of the unit.
    pub(crate) fn records(&self) -> &[ClaimedTask] {
        match self {
            Self::One(record) => std::slice::from_ref(record),
            Self::Batch(_, records) => records,
        }
    }
}

/// The completions of a unit's records, in the unit's order.
pub(crate) enum Finished {
    /// The one record's.
    One(Completion),
    /// A batch's.
    Batch(Vec<Completion>),
}

impl IntoIterator for Finished {
    type Item = Completion;
    // One or the other is empty (an empty `Vec` allocates nothing).
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<Completion>, std::vec::IntoIter<Completion>>;

    fn into_iter(self) -> Self::IntoIter {
        let (one, many) = match self {
            Self::One(completion) => (Some(completion), Vec::new()),
            Self::Batch(completions) => (None, completions),
        };
        one.into_iter().chain(many)
    }
}

impl<S: Store> Worker<S> {
    /// Groups claimed `records` into units: each kind registered with a
    /// batch handler in one batch (in claim order), every other record
    /// alone.
    pub(crate) fn units(&self, records: Vec<ClaimedTask>) -> Vec<Unit> {
        if !self.registry().has_batch_handlers() {
            return records.into_iter().map(Unit::One).collect();
        }
        let mut units = Vec::with_capacity(records.len());
        // Each kind and version met so far, with its batch's unit: the
        // registry is asked once per kind, not once per record.
        let mut seen: Vec<(HandlerKey, Option<usize>)> = Vec::new();
        for record in records {
            let known = seen
                .iter()
                .find(|(key, _)| key.kind == record.task.kind && key.version == record.task.version)
                .map(|(_, at)| *at);
            let at = match known {
                Some(at) => at,
                None => {
                    let key = HandlerKey::new(record.task.kind.as_str(), record.task.version);
                    let at = match self.registry().get(&key) {
                        Some(Handling::Batch(handler)) => {
                            units.push(Unit::Batch(Arc::clone(handler), Vec::new()));
                            Some(units.len() - 1)
                        }
                        _ => None,
                    };
                    seen.push((key, at));
                    at
                }
            };
            match at.and_then(|at| units.get_mut(at)) {
                Some(Unit::Batch(_, batch)) => batch.push(record),
                _ => units.push(Unit::One(record)),
            }
        }
        units
    }

    /// Runs a unit's handler once and decides each record's completion;
    /// `claim` is the span of the claim that took it.
    pub(crate) fn attempt_unit(
        &self,
        unit: Unit,
        claim: Span,
    ) -> impl Future<Output = Finished> + Send + 'static {
        match unit {
            Unit::One(record) => Either::Left(
                self.attempt(record, claim)
                    .map(|(completion, _)| Finished::One(completion)),
            ),
            Unit::Batch(handler, records) => {
                Either::Right(self.attempt_batch(handler, records, claim))
            }
        }
    }

    /// A unit of records run at once, unless too little of the claim taken
    /// at `claimed_at` is left for a handler timeout: then every claim is
    /// released unstarted.
    pub(crate) fn attempt_unit_within_lease(
        &self,
        unit: Unit,
        claimed_at: std::time::Instant,
        claim: Span,
    ) -> impl Future<Output = Finished> + Send + 'static {
        if self.lease_outlasts_handler(claimed_at) {
            Either::Left(self.attempt_unit(unit, claim))
        } else {
            let released = unit
                .records()
                .iter()
                .map(|record| transition::release(self.fence(record)))
                .collect();
            Either::Right(std::future::ready(Finished::Batch(released)))
        }
    }

    /// Runs `handler` once for `records` and decides each completion.
    fn attempt_batch(
        &self,
        handler: Arc<dyn BatchHandler>,
        records: Vec<ClaimedTask>,
        claim: Span,
    ) -> impl Future<Output = Finished> + Send + 'static {
        let decided: Vec<_> = records
            .iter()
            .map(|record| (self.fence(record), record.runs(), record.task.max_attempts))
            .collect();
        let metrics = match records.first() {
            Some(first) => self.registry().kind_keys(&first.task.kind),
            None => self.registry().kind_keys(""),
        };
        let retry = self.config().retry;
        let running = run_batch(
            handler,
            records,
            self.known_outbox(),
            self.config().handler_timeout,
            claim,
            Arc::clone(&metrics),
        );
        running.map(move |outcomes| {
            let completions = decided
                .into_iter()
                .zip(outcomes)
                .map(|((fence, run, max_attempts), outcome)| {
                    let completion = transition::decide(fence, run, max_attempts, outcome, &retry);
                    metrics.outcome(&completion);
                    completion
                })
                .collect();
            Finished::Batch(completions)
        })
    }
}
