//! The relay's maintenance task: promotion, rescue, retention, stats and
//! heartbeats, off the claim path.
//!
//! It runs beside the claim loop on its own pool connection, so a long purge
//! or a slow count never delays a claim: the claim loop only ever waits on
//! its own statements. Nor does a purge backlog delay promotion and rescue:
//! each pass purges at most [`PURGE_STATEMENTS_PER_PASS`] statements and
//! goes on at the next pass, after that pass's promotion and rescue. Nor
//! does a purge take the claims' share of the database in bursts: between
//! passes it pauses as long as the pass took, unless it has run for a whole
//! `purge_interval` ([`PurgeSchedule`]).

use std::{sync::Arc, time::Duration};

use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use super::{RelayConfig, later};
use crate::{BEAT_INTERVAL, Maintenance, Worker, activity::Activity, telemetry};

/// The most purge statements (of `purge_batch` rows each) between two
/// promotion and rescue steps. A backlog of finished rows to purge (when
/// retention is first switched on, or after an outage) is worked off this
/// many statements at a time, with a pause between passes ([`PurgeSchedule`]),
/// until it is gone, so that due tasks and lapsed leases keep moving however
/// many rows wait to be purged.
pub(crate) const PURGE_STATEMENTS_PER_PASS: u32 = 4;

/// What the maintenance task did, merged into the relay's report at the end.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Maintained {
    pub promoted: u64,
    pub rescued: u64,
    pub purged: u64,
    /// Time spent in purge passes.
    pub purge_time: Duration,
    pub errors: u64,
}

/// When the next purge pass runs, and since when the cycle under way has
/// run.
///
/// A cycle purges all that finished over a whole `purge_interval`: run
/// back to back, its statements took most of the database from the claims
/// for as long as they ran (measured on MariaDB under sustained load:
/// relays cut to a third for 10 to 20 s of every 30-s cycle). So after each
/// pass the cycle pauses as long as the pass took, and this relay's purge
/// holds its connection at most about half the time. A cycle that has run
/// for a whole `purge_interval` has fallen behind the rows finishing: it
/// then runs back to back until it is done, as every cycle did before the
/// pause, so a purge that needs more than half the time gets all of it.
#[derive(Debug, Clone, Copy)]
struct PurgeSchedule {
    /// When the next pass may start: the next cycle's first, or within a
    /// cycle the end of its pause.
    next: Instant,
    /// When the cycle under way started; `None` between cycles.
    cycle_started: Option<Instant>,
    /// Whether the cycle under way has run for a whole `purge_interval`.
    behind: bool,
}

impl PurgeSchedule {
    /// The first cycle starts at `now`.
    fn new(now: Instant) -> Self {
        Self {
            next: now,
            cycle_started: None,
            behind: false,
        }
    }

    /// Whether the next pass may start at `now`.
    fn is_due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Whether a cycle is under way and its next pass may start at `now`:
    /// the maintenance task goes straight on with it.
    fn goes_straight_on(&self, now: Instant) -> bool {
        self.cycle_started.is_some() && self.is_due(now)
    }

    /// The end of the pause of a cycle under way, for the maintenance
    /// task's sleep; between cycles, its own poll is soon enough.
    fn pause_ends(&self) -> Option<Instant> {
        self.cycle_started.map(|_| self.next)
    }

    /// A pass from `pass_began` to `now` ended, with `more` rows left to
    /// purge or none. With more, the cycle's next pass starts as long after
    /// `now` as the pass took, or at `now` once the cycle has run for
    /// `interval`; with none, the next cycle starts `interval` after `now`.
    /// Returns `true` at the one pass of a cycle that first ends `interval`
    /// or more after the cycle began with more to purge (the cycle has
    /// fallen behind), and `false` otherwise.
    fn passed(
        &mut self,
        more: bool,
        pass_began: Instant,
        now: Instant,
        interval: Duration,
    ) -> bool {
        if !more {
            *self = Self {
                next: later(now, interval),
                cycle_started: None,
                behind: false,
            };
            return false;
        }
        let started = *self.cycle_started.get_or_insert(pass_began);
        let fell_behind = !self.behind && now >= later(started, interval);
        self.behind |= fell_behind;
        self.next = if self.behind {
            now
        } else {
            later(now, now.saturating_duration_since(pass_began))
        };
        fell_behind
    }
}

/// How the maintenance task and the claim loop reach each other.
pub(super) struct Signals {
    /// Notified after a step made tasks available, so the claim loop
    /// claims at once.
    pub available: Arc<Notify>,
    /// Notified by the claim loop when the next due time may have moved.
    pub rescheduled: Arc<Notify>,
    /// The claim loop's last claim and write, for the heartbeats.
    pub activity: Arc<Activity>,
}

