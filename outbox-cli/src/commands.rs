//! The subcommands that work on a store, whichever backend it is.

use std::io::{IsTerminal as _, Write as _};

use chrono::Utc;
use diesel_outbox_core::{
    Listed, Maintenance, Order, PageRequest, TaskFilter, TaskId, failure_groups,
};
use serde_json::json;

use crate::{
    args::{ChangeArgs, Command, FailuresArgs, ListArgs, PurgeArgs, WatchArgs},
    failure::Failure,
    render, serve,
};

/// What a store must offer the commands: the maintenance API, and being
/// shared with the dashboard's request handlers.
pub(crate) trait OperatorStore: Maintenance + Clone + Send + Sync + 'static {}

impl<S: Maintenance + Clone + Send + Sync + 'static> OperatorStore for S {}

/// Where the commands write: stdout, and whether it is JSON.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    /// `--json`.
    pub(crate) json: bool,
}

impl Output {
    fn print(&self, text: &str) -> Result<(), Failure> {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
        Ok(())
    }

    fn json(&self, value: &serde_json::Value) -> Result<(), Failure> {
        self.print(&format!("{}\n", serde_json::to_string(value)?))
    }
}

/// Which outbox the commands work on, as the dashboard names it.
#[derive(Debug, Clone)]
pub(crate) struct Shown {
    /// The tasks table, with its schema when there is one.
    pub(crate) table: String,
    /// The database: host and port and database name, or a SQLite file;
    /// never credentials.
    pub(crate) database: Option<String>,
}

/// Runs `command` (any but `migrate`) on `store`, the outbox `shown`.
pub(crate) async fn run<S: OperatorStore>(
    store: S,
    shown: Shown,
    command: Command,
    out: Output,
) -> Result<(), Failure> {
    match command {
        Command::Stats => stats(&store, out).await,
        Command::List(args) => list(&store, &args, out).await,
        Command::Show { id } => show(&store, TaskId::new(id), out).await,
        Command::Failures(args) => failures(&store, &args, out).await,
        Command::Relays => relays(&store, out).await,
        Command::Requeue(args) => change(&store, &args, Change::Requeue, out).await,
        Command::Discard(args) => change(&store, &args, Change::Discard, out).await,
        Command::Purge(args) => purge(&store, &args, out).await,
        Command::Watch(args) => watch(&store, &args, out).await,
        Command::Serve(args) => serve::run(store, shown, &args).await,
        Command::Migrate(_) => Err(Failure::Usage("migrate runs without a store".to_owned())),
    }
}

async fn stats<S: OperatorStore>(store: &S, out: Output) -> Result<(), Failure> {
    let stats = store.stats().await?;
    if out.json {
        out.json(&render::stats_json(&stats))
    } else {
        out.print(&render::stats_table(&stats))
    }
}

async fn list<S: OperatorStore>(store: &S, args: &ListArgs, out: Output) -> Result<(), Failure> {
    // A listing shows no payload (`show` does).
    let mut request = PageRequest::first(args.limit)?.without_payloads();
    if args.oldest_first {
        request = request.order(Order::OldestFirst);
    }
    if let Some(after) = args.after {
        request = request.after(TaskId::new(after));
    }
    let page = store.list(&args.filter.filter(), &request).await?;
    if out.json {
        out.json(&render::page_json(&page))
    } else {
        out.print(&render::page_table(&page))
    }
}

async fn show<S: OperatorStore>(store: &S, id: TaskId, out: Output) -> Result<(), Failure> {
    match store.inspect(id).await? {
        Listed::Task(record) if out.json => out.json(&render::detail_json(&record)),
        Listed::Task(record) => out.print(&render::detail_text(&record)),
        Listed::Unreadable(row) if out.json => out.json(&render::unreadable_json(&row)),
        Listed::Unreadable(row) => out.print(&render::unreadable_text(&row)),
    }
}

/// Requeue or discard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Requeue,
    Discard,
}

impl Change {
    fn verb(self) -> &'static str {
        match self {
            Self::Requeue => "requeue",
            Self::Discard => "discard",
        }
    }

    fn done(self) -> &'static str {
        match self {
            Self::Requeue => "requeued",
            Self::Discard => "discarded",
        }
    }
}

async fn change<S: OperatorStore>(
    store: &S,
    args: &ChangeArgs,
    change: Change,
    out: Output,
) -> Result<(), Failure> {
    if let Some(id) = args.task() {
        match change {
            Change::Requeue => store.requeue(id).await?,
            Change::Discard => store.discard(id).await?,
        }
        return if out.json {
            out.json(&json!({ change.done(): 1, "id": id.get() }))
        } else {
            out.print(&format!("{} task {id}\n", change.done()))
        };
    }
    if let Some(group) = &args.group {
        return change_group(store, group, args, change, out).await;
    }
    if args.filter.status.is_none() {
        return Err(Failure::Usage(format!(
            "{} needs a task id, --group, or --status (and other filters) for a bulk change",
            change.verb()
        )));
    }
    let filter = args.filter.filter();
    if !args.yes {
        let matching = count(store, &filter).await?;
        confirm(&format!(
            "{} {matching} task(s) matching {}?",
            change.verb(),
            describe(args)
        ))?;
    }
    let changed = match change {
        Change::Requeue => store.requeue_matching(&filter, args.batch).await?,
        Change::Discard => store.discard_matching(&filter, args.batch).await?,
    };
    if out.json {
        out.json(&json!({ change.done(): changed }))
    } else {
        out.print(&format!("{} {changed} task(s)\n", change.done()))
    }
}

