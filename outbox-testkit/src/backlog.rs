//! [`Backlog`]: table shapes a batch claim must walk past without reading,
//! and the SQL that fills them in bulk on each backend.
//!
//! These are the rows an outbox holds in production beside its due work:
//! scheduled tasks, tasks backing off while a broker is down, an ordering key
//! stopped by a failed head, and finished tasks kept for retention. The
//! benchmark measures a claim on each shape against a table holding only the
//! due rows, and each backend's tests check that the claim's plan reads none
//! of them. Fill a shape before the due rows, so that its rows come first in
//! id order, where a claim walking ids through any index but the available
//! rows' would meet them.
//!
//! ```
//! use diesel_outbox_testkit::backlog::Backlog;
//!
//! let sql = Backlog::NotDue.postgres(1_000);
//! assert!(sql.contains("'waiting'"));
//! ```

/// The ordering key of [`Backlog::FailedHead`] and [`Backlog::SucceededKey`].
pub const KEY: &str = "backlog-key";

/// A shape of rows beside the due ones; see the [module](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backlog {
    /// Scheduled tasks not due yet: waiting, never attempted.
    NotDue,
    /// Tasks backing off before a retry: waiting, attempted, with an error.
    Backoff,
    /// One ordering key whose head failed for good, with the key's later
    /// tasks blocked behind it, counted in `outbox_ordering_keys`.
    FailedHead,
    /// Succeeded tasks of one ordering key, kept for retention.
    SucceededKey,
    /// Succeeded tasks without a key, kept for retention.
    Finished,
}

impl Backlog {
    /// Every shape.
    pub const ALL: [Backlog; 5] = [
        Backlog::NotDue,
        Backlog::Backoff,
        Backlog::FailedHead,
        Backlog::SucceededKey,
        Backlog::Finished,
    ];

    /// The shape in words, with `rows` rows.
    pub fn describe(self, rows: u64) -> String {
        match self {
            Backlog::NotDue => format!("{rows} waiting rows not yet due"),
            Backlog::Backoff => format!("{rows} waiting rows in backoff"),
            Backlog::FailedHead => format!("a failed head with {rows} blocked successors"),
            Backlog::SucceededKey => format!("{rows} succeeded rows of one key"),
            Backlog::Finished => format!("{rows} finished rows"),
        }
    }

    /// PostgreSQL statements inserting the shape with `rows` rows (and, for
    /// [`Backlog::FailedHead`], the failed head besides them).
    pub fn postgres(self, rows: u64) -> String {
        const INSERT: &str = "INSERT INTO outbox_tasks (kind, version, payload, ordering_key, \
            status, attempts, last_error, next_attempt_at, finished_at)";
        let series = format!("FROM generate_series(1, {rows}) AS g");
        match self {
            Backlog::NotDue => format!(
                "{INSERT} SELECT 'backlog.scheduled', 1, '\\x7b7d', NULL, 'waiting', 0, '', \
                 now() + interval '1 hour' + g * interval '1 millisecond', NULL {series}"
            ),
            Backlog::Backoff => format!(
                "{INSERT} SELECT 'backlog.retrying', 1, '\\x7b7d', NULL, 'waiting', 1 + g % 5, \
                 '{BROKER_DOWN}', now() + interval '1 minute' + (g % 600) * interval '1 second', \
                 NULL {series}"
            ),
            Backlog::FailedHead => format!(
                "{INSERT} VALUES ('backlog.keyed', 1, '\\x7b7d', '{KEY}', 'failed', 3, \
                 '{REJECTED}', now() - interval '1 hour', now() - interval '1 hour'); \
                 {INSERT} SELECT 'backlog.keyed', 1, '\\x7b7d', '{KEY}', 'blocked', 0, '', now(), \
                 NULL {series}; \
                 INSERT INTO outbox_ordering_keys (ordering_key, open_tasks) \
                 VALUES ('{KEY}', {open})",
                open = rows + 1
            ),
            Backlog::SucceededKey => format!(
                "{INSERT} SELECT 'backlog.keyed', 1, '\\x7b7d', '{KEY}', 'succeeded', 1, '', \
                 now() - interval '1 hour', now() - interval '1 hour' {series}"
            ),
            Backlog::Finished => format!(
                "{INSERT} SELECT 'backlog.done', 1, '\\x7b7d', NULL, 'succeeded', 1, '', \
                 now() - interval '1 hour', now() - interval '1 hour' {series}"
            ),
        }
    }

