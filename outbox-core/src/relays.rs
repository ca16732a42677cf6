//! Relays that say they are alive: each running [`Relay`](crate::Relay)
//! writes a [`Heartbeat`] into the outbox's `outbox_relays` table every
//! [`BEAT_INTERVAL`], and deletes its row when it stops; operators read the
//! rows back as [`RelaySeen`] ([`Maintenance::relays`](crate::Maintenance::relays)).
//! A worker whose `retry_pending` rounds stand in for a relay writes its
//! own with [`Worker::beat`].

use std::time::Duration;

use crate::{Error, Maintenance, Result, Worker};

/// How often a relay writes its heartbeat.
pub const BEAT_INTERVAL: Duration = Duration::from_secs(5);

/// How long after its last heartbeat a relay still counts as live: six
/// beats, so a relay whose maintenance pass is slow for a while (a long
/// purge, a database failing over) is not taken for dead.
pub const BEAT_TTL: Duration = Duration::from_secs(30);

/// What a relay says of itself with each heartbeat. The times are ages
/// (how long ago), which the database turns into instants on its own
/// clock, so relays on hosts whose clocks differ still agree.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Heartbeat {
    /// The relay's worker's name (`WorkerConfig::owner`), the
    /// `lease_owner` of the tasks it runs: one row per owner.
    pub owner: String,
    /// The host it runs on, as the operating system names it.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The version of this crate it runs.
    pub version: String,
    /// How long it has run.
    pub up: Duration,
    /// How long ago it last claimed tasks; `None`: never yet.
    pub since_claim: Option<Duration>,
    /// How long ago it last wrote results back; `None`: never yet.
    pub since_write: Option<Duration>,
    /// How long the heartbeat counts: the row is live until then.
    pub ttl: Duration,
}

impl Heartbeat {
    /// A heartbeat of the relay whose worker is `owner`, on this host and
    /// process, running this crate's version, that has run for `up`.
    pub fn new(owner: impl Into<String>, up: Duration) -> Self {
        Self {
            owner: owner.into(),
            host: host_name(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            up,
            since_claim: None,
            since_write: None,
            ttl: BEAT_TTL,
        }
    }
}

/// A relay as the outbox last heard of it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelaySeen {
    /// As in [`Heartbeat::owner`].
    pub owner: String,
    /// As in [`Heartbeat::host`].
    pub host: String,
    /// As in [`Heartbeat::pid`].
    pub pid: i64,
    /// As in [`Heartbeat::version`].
    pub version: String,
    /// How long ago it started.
    pub started: Duration,
    /// How long ago its last heartbeat came.
    pub since_beat: Duration,
    /// How long ago it last claimed tasks, as of its last heartbeat and
    /// since; `None`: never.
    pub since_claim: Option<Duration>,
    /// How long ago it last wrote results back; `None`: never.
    pub since_write: Option<Duration>,
    /// Whether its last heartbeat still counts: `false` once its time to
    /// live passed without another, when the relay died or hangs.
    pub live: bool,
}

impl RelaySeen {
    /// The relay as a backend read it: ages in microseconds as the
    /// database computed them (a negative one, from a clock step, reads as
    /// zero).
    pub fn from_us(
        owner: String,
        host: String,
        pid: i64,
        version: String,
        ages_us: [Option<i64>; 4],
        live: bool,
    ) -> Self {
        let age =
            |us: Option<i64>| us.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)));
        let [started, beat, claim, write] = ages_us.map(age);
        Self {
            owner,
            host,
            pid,
            version,
            started: started.unwrap_or_default(),
            since_beat: beat.unwrap_or_default(),
            since_claim: claim,
            since_write: write,
            live,
        }
    }
}

/// This host's name: `HOSTNAME` when set, else the kernel's, else
/// `unknown`.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

impl<S: Maintenance> Worker<S> {
    /// Records this worker's heartbeat in `outbox_relays`, as a relay does
    /// every [`BEAT_INTERVAL`], counting as live for `ttl`: for services
    /// that deliver with [`retry_pending`](Worker::retry_pending) rounds
    /// instead of a relay, so that `outbox relays`, [`Stats::live_relays`]
    /// and the dashboard show them. Call it after each round, with a `ttl`
    /// a little above the time between rounds; the heartbeat says when the
    /// worker last claimed tasks and wrote results (in its rounds, its
    /// `send` calls, or a relay built on it). One small
    /// write; rows whose heartbeats stopped a day ago are swept with it.
    ///
    /// The row stays until its time to live ends and is swept a day later;
    /// a service that stops on purpose deletes it with
    /// [`Maintenance::forget_relay`] and the worker's owner.
    /// [`Error::InvalidArgument`] naming `ttl` unless it is positive and at
    /// most [`MAX_DURATION`](crate::limits::MAX_DURATION).
    ///
    /// ```no_run
    /// # async fn demo<S: diesel_outbox_core::Maintenance>(worker: diesel_outbox_core::Worker<S>) -> diesel_outbox_core::Result<()> {
    /// use std::time::Duration;
    ///
    /// loop {
    ///     worker.retry_pending(100).await?;
    ///     worker.beat(Duration::from_secs(30)).await?;
    ///     tokio::time::sleep(Duration::from_secs(10)).await;
    /// }
    /// # }
    /// ```
    ///
    /// [`Stats::live_relays`]: crate::Stats::live_relays
    pub async fn beat(&self, ttl: Duration) -> Result<()> {
        if ttl.is_zero() || ttl > crate::limits::MAX_DURATION {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "must be positive and at most {:?}",
                    crate::limits::MAX_DURATION
                ),
            ));
        }
        let mut beat = self.activity().heartbeat(&self.config().owner);
        beat.ttl = ttl;
        self.store().beat(&beat).await
    }
}
