//! The dashboard's HTML, written on the server: no script, no build step.

use std::fmt::Write as _;

use diesel_outbox_core::{
    FailureGroup, Listed, Record, RelaySeen, Stats, Status, TaskId, UnreadableRow, transition,
};

use crate::render;

/// `text` with the characters HTML gives meaning to escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "\
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}
th,td{border-bottom:1px solid #ddd;padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}
td.error{font-family:monospace;max-width:40rem;overflow-wrap:anywhere}
pre{background:#f7f7f7;padding:.8rem;overflow:auto}
form{display:inline}
.notice{background:#eef7ee;border:1px solid #9c9;padding:.5rem}
.failed{color:#a00;font-weight:bold}
#problem{white-space:pre-line;overflow-wrap:anywhere}";

/// A whole page around `body`.
pub(crate) fn layout(title: &str, body: &str) -> String {
    document(title, "", body)
}

fn document(title: &str, head: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{head}\
         <title>{title} · outbox</title><style>{STYLE}</style></head>\
         <body><h1><a href=\"/\">outbox</a> · {title}</h1>\n{body}</body></html>\n",
        title = escape(title)
    )
}

/// Which outbox a page shows, and as of when: the header of every page
/// but the error pages.
#[derive(Debug)]
pub(crate) struct Frame<'a> {
    /// The name the operator gave the outbox (`--name`).
    pub(crate) name: Option<&'a str>,
    /// The tasks table.
    pub(crate) table: &'a str,
    /// The database, without credentials.
    pub(crate) database: Option<&'a str>,
    /// When the page was read.
    pub(crate) as_of: chrono::DateTime<chrono::Utc>,
    /// How often the front page reloads itself; `None`: never.
    pub(crate) refresh: Option<std::time::Duration>,
}

impl Frame<'_> {
    /// The page: its title starting with the outbox's name, its header
    /// saying which outbox and database, as of when; `reload` makes it
    /// reload itself from `/` (the front page only: a confirmation page
    /// must stay as the operator left it).
    fn page(&self, title: &str, body: &str, reload: bool) -> String {
        let title = match self.name {
            Some(name) => format!("{name} · {title}"),
            None => title.to_owned(),
        };
        let mut header = String::from("<p id=\"outbox\">");
        if let Some(name) = self.name {
            let _ = write!(header, "<strong id=\"name\">{}</strong> · ", escape(name));
        }
        let _ = write!(header, "the tasks in <code>{}</code>", escape(self.table));
        if let Some(database) = self.database {
            let _ = write!(
                header,
                " on <code id=\"database\">{}</code>",
                escape(database)
            );
        }
        let _ = write!(
            header,
            " · as of <span id=\"as-of\">{}</span>",
            self.as_of.format("%Y-%m-%d %H:%M:%S UTC")
        );
        let mut head = String::new();
        if let Some(every) = self.refresh.filter(|_| reload) {
            let seconds = every.as_secs().max(1);
            let _ = write!(header, " · reloads every {seconds} s");
            let _ = write!(
                head,
                "<meta http-equiv=\"refresh\" content=\"{seconds}; url=/\">"
            );
        }
        header.push_str("</p>");
        document(&title, &head, &format!("{header}{body}"))
    }
}

/// A button that POSTs `action` for task `id`, with the CSRF token; its
/// element id is `{place}-{action}-{id}`.
fn button(id: TaskId, action: &str, place: &str, token: &str) -> String {
    format!(
        "<form method=\"post\" action=\"/tasks/{id}/{action}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{token}\">\
         <button type=\"submit\" id=\"{place}-{action}-{id}\">{action}</button></form>",
        token = escape(token),
    )
}

/// The link to the page that confirms task `id`'s discard (a discard
/// cannot be undone); its element id is `{place}-discard-{id}`.
fn discard_link(id: TaskId, place: &str) -> String {
    format!("<a href=\"/tasks/{id}/discard\" id=\"{place}-discard-{id}\">discard…</a>")
}

/// The actions a task's status allows: requeue at once, discard after a
/// confirmation.
fn buttons(id: TaskId, status: Status, place: &str, token: &str) -> String {
    let mut html = String::new();
    if transition::requeueable(status) {
        html.push_str(&button(id, "requeue", place, token));
        html.push(' ');
    }
    if transition::discardable(status) {
        html.push_str(&discard_link(id, place));
    }
    html
}

/// The buttons for a row that cannot be read as a task: discard, when its
/// stored status allows it.
fn unreadable_buttons(row: &UnreadableRow, place: &str) -> String {
    row.status
        .parse::<Status>()
        .map(|status| {
            if transition::discardable(status) {
                discard_link(row.id, place)
            } else {
                String::new()
            }
        })
        .unwrap_or_default()
}

fn stats_table(stats: &Stats) -> String {
    let mut html = String::from("<table id=\"stats\"><tr>");
    for (status, _) in stats.by_status() {
        let _ = write!(html, "<th>{status}</th>");
    }
    html.push_str(
        "<th>backlog</th><th>oldest due</th><th>oldest running</th><th>live relays</th><th>stopped keys</th></tr><tr>",
    );
    for (status, count) in stats.by_status() {
        let _ = write!(html, "<td id=\"count-{status}\">{count}</td>");
    }
    let _ = write!(
        html,
        "<td>{}</td><td id=\"oldest-due\">{}</td><td id=\"oldest-running\">{}</td>\
         <td id=\"live-relays\">{}</td><td id=\"stopped-keys\">{}</td></tr></table>",
        stats.backlog(),
        crate::render::age(stats.oldest_due_age),
        crate::render::age(stats.oldest_running_age),
        stats.live_relays,
        match stats.stopped_keys {
            0 => "0".to_owned(),
            n => format!("<a href=\"/tasks?status=failed\">{n}</a>"),
        },
    );
    html
}

/// A table of tasks, one row each with the id `task-ID`; a row that cannot
/// be read as a task shows its id, status and why.
fn tasks_table(id: &str, rows: &[Listed], token: &str) -> String {
    if rows.is_empty() {
        return format!("<p id=\"{id}\">none</p>");
    }
    let mut html = format!(
        "<table id=\"{id}\"><tr><th>id</th><th>status</th><th>kind</th><th>key</th>\
         <th>attempts</th><th>created</th><th>last error</th><th></th></tr>"
    );
    for row in rows {
        let record = match row {
            Listed::Task(record) => record,
            Listed::Unreadable(row) => {
                let _ = write!(
                    html,
                    "<tr id=\"{id}-{task}\" class=\"unreadable\"><td><a href=\"/tasks/{task}\">{task}</a></td>\
                     <td class=\"status\">{status}</td><td colspan=\"4\">unreadable</td>\
                     <td class=\"error\">{error}</td><td>{buttons}</td></tr>",
                    task = row.id,
                    status = escape(&row.status),
                    error = escape(&render::short_error(
                        &format!("{}: {}", row.field, row.reason),
                        200
                    )),
                    buttons = unreadable_buttons(row, id),
                );
                continue;
            }
        };
        let _ = write!(
            html,
            "<tr id=\"{id}-{task}\"><td><a href=\"/tasks/{task}\">{task}</a></td>\
             <td class=\"status {status}\">{status}</td><td>{kind}</td><td>{key}</td>\
             <td>{attempts}</td><td>{created}</td><td class=\"error\">{error}</td><td>{buttons}</td></tr>",
            task = record.id,
            status = record.status,
            kind = escape(&record.task.kind),
            key = escape(record.task.ordering_key.as_deref().unwrap_or("-")),
            attempts = record.attempts,
            created = render::instant(record.created_at),
            error = escape(&render::short_error(&record.last_error, 200)),
            buttons = buttons(record.id, record.status, id, token),
        );
    }
    html.push_str("</table>");
    html
}

/// The relays heard of in the last day, silent ones marked.
fn relays_table(relays: &[RelaySeen]) -> String {
    if relays.is_empty() {
        return "<p id=\"relays\" class=\"failed\">No relay heard of in the last day: \
                nothing sends the tasks.</p>"
            .to_owned();
    }
    let mut html = String::from(
        "<table id=\"relays\"><tr><th>owner</th><th>state</th><th>host</th><th>pid</th>\
         <th>up</th><th>last beat</th><th>last claim</th><th>last write</th></tr>",
    );
    for relay in relays {
        let cells = render::relay_cells(relay);
        let _ = write!(html, "<tr id=\"relay-{}\">", escape(&relay.owner));
        for (i, cell) in cells.iter().enumerate() {
            let class = if i == 1 && !relay.live {
                " class=\"failed\""
            } else {
                ""
            };
            let _ = write!(html, "<td{class}>{}</td>", escape(cell));
        }
        html.push_str("</tr>");
    }
    html.push_str("</table>");
    html
}

/// Failure groups, largest first, each with links to the pages that
/// confirm a requeue or a discard of the whole group.
fn groups_table(groups: &[FailureGroup]) -> String {
    if groups.is_empty() {
        return "<p id=\"groups\">none</p>".to_owned();
    }
    let when = |at: Option<chrono::DateTime<chrono::Utc>>| {
        at.map_or_else(|| "-".to_owned(), render::instant)
    };
    let mut html = String::from(
        "<table id=\"groups\"><tr><th>group</th><th>kind</th><th>tasks</th>\
         <th>first failed</th><th>last failed</th><th>error</th><th></th></tr>",
    );
    for group in groups {
        let _ = write!(
            html,
            "<tr id=\"group-{id}\"><td><code>{id}</code></td><td>{kind}</td><td>{count}</td>\
             <td>{first}</td><td>{last}</td><td class=\"error\">{class}</td>\
             <td><a href=\"/groups/{id}/requeue\" id=\"group-requeue-{id}\">requeue all…</a> \
             <a href=\"/groups/{id}/discard\" id=\"group-discard-{id}\">discard all…</a></td></tr>",
            id = escape(&group.id),
            kind = escape(&group.kind),
            count = group.count(),
            first = when(group.first_failed),
            last = when(group.last_failed),
            class = escape(&render::short_error(&group.class, 200)),
        );
    }
    html.push_str("</table>");
    html
}

/// The page that confirms `verb` (`requeue` or `discard`) of a whole
/// failure group: how many tasks, of which kind, failing how, and the
/// button that does it.
pub(crate) fn group_confirm(
    frame: &Frame<'_>,
    group: &FailureGroup,
    verb: &str,
    token: &str,
) -> String {
    let consequence = match verb {
        "requeue" => {
            "They become available at once and run again (at least once: a handler that delivered before failing delivers again)."
        }
        _ => {
            "They are given up and never sent; their ordering keys move on. This cannot be undone."
        }
    };
    let body = format!(
        "<p id=\"question\">{verb} <strong>{count}</strong> failed <code>{kind}</code> task(s) of group \
         <code>{id}</code>?</p><p>{consequence}</p>\
         <table><tr><th>error</th><td class=\"error\">{class}</td></tr>\
         <tr><th>latest</th><td class=\"error\">{example}</td></tr></table>\
         <form method=\"post\" action=\"/groups/{id}/{verb}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{token}\">\
         <input type=\"hidden\" name=\"tasks\" value=\"{fingerprint}\">\
         <button type=\"submit\" id=\"confirm-{verb}\">{verb} {count} task(s)</button></form> \
         <a href=\"/\" id=\"cancel\">cancel</a>",
        count = group.count(),
        kind = escape(&group.kind),
        id = escape(&group.id),
        class = escape(&group.class),
        example = escape(&render::short_error(&group.example, 500)),
        token = escape(token),
        fingerprint = group.fingerprint(),
    );
    frame.page(&format!("{verb} a failure group"), &body, false)
}

/// What the front page shows, read from the store.
#[derive(Debug)]
pub(crate) struct Front {
    pub(crate) stats: Stats,
    pub(crate) relays: Vec<RelaySeen>,
    pub(crate) groups: Vec<FailureGroup>,
    /// The newest failed tasks.
    pub(crate) failed: Vec<Listed>,
    /// The latest tasks, whatever their status.
    pub(crate) recent: Vec<Listed>,
}

/// The front page: stats, relays, failure groups, failed tasks with their
/// last errors, and the latest tasks whatever their status.
pub(crate) fn index(frame: &Frame<'_>, front: &Front, notice: Option<&str>, token: &str) -> String {
    let Front {
        stats,
        relays,
        groups,
        failed,
        recent,
    } = front;
    let mut body = String::new();
    if let Some(notice) = notice {
        let _ = write!(
            body,
            "<p class=\"notice\" id=\"notice\">{}</p>",
            escape(notice)
        );
    }
    body.push_str("<h2>Stats</h2>");
    body.push_str(&stats_table(stats));
    body.push_str("<h2>Relays</h2>");
    body.push_str(&relays_table(relays));
    body.push_str("<h2>Failure groups</h2>");
    body.push_str(&groups_table(groups));
    body.push_str("<h2>Failed tasks</h2>");
    if stats.failed > failed.len() as u64 {
        let _ = write!(
            body,
            "<p>The newest {} of {}: <a href=\"/tasks?status=failed\" id=\"all-failed\">page through them all</a>.</p>",
            failed.len(),
            stats.failed
        );
    }
    body.push_str(&tasks_table("failed", failed, token));
    body.push_str("<h2>Latest tasks</h2>");
    body.push_str(&tasks_table("recent", recent, token));
    frame.page("dashboard", &body, true)
}

/// A page of the tasks `filters` match, with the form that sets them and
/// the link to the next page.
pub(crate) fn listing(
    frame: &Frame<'_>,
    filters: &super::listing::Filters,
    rows: &[Listed],
    next: Option<TaskId>,
    token: &str,
) -> String {
    let given = |field: &str| {
        filters
            .given
            .iter()
            .find(|(name, _)| *name == field)
            .map_or("", |(_, value)| value.as_str())
    };
    let mut status = String::from(
        "<select name=\"status\" id=\"filter-status\"><option value=\"\">any</option>",
    );
    for one in Status::ALL {
        let selected = if given("status") == one.as_str() {
            " selected"
        } else {
            ""
        };
        let _ = write!(status, "<option{selected}>{one}</option>");
    }
    status.push_str("</select>");
    let mut body = format!(
        "<form method=\"get\" action=\"/tasks\" id=\"filters\">\
         <label>status {status}</label> \
         <label>kind <input name=\"kind\" id=\"filter-kind\" value=\"{kind}\"></label> \
         <label>key <input name=\"key\" id=\"filter-key\" value=\"{key}\"></label> \
         <label>since <input name=\"since\" id=\"filter-since\" value=\"{since}\" placeholder=\"3h, or 2026-12-05T02:00:00Z\"></label> \
         <button type=\"submit\" id=\"filter\">filter</button></form>",
        kind = escape(given("kind")),
        key = escape(given("key")),
        since = escape(given("since")),
    );
    body.push_str(&tasks_table("tasks", rows, token));
    if let Some(next) = next {
        let _ = write!(
            body,
            "<p><a href=\"/tasks?{}\" id=\"next\">next page</a></p>",
            escape(&filters.next_query(next))
        );
    }
    frame.page("tasks", &body, false)
}

/// One task: every field, headers, last error, payload and its buttons;
/// for a blocked task, the task of its ordering key it waits behind
/// (`head`: its id and status).
pub(crate) fn detail(
    frame: &Frame<'_>,
    record: &Record,
    head: Option<(TaskId, Status)>,
    token: &str,
) -> String {
    let mut body = String::new();
    if let Some((head, status)) = head {
        let _ = write!(
            body,
            "<p id=\"blocked-by\" class=\"notice\">Waits behind task <a href=\"/tasks/{head}\">{head}</a> \
             ({status}), the oldest unfinished task of its ordering key: nothing of the key is sent \
             before that one succeeds or is discarded.</p>"
        );
    }
    body.push_str("<table id=\"task\">");
    for (label, value) in render::detail_fields(record) {
        let _ = write!(body, "<tr><th>{label}</th><td>{}</td></tr>", escape(&value));
    }
    body.push_str("</table><h2>Headers</h2>");
    if record.task.headers.is_empty() {
        body.push_str("<p>none</p>");
    } else {
        body.push_str("<table>");
        for (name, value) in &record.task.headers {
            let _ = write!(
                body,
                "<tr><th>{}</th><td>{}</td></tr>",
                escape(name),
                escape(value)
            );
        }
        body.push_str("</table>");
    }
    let _ = write!(
        body,
        "<h2>Last error</h2><pre id=\"last-error\">{}</pre>",
        escape(&record.last_error)
    );
    let (encoding, _) = render::payload(record);
    let _ = write!(
        body,
        "<h2>Payload ({encoding})</h2><pre id=\"payload\">{}</pre><p>{}</p>",
        escape(&render::payload_text(record)),
        buttons(record.id, record.status, "task", token)
    );
    frame.page(&format!("task {}", record.id), &body, false)
}

/// The page that confirms task `id`'s discard: what it is, what a discard
/// does, and the button that does it.
pub(crate) fn discard_confirm(frame: &Frame<'_>, listed: &Listed, token: &str) -> String {
    let id = listed.id();
    let what = match listed {
        Listed::Task(record) => format!(
            "<code>{}</code> task {id}, {}, last error: <span class=\"error\">{}</span>",
            escape(&record.task.kind),
            record.status,
            escape(&render::short_error(&record.last_error, 300)),
        ),
        Listed::Unreadable(row) => {
            format!("the unreadable row {id}, stored as {}", escape(&row.status))
        }
    };
    let body = format!(
        "<p id=\"question\">Discard {what}?</p>\
         <p>It is given up and never sent; its ordering key moves on. This cannot be undone.</p>\
         {button} <a href=\"/tasks/{id}\" id=\"cancel\">cancel</a>",
        button = button(id, "discard", "confirm", token),
    );
    frame.page(&format!("discard task {id}"), &body, false)
}

/// A row that cannot be read as a task: its id, stored status, why, and
/// the discard button when its status allows it.
pub(crate) fn unreadable(frame: &Frame<'_>, row: &UnreadableRow) -> String {
    let body = format!(
        "<table id=\"task\"><tr><th>id</th><td>{id}</td></tr>\
         <tr><th>status</th><td>{status}</td></tr>\
         <tr><th>unreadable</th><td id=\"unreadable\">the {field} column: {reason}</td></tr></table>\
         <p>Written by another program or by hand, the row cannot be read as a task.</p><p>{buttons}</p>",
        id = row.id,
        status = escape(&row.status),
        field = escape(row.field),
        reason = escape(&row.reason),
        buttons = unreadable_buttons(row, "task"),
    );
    frame.page(&format!("task {}", row.id), &body, false)
}

/// A page for a refused or failed request.
pub(crate) fn problem(title: &str, message: &str) -> String {
    layout(title, &format!("<p id=\"problem\">{}</p>", escape(message)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_text_is_escaped() {
        assert_eq!(
            escape("<script>alert('x')</script> & \""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;"
        );
    }
}