/// Runs until `stop` is cancelled. After each step that made tasks
/// available, `available` is notified so the claim loop claims at once.
/// Between steps it sleeps until the next waiting task is due, at most the
/// poll interval, or until `rescheduled` says the next due time may have
/// moved. It writes the relay's heartbeat every [`BEAT_INTERVAL`], and
/// deletes it when stopped.
pub(super) async fn run<S: Maintenance>(
    worker: Worker<S>,
    config: RelayConfig,
    signals: Signals,
    stop: CancellationToken,
) -> Maintained {
    let Signals {
        available,
        rescheduled,
        activity,
    } = signals;
    let store = worker.store();
    let owner = worker.config().owner.clone();
    let mut next_beat = Instant::now();
    let mut done = Maintained::default();
    // Rows per statement; the setting is bounded by MAX_BATCH_SIZE.
    let step = u32::try_from(config.purge_batch).unwrap_or(u32::MAX);
    let mut next_count = Instant::now();
    let mut purges = PurgeSchedule::new(Instant::now());
    while !stop.is_cancelled() {
        let moved = advance(&worker, step, &mut done).await;
        if moved > 0 {
            available.notify_one();
        }
        if let Some(retention) = config.retention
            && purges.is_due(Instant::now())
        {
            let pass_began = Instant::now();
            let more = purge_step(store, retention, step, &mut done).await;
            let now = Instant::now();
            done.purge_time += now.saturating_duration_since(pass_began);
            if purges.passed(more, pass_began, now, config.purge_interval) {
                tracing::info!(
                    %owner,
                    purge_interval = ?config.purge_interval,
                    "relay's purge has run for a whole purge_interval and finds more to purge: \
                     it goes on without pausing"
                );
            }
        }
        if Instant::now() >= next_beat {
            if let Err(error) = store.beat(&activity.heartbeat(&owner)).await {
                done.errors += 1;
                tracing::warn!(error = %error.chain(), "relay could not write its heartbeat");
            }
            next_beat = later(Instant::now(), BEAT_INTERVAL);
        }
        if Instant::now() >= next_count {
            count(store, &mut done).await;
            next_count = later(Instant::now(), config.purge_interval);
        }
        if purges.goes_straight_on(Instant::now()) {
            // Straight on with the purge, after the next promotion and
            // rescue; a shutdown is noticed at the top of the loop.
            tokio::task::yield_now().await;
            continue;
        }
        let sleep = match store.next_due().await {
            Ok(Some(due_in)) => due_in.min(config.poll_interval),
            Ok(None) => config.poll_interval,
            Err(error) => {
                done.errors += 1;
                tracing::warn!(error = %error.chain(), "relay could not read the next due time");
                config.poll_interval
            }
        };
        // Wake for the next heartbeat too, whatever else is due, and for
        // the next pass of a purge under way.
        let wake = purges
            .pause_ends()
            .map_or(next_beat, |at| at.min(next_beat));
        let sleep = sleep.min(wake.saturating_duration_since(Instant::now()));
        // A task due in less than a millisecond is promoted on the next
        // pass; never spin on a zero sleep.
        let sleep = sleep.max(Duration::from_millis(1));
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(sleep) => {}
            () = rescheduled.notified() => {}
        }
    }
    if let Err(error) = store.forget_relay(&owner).await {
        done.errors += 1;
        tracing::warn!(error = %error.chain(), "relay could not delete its heartbeat");
    }
    done
}

/// One promotion and rescue step, a statement of at most `step` rows at a
/// time, until a statement comes back short; returns the tasks made
/// available (or failed, for rescues out of attempts, whose failure hook
/// the worker runs).
async fn advance<S: Maintenance>(worker: &Worker<S>, step: u32, done: &mut Maintained) -> u64 {
    let store = worker.store();
    let promoted = counted(
        drain(step, || store.promote(step)).await,
        "promote due tasks",
        done,
    );
    let rescued = counted(worker.rescue(step).await, "rescue lapsed leases", done);
    done.promoted += promoted;
    done.rescued += rescued;
    telemetry::moved(promoted, rescued);
    promoted + rescued
}

/// The count of a step, or zero after logging and counting its error.
fn counted(result: crate::Result<u64>, what: &str, done: &mut Maintained) -> u64 {
    result.unwrap_or_else(|error| {
        done.errors += 1;
        tracing::warn!(error = %error.chain(), "relay could not {what}");
        0
    })
}

