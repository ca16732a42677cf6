//! The command line: global options, subcommands and their filters.

use std::net::SocketAddr;

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use diesel_outbox_core::{Status, TaskFilter, TaskId};

use diesel_outbox_sql::Names;

use crate::duration::{parse_duration, parse_since};

/// The names `--table-prefix` gives, or why the prefix cannot be one.
fn parse_table_prefix(prefix: &str) -> Result<Names, String> {
    Names::default()
        .with_table_prefix(prefix)
        .map_err(|error| error.to_string())
}

/// `--schema`, or why it cannot be a schema.
fn parse_schema(schema: &str) -> Result<String, String> {
    Names::default()
        .with_schema(schema)
        .map(|_| schema.to_owned())
        .map_err(|error| error.to_string())
}

/// Inspect and repair a transactional outbox: see the backlog, find what
/// failed and why, requeue or discard it, purge old rows, or serve a small
/// dashboard.
///
/// Exit codes: 0 done; 1 error (database unreachable, query failed); 2
/// usage error (bad option or value); 3 no such task (or failure group); 4 the task is not in
/// a status that allows the change (or a failure group changed while asked); 5 a
/// bulk change was not confirmed.
#[derive(Debug, Parser)]
#[command(name = "outbox", version)]
pub(crate) struct Cli {
    /// The database: `postgres://...`, `mysql://...` (MariaDB too) or
    /// `sqlite://PATH`. The scheme picks the backend.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub(crate) database_url: Option<String>,
    /// Machine-readable output: one JSON document on stdout (one per line
    /// for `watch`). Errors still go to stderr as text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// The outbox's table prefix, for a database that holds several
    /// outboxes (`billing_` works on `billing_outbox_tasks` and its
    /// siblings); the default names without it.
    #[arg(long, env = "OUTBOX_TABLE_PREFIX", global = true, value_parser = parse_table_prefix, default_value = "")]
    pub(crate) table_prefix: Names,
    /// The schema (PostgreSQL) or database (MySQL, MariaDB) the outbox's
    /// tables are in, for a database that holds several outboxes
    /// (`billing` works on `billing.outbox_tasks`); with
    /// `--table-prefix`, the prefixed tables in that schema. Without it, the
    /// tables the connection finds (PostgreSQL's `search_path`, the URL's
    /// database). SQLite has no schemas.
    #[arg(long, env = "OUTBOX_SCHEMA", global = true, value_parser = parse_schema)]
    pub(crate) schema: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Cli {
    /// The outbox's names: `--schema` and `--table-prefix` together, or a
    /// usage error when they do not fit together.
    pub(crate) fn names(&self) -> Result<Names, crate::failure::Failure> {
        let names = self.table_prefix.clone();
        match &self.schema {
            None => Ok(names),
            Some(schema) => names
                .with_schema(schema)
                .map_err(|error| crate::failure::Failure::Usage(error.to_string())),
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Apply the outbox migrations (or revert them, or print their SQL).
    Migrate(MigrateArgs),
    /// Counts per status and how long the oldest due task has waited.
    Stats,
    /// Tasks by status, kind, ordering key and age, newest first.
    List(ListArgs),
    /// One task: every field, headers, last error and payload.
    Show {
        /// The task's id.
        id: i64,
    },
    /// The relays heard of in the last day: live ones, and those whose
    /// heartbeats stopped (died, or hung), with when each last claimed and
    /// wrote.
    Relays,
    /// Failed tasks grouped by kind and error (ids, numbers and quoted
    /// values folded), largest group first, with a group id for `requeue
    /// --group` and `discard --group`.
    Failures(FailuresArgs),
    /// Make failed tasks available again: one by id, every one a filter
    /// matches, or a failure group.
    Requeue(ChangeArgs),
    /// Give tasks up without sending them: one by id, every one a filter
    /// matches (running and finished tasks are left alone), or a failure
    /// group.
    Discard(ChangeArgs),
    /// Delete succeeded, discarded and failed tasks finished long enough ago.
    Purge(PurgeArgs),
    /// Print the stats every second until interrupted.
    Watch(WatchArgs),
    /// Serve the dashboard (stats, failure groups, failed tasks, requeue and
    /// discard).
    Serve(ServeArgs),
}

/// `migrate`.
#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Print the SQL instead of running it, for a migrations folder of your
    /// own (only the URL's scheme is used, or `--backend`).
    #[arg(long)]
    pub(crate) print: bool,
    /// With `--print` and no database URL: the backend whose SQL to print.
    #[arg(long, value_enum, requires = "print")]
    pub(crate) backend: Option<crate::backend::Backend>,
    /// The inbox's migrations (`outbox_inbox`, for consumers) instead of the
    /// outbox's: apply them alone in a service that only consumes, or beside
    /// the outbox's in one that does both.
    #[arg(long)]
    pub(crate) inbox: bool,
    /// Revert the migrations: drops the outbox tables and every task in them.
    #[arg(long)]
    pub(crate) revert: bool,
    /// Skip the confirmation `--revert` asks for.
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
}

/// The filters that choose tasks, combined with AND.
#[derive(Debug, Clone, Args)]
pub(crate) struct FilterArgs {
    /// Only tasks in this status: available, waiting, running, blocked,
    /// succeeded, failed or discarded.
    #[arg(long, value_parser = parse_status)]
    pub(crate) status: Option<Status>,
    /// Only tasks of this kind.
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// Only tasks with this ordering key.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Only tasks created at or after this: an RFC 3339 time
    /// (`2026-11-30T03:00:00Z`) or an age (`90s`, `15m`, `2h`, `7d`).
    #[arg(long, value_parser = parse_since)]
    pub(crate) since: Option<DateTime<Utc>>,
}

impl FilterArgs {
    /// The core filter these options describe.
    pub(crate) fn filter(&self) -> TaskFilter {
        let mut filter = TaskFilter::new();
        if let Some(status) = self.status {
            filter = filter.status(status);
        }
        if let Some(kind) = &self.kind {
            filter = filter.kind(kind.clone());
        }
        if let Some(key) = &self.key {
            filter = filter.ordering_key(key.clone());
        }
        if let Some(since) = self.since {
            filter = filter.since(since);
        }
        filter
    }
}

/// `list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Which tasks.
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// At most this many tasks (1 to 1000).
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: u32,
    /// Continue after this id: the `next` of the previous page.
    #[arg(long)]
    pub(crate) after: Option<i64>,
    /// Oldest first instead of newest first.
    #[arg(long)]
    pub(crate) oldest_first: bool,
}

/// `failures`.
#[derive(Debug, Args)]
pub(crate) struct FailuresArgs {
    /// Only tasks of this kind.
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// Only tasks created at or after this: an RFC 3339 time or an age
    /// (`90s`, `15m`, `2h`, `7d`).
    #[arg(long, value_parser = parse_since)]
    pub(crate) since: Option<DateTime<Utc>>,
}

impl FailuresArgs {
    /// The core filter these options describe (the status is failed).
    pub(crate) fn filter(&self) -> TaskFilter {
        let mut filter = TaskFilter::new().status(Status::Failed);
        if let Some(kind) = &self.kind {
            filter = filter.kind(kind.clone());
        }
        if let Some(since) = self.since {
            filter = filter.since(since);
        }
        filter
    }
}

/// `requeue` and `discard`: one task, every task a filter matches, or a
/// failure group.
#[derive(Debug, Args)]
pub(crate) struct ChangeArgs {
    /// The task's id; leave it out and give `--status` for a bulk change.
    #[arg(conflicts_with_all = ["status", "kind", "key", "since", "group"])]
    pub(crate) id: Option<i64>,
    /// The failed tasks of this group, as `outbox failures` lists them.
    #[arg(long, conflicts_with_all = ["status", "kind", "key", "since"])]
    pub(crate) group: Option<String>,
    /// Which tasks, for a bulk change.
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// Tasks per batch in a bulk change, read and then changed by the
    /// store 256 at a time (one statement each for `requeue`, one
    /// transaction each for `discard`).
    #[arg(long, default_value_t = 500)]
    pub(crate) batch: usize,
    /// Skip the confirmation a bulk change asks for.
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
}

impl ChangeArgs {
    /// The single task, if one was named.
    pub(crate) fn task(&self) -> Option<TaskId> {
        self.id.map(TaskId::new)
    }
}

/// `purge`.
#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    /// Delete tasks finished longer ago than this (`36h`, `7d`).
    #[arg(long, value_parser = parse_duration)]
    pub(crate) older_than: std::time::Duration,
    /// Rows per statement.
    #[arg(long, default_value_t = 1000)]
    pub(crate) batch: usize,
    /// Skip the confirmation.
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
}

