//! The small rows the backends' statements answer, named once: diesel
//! reads each from any backend whose column types match.

use diesel::{
    QueryableByName,
    sql_types::{BigInt, Bool, Nullable, Text},
};
use diesel_outbox_core::TaskId;

/// A task's id.
#[derive(Debug, QueryableByName)]
pub struct Id {
    /// The id.
    #[diesel(sql_type = BigInt)]
    pub id: i64,
}

/// A claim whose result applied: the row's id and `attempts`.
#[derive(Debug, QueryableByName, PartialEq, Eq, Hash)]
pub struct Applied {
    /// The task.
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    /// Its `attempts`, the claim's fence.
    #[diesel(sql_type = BigInt)]
    pub attempts: i64,
}

impl Applied {
    /// As `(id, attempt)`.
    pub fn claim(self) -> (TaskId, i64) {
        (TaskId::new(self.id), self.attempts)
    }
}

/// An ordering key's count of open tasks.
#[derive(Debug, QueryableByName)]
pub struct KeyCount {
    /// The key.
    #[diesel(sql_type = Text)]
    pub ordering_key: String,
    /// Its open tasks.
    #[diesel(sql_type = BigInt)]
    pub open_tasks: i64,
}

/// A task a rescue moved, and whether it failed it.
#[derive(Debug, QueryableByName)]
pub struct Moved {
    /// The task.
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    /// Whether the rescue failed it (its runs reached `max_attempts`).
    #[diesel(sql_type = Bool)]
    pub failed: bool,
}

/// A count of rows of one status (or of a figure named like one).
#[derive(Debug, QueryableByName)]
pub struct Count {
    /// The status.
    #[diesel(sql_type = Text)]
    pub status: String,
    /// How many.
    #[diesel(sql_type = BigInt)]
    pub n: i64,
}

/// Microseconds, or none.
#[derive(Debug, QueryableByName)]
pub struct Micros {
    /// The value.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub us: Option<i64>,
}

/// The times behind [`Stats`](diesel_outbox_core::Stats)'s ages, in
/// microseconds, each of one task or none: as ages (MySQL/MariaDB) or as
/// the stored instants (SQLite), as the statement reading them says.
#[derive(Debug, QueryableByName)]
pub struct Ages {
    /// The available task first in claim order.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub available: Option<i64>,
    /// The waiting task due first.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub waiting: Option<i64>,
    /// The running task whose lease ends first.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub running: Option<i64>,
}

/// A row of `outbox_relays` as [`Dialect::relays`](crate::Dialect::relays)
/// reads it: times in microseconds, as ages (PostgreSQL, MySQL/MariaDB,
/// `live` 1 or 0) or as the stored instants (SQLite, `live` computed from
/// `expires`).
#[derive(Debug, QueryableByName)]
#[allow(missing_docs)] // the columns of `outbox_relays`
pub struct RelayRow {
    #[diesel(sql_type = Text)]
    pub owner: String,
    #[diesel(sql_type = Text)]
    pub host: String,
    #[diesel(sql_type = BigInt)]
    pub pid: i64,
    #[diesel(sql_type = Text)]
    pub version: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub started_us: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub beat_us: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub claim_us: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub write_us: Option<i64>,
    #[diesel(sql_type = BigInt)]
    pub live: i64,
}

impl RelayRow {
    /// The relay, from a row whose times are ages.
    pub fn seen(self) -> diesel_outbox_core::RelaySeen {
        diesel_outbox_core::RelaySeen::from_us(
            self.owner,
            self.host,
            self.pid,
            self.version,
            [self.started_us, self.beat_us, self.claim_us, self.write_us],
            self.live != 0,
        )
    }
}

/// What a rescue's rows say, as the core counts it.
pub fn rescued(moved: Vec<Moved>) -> diesel_outbox_core::Rescued {
    diesel_outbox_core::Rescued {
        moved: moved.len() as u64,
        failed: moved
            .into_iter()
            .filter(|row| row.failed)
            .map(|row| TaskId::new(row.id))
            .collect(),
    }
}

/// `n` as a count, zero when negative.
pub fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// `us` microseconds, zero when negative.
pub fn duration_us(us: i64) -> std::time::Duration {
    std::time::Duration::from_micros(to_u64(us))
}

/// The counts `rows` name, the status of each parsed (an unknown one is
/// logged and left out); returns the sum of those counted.
pub fn tally_statuses(
    stats: &mut diesel_outbox_core::Stats,
    rows: impl IntoIterator<Item = Count>,
) -> i64 {
    let mut counted = 0;
    for row in rows {
        match row.status.parse::<diesel_outbox_core::Status>() {
            Ok(status) => {
                stats.set(status, to_u64(row.n));
                counted += row.n;
            }
            Err(error) => tracing::warn!(%error, rows = row.n, "rows with an unknown status"),
        }
    }
    counted
}