/// Repeats `statement` while it moves a full `step` of rows.
pub(crate) async fn drain<F, Fut>(step: u32, mut statement: F) -> crate::Result<u64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::Result<u64>>,
{
    let mut total = 0;
    loop {
        let moved = statement().await?;
        total += moved;
        if moved < u64::from(step) {
            return Ok(total);
        }
    }
}

/// Purges up to [`PURGE_STATEMENTS_PER_PASS`] statements of `step` rows
/// finished more than `retention` ago; `true` when the last one was full,
/// so more rows may wait to be purged.
async fn purge_step<S: Maintenance>(
    store: &S,
    retention: Duration,
    step: u32,
    done: &mut Maintained,
) -> bool {
    for _ in 0..PURGE_STATEMENTS_PER_PASS {
        match store.purge_batch(retention, step).await {
            Ok(purged) => {
                done.purged += purged;
                if purged < u64::from(step) {
                    return false;
                }
            }
            Err(error) => {
                done.errors += 1;
                tracing::warn!(error = %error.chain(), "relay could not purge finished tasks");
                return false;
            }
        }
    }
    true
}

/// Refreshes the status gauges.
async fn count<S: Maintenance>(store: &S, done: &mut Maintained) {
    match store.stats().await {
        Ok(stats) => telemetry::stats(&stats),
        Err(error) => {
            done.errors += 1;
            tracing::warn!(error = %error.chain(), "relay could not read stats");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A schedule whose cycle started at `started` with a first pass of
    /// 10 ms that left more to purge.
    fn under_way(started: Instant, interval: Duration) -> PurgeSchedule {
        let mut purges = PurgeSchedule::new(started);
        assert!(!purges.passed(true, started, started + 10 * MS, interval));
        purges
    }

    #[test]
    fn a_purge_keeping_up_pauses_as_long_as_its_pass_took() {
        let started = Instant::now();
        let mut purges = under_way(started, 60_000 * MS);
        let pass_began = started + 100 * MS;
        let now = pass_began + 30 * MS;
        assert!(!purges.passed(true, pass_began, now, 60_000 * MS));
        assert_eq!(purges.cycle_started, Some(started));
        assert_eq!(purges.next, now + 30 * MS);
        assert_eq!(purges.pause_ends(), Some(now + 30 * MS));
        assert!(!purges.goes_straight_on(now));
        assert!(purges.goes_straight_on(now + 30 * MS));
    }

    #[test]
    fn a_purge_behind_the_next_cycle_goes_straight_on() {
        let started = Instant::now();
        let mut purges = under_way(started, 1_000 * MS);
        let pass_began = started + 990 * MS;
        let now = pass_began + 30 * MS;
        assert!(
            purges.passed(true, pass_began, now, 1_000 * MS),
            "the first pass past the interval says the cycle fell behind"
        );
        assert_eq!(purges.next, now);
        assert!(purges.goes_straight_on(now));
        assert!(
            !purges.passed(true, now, now + 30 * MS, 1_000 * MS),
            "a cycle falls behind once"
        );
        assert_eq!(purges.next, now + 30 * MS);
        assert!(!purges.passed(false, now + 30 * MS, now + 40 * MS, 1_000 * MS));
        assert!(!purges.behind, "the next cycle starts afresh");
        let next = now + 1_040 * MS;
        assert!(!purges.passed(true, next, next + 10 * MS, 1_000 * MS));
        assert!(
            purges.passed(true, next + 990 * MS, next + 1_020 * MS, 1_000 * MS),
            "the next cycle that falls behind says so again"
        );
    }

    #[test]
    fn a_first_pass_longer_than_the_interval_has_fallen_behind() {
        let started = Instant::now();
        let mut purges = PurgeSchedule::new(started);
        let now = started + 1_500 * MS;
        assert!(purges.passed(true, started, now, 1_000 * MS));
        assert_eq!(purges.next, now);
    }

    #[test]
    fn a_finished_cycle_waits_for_the_next() {
        let started = Instant::now();
        let mut purges = under_way(started, 1_000 * MS);
        let now = started + 50 * MS;
        assert!(!purges.passed(false, started + 40 * MS, now, 1_000 * MS));
        assert_eq!(purges.cycle_started, None);
        assert_eq!(purges.next, now + 1_000 * MS);
        assert_eq!(purges.pause_ends(), None);
        assert!(!purges.goes_straight_on(now + 2_000 * MS));
        assert!(purges.is_due(now + 1_000 * MS));
    }
}
