//! What the commands print: tables and details for people, JSON documents
//! for scripts (their fields are listed in [operations.md](https://github.com/outbox-rs/outbox/blob/main/docs/operations.md)).

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use diesel_outbox_core::{FailureGroup, Listed, Page, Record, RelaySeen, Stats, UnreadableRow};
use serde_json::{Value, json};

/// An instant as RFC 3339 UTC with microseconds.
pub(crate) fn instant(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn optional_instant(at: Option<DateTime<Utc>>) -> Value {
    at.map_or(Value::Null, |at| Value::String(instant(at)))
}

/// An age as the tables show it (`90.5s`), `-` for none.
pub(crate) fn age(age: Option<std::time::Duration>) -> String {
    age.map_or_else(
        || "-".to_owned(),
        |age| format!("{:.1}s", age.as_secs_f64()),
    )
}

/// The stats as JSON: one field per status, `backlog`, `live_relays`,
/// `stopped_keys`, `oldest_due_age_seconds` (null when nothing is due) and
/// `oldest_running_age_seconds` (null when nothing runs).
pub(crate) fn stats_json(stats: &Stats) -> Value {
    let mut object = serde_json::Map::new();
    for (status, count) in stats.by_status() {
        object.insert(status.as_str().to_owned(), json!(count));
    }
    object.insert("backlog".to_owned(), json!(stats.backlog()));
    object.insert("live_relays".to_owned(), json!(stats.live_relays));
    object.insert("stopped_keys".to_owned(), json!(stats.stopped_keys));
    for (name, age) in [
        ("oldest_due_age_seconds", stats.oldest_due_age),
        ("oldest_running_age_seconds", stats.oldest_running_age),
    ] {
        object.insert(
            name.to_owned(),
            age.map_or(Value::Null, |age| json!(age.as_secs_f64())),
        );
    }
    Value::Object(object)
}

/// `relays` for scripts: `{"relays": [relay]}`, a relay being `{"owner",
/// "host", "pid", "version", "live", "started_seconds_ago",
/// "beat_seconds_ago", "claim_seconds_ago", "write_seconds_ago"}` (the last
/// two null for never).
pub(crate) fn relays_json(relays: &[RelaySeen]) -> Value {
    let seconds = |age: Option<std::time::Duration>| age.map(|age| age.as_secs_f64());
    let relays: Vec<Value> = relays
        .iter()
        .map(|relay| {
            json!({
                "owner": relay.owner,
                "host": relay.host,
                "pid": relay.pid,
                "version": relay.version,
                "live": relay.live,
                "started_seconds_ago": relay.started.as_secs_f64(),
                "beat_seconds_ago": relay.since_beat.as_secs_f64(),
                "claim_seconds_ago": seconds(relay.since_claim),
                "write_seconds_ago": seconds(relay.since_write),
            })
        })
        .collect();
    json!({ "relays": relays })
}

/// `relays` for people: one row each, ages as `12.5s`.
pub(crate) fn relays_table(relays: &[RelaySeen]) -> String {
    if relays.is_empty() {
        return "no relay heard of in the last day\n".to_owned();
    }
    let rows: Vec<[String; 8]> = relays.iter().map(relay_cells).collect();
    table(
        &[
            "OWNER",
            "STATE",
            "HOST",
            "PID",
            "UP",
            "LAST BEAT",
            "LAST CLAIM",
            "LAST WRITE",
        ],
        &rows,
    )
}

/// A relay's cells, as the table and the dashboard show them: its state is
/// `live`, or `silent` once its heartbeats stopped counting.
pub(crate) fn relay_cells(relay: &RelaySeen) -> [String; 8] {
    let ago = |at: Option<std::time::Duration>| match at {
        Some(at) => format!("{} ago", age(Some(at))),
        None => "never".to_owned(),
    };
    [
        relay.owner.clone(),
        if relay.live { "live" } else { "silent" }.to_owned(),
        relay.host.clone(),
        relay.pid.to_string(),
        age(Some(relay.started)),
        ago(Some(relay.since_beat)),
        ago(relay.since_claim),
        ago(relay.since_write),
    ]
}

/// The stats as a two-column table.
pub(crate) fn stats_table(stats: &Stats) -> String {
    let mut rows: Vec<[String; 2]> = stats
        .by_status()
        .into_iter()
        .map(|(status, count)| [status.as_str().to_owned(), count.to_string()])
        .collect();
    rows.push(["backlog".to_owned(), stats.backlog().to_string()]);
    rows.push(["oldest due".to_owned(), age(stats.oldest_due_age)]);
    rows.push(["oldest running".to_owned(), age(stats.oldest_running_age)]);
    rows.push(["live relays".to_owned(), stats.live_relays.to_string()]);
    rows.push(["stopped keys".to_owned(), stats.stopped_keys.to_string()]);
    table(&["STATUS", "TASKS"], &rows)
}

/// One line of `watch`: the time and every count.
pub(crate) fn stats_line(stats: &Stats, now: DateTime<Utc>) -> String {
    let mut line = now.format("%H:%M:%S").to_string();
    for (status, count) in stats.by_status() {
        let _ = write!(line, "  {status}={count}");
    }
    let _ = write!(
        line,
        "  oldest_due={}  oldest_running={}",
        age(stats.oldest_due_age),
        age(stats.oldest_running_age)
    );
    line
}

/// A task without its payload and headers, as `list` shows it.
pub(crate) fn summary_json(record: &Record) -> Value {
    json!({
        "id": record.id.get(),
        "kind": record.task.kind,
        "version": record.task.version,
        "status": record.status.as_str(),
        "ordering_key": record.task.ordering_key,
        "dedup_key": record.task.dedup_key,
        "attempts": record.attempts,
        "runs": record.runs(),
        "released": record.released,
        "max_attempts": record.task.max_attempts,
        "next_attempt_at": instant(record.next_attempt_at),
        "expires_at": optional_instant(record.task.expires_at),
        "lease_owner": record.lease.as_ref().map(|lease| lease.owner.clone()),
        "lease_expires_at": optional_instant(record.lease.as_ref().map(|lease| lease.expires_at)),
        "created_at": instant(record.created_at),
        "updated_at": instant(record.updated_at),
        "finished_at": optional_instant(record.finished_at),
        "last_error": record.last_error,
    })
}

/// A row that cannot be read as a task, as JSON: its id, its stored
/// status, and the column and reason that make it unreadable.
pub(crate) fn unreadable_json(row: &UnreadableRow) -> Value {
    json!({
        "id": row.id.get(),
        "status": row.status,
        "unreadable": { "field": row.field, "reason": row.reason },
    })
}

/// A page as JSON: `tasks`, `unreadable` (rows that cannot be read as
/// tasks), and `next`, the cursor for `--after`.
pub(crate) fn page_json(page: &Page) -> Value {
    json!({
        "tasks": page.records.iter().map(summary_json).collect::<Vec<_>>(),
        "unreadable": page.unreadable.iter().map(unreadable_json).collect::<Vec<_>>(),
        "next": page.next.map(|id| id.get()),
    })
}

/// The payload, decoded as far as it goes: JSON, else UTF-8 text, else hex.
pub(crate) fn payload(record: &Record) -> (&'static str, Value) {
    let bytes = &record.task.payload;
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        return ("json", value);
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        return ("utf8", Value::String(text.to_owned()));
    }
    let hex = bytes.iter().fold(String::new(), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    });
    ("hex", Value::String(hex))
}