    /// MySQL/MariaDB statements inserting the shape with `rows` rows (and,
    /// for [`Backlog::FailedHead`], the failed head besides them).
    pub fn mysql(self, rows: u64) -> String {
        const INSERT: &str = "INSERT INTO outbox_tasks (kind, version, payload, headers, \
            ordering_key, status, attempts, last_error, next_attempt_at, created_at, updated_at, \
            finished_at)";
        const NOW: &str = "UTC_TIMESTAMP(6)";
        let numbers = mysql_numbers(rows);
        match self {
            Backlog::NotDue => format!(
                "{INSERT} SELECT 'backlog.scheduled', 1, '{{}}', '{{}}', NULL, 'waiting', 0, '', \
                 {NOW} + INTERVAL 1 HOUR + INTERVAL g * 1000 MICROSECOND, {NOW}, {NOW}, NULL \
                 FROM {numbers}"
            ),
            Backlog::Backoff => format!(
                "{INSERT} SELECT 'backlog.retrying', 1, '{{}}', '{{}}', NULL, 'waiting', 1 + g % 5, \
                 '{BROKER_DOWN}', {NOW} + INTERVAL 1 MINUTE + INTERVAL g % 600 SECOND, {NOW}, \
                 {NOW}, NULL FROM {numbers}"
            ),
            Backlog::FailedHead => format!(
                "{INSERT} VALUES ('backlog.keyed', 1, '{{}}', '{{}}', '{KEY}', 'failed', 3, \
                 '{REJECTED}', {NOW} - INTERVAL 1 HOUR, {NOW}, {NOW}, {NOW} - INTERVAL 1 HOUR); \
                 {INSERT} SELECT 'backlog.keyed', 1, '{{}}', '{{}}', '{KEY}', 'blocked', 0, '', \
                 {NOW}, {NOW}, {NOW}, NULL FROM {numbers}; \
                 INSERT INTO outbox_ordering_keys (ordering_key, open_tasks) \
                 VALUES ('{KEY}', {open})",
                open = rows + 1
            ),
            Backlog::SucceededKey => format!(
                "{INSERT} SELECT 'backlog.keyed', 1, '{{}}', '{{}}', '{KEY}', 'succeeded', 1, '', \
                 {NOW} - INTERVAL 1 HOUR, {NOW}, {NOW}, {NOW} - INTERVAL 1 HOUR FROM {numbers}"
            ),
            Backlog::Finished => format!(
                "{INSERT} SELECT 'backlog.done', 1, '{{}}', '{{}}', NULL, 'succeeded', 1, '', \
                 {NOW} - INTERVAL 1 HOUR, {NOW}, {NOW}, {NOW} - INTERVAL 1 HOUR FROM {numbers}"
            ),
        }
    }
}

impl Backlog {
    /// SQLite statements inserting the shape with `rows` rows (and, for
    /// [`Backlog::FailedHead`], the failed head besides them). Times are
    /// microseconds since the Unix epoch, the SQLite store's mapping.
    pub fn sqlite(self, rows: u64) -> String {
        const INSERT: &str = "INSERT INTO outbox_tasks (kind, version, payload, ordering_key, \
            status, attempts, last_error, next_attempt_at, finished_at)";
        const NOW: &str = "CAST(round((julianday('now') - 2440587.5) * 86400000000.0) AS INTEGER)";
        const HOUR: &str = "3600000000";
        let numbers = format!(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {rows})"
        );
        match self {
            Backlog::NotDue => format!(
                "{INSERT} {numbers} SELECT 'backlog.scheduled', 1, X'7b7d', NULL, 'waiting', 0, '', \
                 {NOW} + {HOUR} + n * 1000, NULL FROM g"
            ),
            Backlog::Backoff => format!(
                "{INSERT} {numbers} SELECT 'backlog.retrying', 1, X'7b7d', NULL, 'waiting', \
                 1 + n % 5, '{BROKER_DOWN}', {NOW} + 60000000 + (n % 600) * 1000000, NULL FROM g"
            ),
            Backlog::FailedHead => format!(
                "{INSERT} VALUES ('backlog.keyed', 1, X'7b7d', '{KEY}', 'failed', 3, '{REJECTED}', \
                 {NOW} - {HOUR}, {NOW} - {HOUR}); \
                 {INSERT} {numbers} SELECT 'backlog.keyed', 1, X'7b7d', '{KEY}', 'blocked', 0, '', \
                 {NOW}, NULL FROM g; \
                 INSERT INTO outbox_ordering_keys (ordering_key, open_tasks) \
                 VALUES ('{KEY}', {open})",
                open = rows + 1
            ),
            Backlog::SucceededKey => format!(
                "{INSERT} {numbers} SELECT 'backlog.keyed', 1, X'7b7d', '{KEY}', 'succeeded', 1, '', \
                 {NOW} - {HOUR}, {NOW} - {HOUR} FROM g"
            ),
            Backlog::Finished => format!(
                "{INSERT} {numbers} SELECT 'backlog.done', 1, X'7b7d', NULL, 'succeeded', 1, '', \
                 {NOW} - {HOUR}, {NOW} - {HOUR} FROM g"
            ),
        }
    }
}

/// The error of a task backing off.
const BROKER_DOWN: &str = "broker unavailable: connection refused";

/// The error of a failed head.
const REJECTED: &str = "permanent: rejected by the broker";

/// A derived table of `rows` rows with a column `g` counting from 1 (MySQL
/// has no generate_series): digit tables cross-joined, one per decimal digit.
fn mysql_numbers(rows: u64) -> String {
    const DIGITS: &str = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
        UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
        UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let places = rows.max(1).to_string().len();
    let sum: Vec<String> = (0..places)
        .map(|i| format!("t{i}.d * 1{}", "0".repeat(i)))
        .collect();
    let tables: Vec<String> = (0..places).map(|i| format!("{DIGITS} t{i}")).collect();
    format!(
        "(SELECT 1 + {} AS g FROM {} LIMIT {rows}) numbers",
        sum.join(" + "),
        tables.join(" CROSS JOIN ")
    )
}