async fn relays<S: OperatorStore>(store: &S, out: Output) -> Result<(), Failure> {
    let relays = store.relays().await?;
    if out.json {
        out.json(&render::relays_json(&relays))
    } else {
        out.print(&render::relays_table(&relays))
    }
}

async fn failures<S: OperatorStore>(
    store: &S,
    args: &FailuresArgs,
    out: Output,
) -> Result<(), Failure> {
    let groups = failure_groups(store, &args.filter()).await?;
    if out.json {
        out.json(&render::groups_json(&groups))
    } else {
        out.print(&render::groups_table(&groups))
    }
}

/// Requeues or discards the failed tasks of failure group `id`, in batches
/// of `args.batch`, after confirming how many it holds.
async fn change_group<S: OperatorStore>(
    store: &S,
    id: &str,
    args: &ChangeArgs,
    change: Change,
    out: Output,
) -> Result<(), Failure> {
    let groups = failure_groups(store, &TaskFilter::new()).await?;
    let Some(group) = groups.into_iter().find(|group| group.id == id) else {
        return Err(Failure::NotFound(format!(
            "no failure group {id}: `outbox failures` lists the groups there are now"
        )));
    };
    if args.batch == 0 {
        return Err(Failure::Usage("--batch must be at least 1".to_owned()));
    }
    let mut group = group;
    if !args.yes {
        confirm(&format!(
            "{} {} failed {} task(s) of group {id} ({})?",
            change.verb(),
            group.count(),
            group.kind,
            group.class
        ))?;
        // The question may have waited: act only on the tasks confirmed.
        let now = failure_groups(store, &TaskFilter::new()).await?;
        match now.into_iter().find(|now| now.id == id) {
            Some(now) if now.fingerprint() == group.fingerprint() => group = now,
            now => {
                return Err(Failure::Refused(format!(
                    "failure group {id} changed while you were asked (it now holds {} task(s)): \
                     nothing changed; run the command again",
                    now.map_or(0, |now| now.count())
                )));
            }
        }
    }
    let mut changed = 0;
    for ids in group.ids.chunks(args.batch) {
        changed += match change {
            Change::Requeue => store.requeue_failed_many(ids).await?,
            Change::Discard => store.discard_many(ids).await?,
        };
    }
    if out.json {
        out.json(&json!({ change.done(): changed, "group": id }))
    } else {
        out.print(&format!(
            "{} {changed} task(s) of group {id}\n",
            change.done()
        ))
    }
}

/// How many tasks `filter` matches now, for the confirmation question.
async fn count<S: OperatorStore>(store: &S, filter: &TaskFilter) -> Result<u64, Failure> {
    const STEP: u32 = 10_000;
    let (mut after, mut total) = (None, 0u64);
    loop {
        let ids = store.matching_ids(filter, after, STEP).await?;
        total += ids.len() as u64;
        match ids.last() {
            Some(last) if ids.len() == STEP as usize => after = Some(*last),
            _ => return Ok(total),
        }
    }
}

fn describe(args: &ChangeArgs) -> String {
    let filter = &args.filter;
    let mut parts = Vec::new();
    if let Some(status) = filter.status {
        parts.push(format!("status={status}"));
    }
    if let Some(kind) = &filter.kind {
        parts.push(format!("kind={kind}"));
    }
    if let Some(key) = &filter.key {
        parts.push(format!("key={key}"));
    }
    if let Some(since) = filter.since {
        parts.push(format!("since={}", render::instant(since)));
    }
    parts.join(" ")
}

/// Asks on the terminal; without one (a script), refuses: scripts pass
/// `--yes`.
pub(crate) fn confirm(question: &str) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::NotConfirmed(format!(
            "{question} Not confirmed: no terminal to ask on; pass --yes to go ahead"
        )));
    }
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    stdin.read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        Err(Failure::NotConfirmed(
            "not confirmed: nothing changed".to_owned(),
        ))
    }
}

async fn purge<S: OperatorStore>(store: &S, args: &PurgeArgs, out: Output) -> Result<(), Failure> {
    if !args.yes {
        confirm(&format!(
            "delete every succeeded, discarded and failed task finished more than {:?} ago?",
            args.older_than
        ))?;
    }
    let purged = store.purge_finished(args.older_than, args.batch).await?;
    if out.json {
        out.json(&json!({ "purged": purged }))
    } else {
        out.print(&format!("purged {purged} task(s)\n"))
    }
}

async fn watch<S: OperatorStore>(store: &S, args: &WatchArgs, out: Output) -> Result<(), Failure> {
    if args.every.is_zero() {
        return Err(Failure::Usage(
            "--every must be longer than zero".to_owned(),
        ));
    }
    let mut ticks = tokio::time::interval(args.every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples = 0;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        let stats = store.stats().await?;
        if out.json {
            let mut value = render::stats_json(&stats);
            if let serde_json::Value::Object(object) = &mut value {
                object.insert("at".to_owned(), json!(render::instant(Utc::now())));
            }
            out.json(&value)?;
        } else {
            out.print(&format!("{}\n", render::stats_line(&stats, Utc::now())))?;
        }
        samples += 1;
        if args.count.is_some_and(|count| samples >= count) {
            return Ok(());
        }
    }
}