/// Every field of a task: the summary plus `headers`, `payload` and
/// `payload_encoding` (`json`, `utf8` or `hex`).
pub(crate) fn detail_json(record: &Record) -> Value {
    let mut value = summary_json(record);
    let (encoding, payload) = payload(record);
    if let Value::Object(object) = &mut value {
        object.insert("headers".to_owned(), json!(record.task.headers));
        object.insert("payload_encoding".to_owned(), json!(encoding));
        object.insert("payload".to_owned(), payload);
    }
    value
}

/// The payload as people read it: pretty JSON, text, or hex.
pub(crate) fn payload_text(record: &Record) -> String {
    match payload(record) {
        ("json", value) => serde_json::to_string_pretty(&value).unwrap_or_default(),
        (_, Value::String(text)) => text,
        (_, other) => other.to_string(),
    }
}

fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| value.to_string())
}

/// The labelled fields of one task, in the order `show` prints them.
pub(crate) fn detail_fields(record: &Record) -> Vec<(&'static str, String)> {
    vec![
        ("id", record.id.to_string()),
        ("kind", record.task.kind.clone()),
        ("version", record.task.version.to_string()),
        ("status", record.status.to_string()),
        ("ordering key", or_dash(record.task.ordering_key.as_ref())),
        ("dedup key", or_dash(record.task.dedup_key.as_ref())),
        ("attempts", record.attempts.to_string()),
        ("runs", record.runs().to_string()),
        ("released", record.released.to_string()),
        ("max attempts", or_dash(record.task.max_attempts)),
        ("next attempt at", instant(record.next_attempt_at)),
        ("expires at", or_dash(record.task.expires_at.map(instant))),
        (
            "lease owner",
            or_dash(record.lease.as_ref().map(|lease| &lease.owner)),
        ),
        (
            "lease expires at",
            or_dash(record.lease.as_ref().map(|lease| instant(lease.expires_at))),
        ),
        ("created at", instant(record.created_at)),
        ("updated at", instant(record.updated_at)),
        ("finished at", or_dash(record.finished_at.map(instant))),
    ]
}