/// `watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// Stop after this many samples (default: until interrupted).
    #[arg(long)]
    pub(crate) count: Option<u64>,
    /// Time between samples.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub(crate) every: std::time::Duration,
}

/// `serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on. Loopback by default: put the operator's
    /// authenticating proxy in front, or give `--auth-file`, before binding
    /// anything else.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) bind: SocketAddr,
    /// A host name (without port) requests may address besides loopback
    /// names, such as the name of the proxy in front; repeatable. Requests
    /// for any other `Host` are refused.
    #[arg(long = "allow-host")]
    pub(crate) allow_hosts: Vec<String>,
    /// A name for the outbox the pages show in their title and header
    /// (`orders-prod`), so an operator with several open knows which one
    /// this is.
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// How often the front page reloads itself (`15s`, `1m`); `0s` never.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub(crate) refresh: std::time::Duration,
    /// A file holding `USER:PASSWORD` on its first line: every request
    /// must then carry them (HTTP basic authentication, which browsers ask
    /// for). For a dashboard that must listen beyond loopback; keep the
    /// file readable by the dashboard's user only.
    #[arg(long, value_name = "PATH")]
    pub(crate) auth_file: Option<std::path::PathBuf>,
}

fn parse_status(text: &str) -> Result<Status, String> {
    text.parse::<Status>().map_err(|error| {
        let known: Vec<&str> = Status::ALL.iter().map(|status| status.as_str()).collect();
        format!("{error}; expected one of {}", known.join(", "))
    })
}
