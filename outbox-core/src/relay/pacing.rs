//! When a relay under a backlog claims again: [`Pacing`].

use std::time::Duration;

use tokio::time::Instant;

/// Handlers count as fast when they take at most this fraction of a
/// claim's round trip.
const FAST_FRACTION: u32 = 4;

/// Weight of the newest sample in the running averages, as 1/`SMOOTHING`.
const SMOOTHING: u32 = 8;

/// Decides when a relay under a backlog claims again.
///
/// A claim takes as many tasks as there are free handler slots. While
/// handlers take about as long as a claim's round trip or longer, the relay
/// claims again once half of its slots are free, so the next batch arrives
/// while the other half still runs. When handlers finish in a fraction of a
/// claim's round trip (an in-memory handler, a cache write), claiming at
/// half would halve every claim for nothing: the other half is done long
/// before the claim is back, and twice as many claims cost the database
/// twice the round trips. Then the relay waits until every slot is free,
/// or until neither a handler finished nor a claim came back for a claim's
/// round trip (what still runs is slow, so the free half is claimed after
/// all), and its claims stay full.
///
/// Both averages are taken as the relay sees them: a handler from its start
/// to the loop taking its result, a claim from its start to the loop taking
/// its rows, queueing on a busy runtime included. They only place the line
/// between fast and slow handlers; either way the relay keeps claiming.
#[derive(Debug)]
pub(super) struct Pacing {
    slots: usize,
    /// Running average of a handler's run, start to result.
    handler: Option<Duration>,
    /// Running average of a claim's round trip.
    claim: Option<Duration>,
    /// When a handler last finished or a claim last came back.
    last_progress: Option<Instant>,
}

/// What [`Pacing::decide`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Claim now, as many tasks as there are free slots.
    Claim,
    /// Not yet: decide again when a handler finishes, or at this instant.
    Wait(Option<Instant>),
}

impl Pacing {
    /// Pacing for a relay with `slots` handler slots.
    pub(super) fn new(slots: usize) -> Self {
        Self {
            slots,
            handler: None,
            claim: None,
            last_progress: None,
        }
    }

    /// A handler finished at `at` after running for `ran`.
    pub(super) fn handler_finished(&mut self, ran: Duration, at: Instant) {
        self.handler = Some(average(self.handler, ran));
        self.progressed(at);
    }

    /// A claim came back at `at` after `took`.
    pub(super) fn claim_returned(&mut self, took: Duration, at: Instant) {
        self.claim = Some(average(self.claim, took));
        self.progressed(at);
    }

    fn progressed(&mut self, at: Instant) {
        self.last_progress = Some(self.last_progress.map_or(at, |last| last.max(at)));
    }

    /// Whether handlers finish in a fraction of a claim's round trip.
    pub(super) fn handlers_are_fast(&self) -> bool {
        match (self.handler, self.claim) {
            (Some(handler), Some(claim)) => handler.saturating_mul(FAST_FRACTION) <= claim,
            _ => false,
        }
    }

    /// Whether a relay under a backlog with `free` handler slots claims at
    /// `now`.
    pub(super) fn decide(&self, free: usize, now: Instant) -> Decision {
        if free == 0 || free < self.slots.div_ceil(2) {
            return Decision::Wait(None);
        }
        if free >= self.slots || !self.handlers_are_fast() {
            return Decision::Claim;
        }
        // Half or more free and handlers are fast: wait for the rest, but
        // no longer than a claim's round trip since the last one finished
        // (or since the last claim came back, which started the newest).
        let (Some(last), Some(claim)) = (self.last_progress, self.claim) else {
            return Decision::Claim;
        };
        let stragglers = super::later(last, claim);
        if now >= stragglers {
            Decision::Claim
        } else {
            Decision::Wait(Some(stragglers))
        }
    }
}

/// `previous` moved towards `sample` by 1/`SMOOTHING` of the difference.
fn average(previous: Option<Duration>, sample: Duration) -> Duration {
    match previous {
        None => sample,
        Some(previous) => {
            let weight = f64::from(SMOOTHING);
            previous.mul_f64((weight - 1.0) / weight) + sample.div_f64(weight)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn slow_handlers_claim_once_half_the_slots_are_free() {
        let now = Instant::now();
        let mut pacing = Pacing::new(100);
        // Before anything was measured: at half.
        assert_eq!(pacing.decide(49, now), Decision::Wait(None));
        assert_eq!(pacing.decide(50, now), Decision::Claim);
        pacing.claim_returned(4 * MS, now);
        pacing.handler_finished(2 * MS, now);
        assert!(!pacing.handlers_are_fast());
        assert_eq!(pacing.decide(50, now), Decision::Claim);
        assert_eq!(pacing.decide(0, now), Decision::Wait(None));
    }

    #[test]
    fn fast_handlers_claim_when_every_slot_is_free_or_the_rest_are_stragglers() {
        let now = Instant::now();
        let mut pacing = Pacing::new(100);
        pacing.claim_returned(4 * MS, now);
        pacing.handler_finished(Duration::from_micros(50), now);
        assert!(pacing.handlers_are_fast());
        assert_eq!(pacing.decide(49, now), Decision::Wait(None));
        // Half free: wait for the rest, at most a claim's round trip.
        assert_eq!(pacing.decide(80, now), Decision::Wait(Some(now + 4 * MS)));
        assert_eq!(pacing.decide(80, now + 4 * MS), Decision::Claim);
        // Every slot free: at once.
        assert_eq!(pacing.decide(100, now), Decision::Claim);
        // A claim that just came back started the newest handlers: the
        // free half waits for them even though the last one finished long ago.
        let later = now + 100 * MS;
        pacing.claim_returned(4 * MS, later);
        assert_eq!(
            pacing.decide(60, later),
            Decision::Wait(Some(later + 4 * MS))
        );
    }

    #[test]
    fn the_averages_follow_a_change_of_handler_speed() {
        let now = Instant::now();
        let mut pacing = Pacing::new(10);
        pacing.claim_returned(4 * MS, now);
        pacing.handler_finished(Duration::from_micros(50), now);
        assert!(pacing.handlers_are_fast());
        // Handlers slow down: within a few dozen results the relay claims at half again.
        for _ in 0..30 {
            pacing.handler_finished(20 * MS, now);
        }
        assert!(!pacing.handlers_are_fast());
        assert_eq!(pacing.decide(5, now), Decision::Claim);
    }
}