/// `show` for people: the fields, headers, last error and payload.
pub(crate) fn detail_text(record: &Record) -> String {
    let mut text = String::new();
    let fields = detail_fields(record);
    let width = fields
        .iter()
        .map(|(label, _)| label.len())
        .max()
        .unwrap_or(0);
    for (label, value) in fields {
        let _ = writeln!(text, "{label:<width$}  {value}");
    }
    let _ = writeln!(text, "\nheaders:");
    if record.task.headers.is_empty() {
        let _ = writeln!(text, "  (none)");
    }
    for (name, value) in &record.task.headers {
        let _ = writeln!(text, "  {name}: {value}");
    }
    let _ = writeln!(text, "\nlast error:");
    if record.last_error.is_empty() {
        let _ = writeln!(text, "  (none)");
    }
    for line in record.last_error.lines() {
        let _ = writeln!(text, "  {line}");
    }
    let (encoding, _) = payload(record);
    let _ = writeln!(
        text,
        "\npayload ({encoding}, {} bytes):",
        record.task.payload.len()
    );
    for line in payload_text(record).lines() {
        let _ = writeln!(text, "  {line}");
    }
    text
}

/// The first line of a last error, cut to `max` characters.
pub(crate) fn short_error(error: &str, max: usize) -> String {
    let line = error.lines().next().unwrap_or("");
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `show` for a row that cannot be read as a task.
pub(crate) fn unreadable_text(row: &UnreadableRow) -> String {
    format!(
        "id:       {}\nstatus:   {}\nunreadable: the {} column: {}\n\n\
         It can still be discarded: outbox discard {}\n",
        row.id, row.status, row.field, row.reason, row.id
    )
}

/// `list` for people: one row per task, and one per row that cannot be
/// read as a task, in the page's order.
pub(crate) fn page_table(page: &Page) -> String {
    let rows: Vec<[String; 7]> = page
        .rows()
        .iter()
        .map(|row| match row {
            Listed::Task(record) => [
                record.id.to_string(),
                record.status.to_string(),
                record.task.kind.clone(),
                or_dash(record.task.ordering_key.as_ref()),
                record.attempts.to_string(),
                instant(record.created_at),
                short_error(&record.last_error, 60),
            ],
            Listed::Unreadable(row) => [
                row.id.to_string(),
                row.status.clone(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                short_error(&format!("unreadable {}: {}", row.field, row.reason), 60),
            ],
        })
        .collect();
    let mut text = table(
        &[
            "ID",
            "STATUS",
            "KIND",
            "KEY",
            "ATTEMPTS",
            "CREATED",
            "LAST ERROR",
        ],
        &rows,
    );
    match page.next {
        Some(next) => {
            let _ = writeln!(text, "more: --after {next}");
        }
        None if page.is_empty() => text.push_str("no tasks match\n"),
        None => {}
    }
    text
}

/// `failures` for scripts: `{"groups": [group]}`, a group being `{"group",
/// "kind", "class", "count", "first_failed", "last_failed", "example",
/// "ids"}`.
pub(crate) fn groups_json(groups: &[FailureGroup]) -> Value {
    let groups: Vec<Value> = groups
        .iter()
        .map(|group| {
            json!({
                "group": group.id,
                "kind": group.kind,
                "class": group.class,
                "count": group.count(),
                "first_failed": optional_instant(group.first_failed),
                "last_failed": optional_instant(group.last_failed),
                "example": group.example,
                "ids": group.ids.iter().map(|id| id.get()).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "groups": groups })
}

/// `failures` for people: one row per group, largest first.
pub(crate) fn groups_table(groups: &[FailureGroup]) -> String {
    if groups.is_empty() {
        return "no failed tasks\n".to_owned();
    }
    let when = |at: Option<DateTime<Utc>>| {
        at.map_or_else(
            || "-".to_owned(),
            |at| at.format("%Y-%m-%d %H:%M:%S").to_string(),
        )
    };
    let rows: Vec<[String; 6]> = groups
        .iter()
        .map(|group| {
            [
                group.id.clone(),
                group.kind.clone(),
                group.count().to_string(),
                when(group.first_failed),
                when(group.last_failed),
                short_error(&group.class, 70),
            ]
        })
        .collect();
    let mut text = table(
        &[
            "GROUP",
            "KIND",
            "TASKS",
            "FIRST FAILED",
            "LAST FAILED",
            "ERROR",
        ],
        &rows,
    );
    text.push_str("requeue or discard a group: outbox requeue --group GROUP\n");
    text
}

/// A table with a header row and columns padded to their widest cell.
pub(crate) fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|title| title.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            let _ = write!(out, "{cell:<width$}", width = widths[i]);
        }
        text.push_str(out.trim_end());
        text.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_each_column_to_its_widest_cell() {
        let text = table(
            &["ID", "STATUS"],
            &[
                ["1".to_owned(), "failed".to_owned()],
                ["1234".to_owned(), "ok".to_owned()],
            ],
        );
        assert_eq!(text, "ID    STATUS\n1     failed\n1234  ok\n");
    }

    #[test]
    fn long_errors_are_cut_to_their_first_line() {
        assert_eq!(short_error("boom\nstack", 10), "boom");
        assert_eq!(short_error("abcdefghijkl", 5), "abcd…");
    }
}
