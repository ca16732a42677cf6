//! Failed tasks grouped by how they failed: one [`FailureGroup`] per kind
//! and error class ([`error_class`]: the last error with its ids, numbers
//! and quoted values folded), so an operator requeues or discards the tasks
//! one cause failed in one action.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::{Listed, Maintenance, Order, PageRequest, Result, Status, TaskFilter, TaskId};

/// Failed tasks of one kind whose last errors read the same once folded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailureGroup {
    /// A short name for the group, the same for the same kind and class in
    /// every run (12 hex digits of a hash of both): what `outbox requeue
    /// --group` and the dashboard take.
    pub id: String,
    /// The tasks' kind; `(unreadable)` for rows that cannot be read.
    pub kind: String,
    /// The folded error ([`error_class`]).
    pub class: String,
    /// The last error of the group's newest task (highest id), as stored.
    pub example: String,
    /// When the group's first task failed; `None` for rows that cannot be
    /// read.
    pub first_failed: Option<DateTime<Utc>>,
    /// When the group's latest task failed; `None` as for `first_failed`.
    pub last_failed: Option<DateTime<Utc>>,
    /// The tasks, lowest id first.
    pub ids: Vec<TaskId>,
}

impl FailureGroup {
    /// How many tasks the group holds.
    pub fn count(&self) -> usize {
        self.ids.len()
    }

    /// 16 hex digits of a hash of the group's task ids: the same while the
    /// group holds the same tasks. A confirmation carries it, so an action
    /// confirmed for some tasks is refused when the group has changed since
    /// (tasks requeued by someone else, or failed into it).
    pub fn fingerprint(&self) -> String {
        let mut hash = FNV_OFFSET;
        for id in &self.ids {
            for byte in id.get().to_le_bytes() {
                hash = fnv(hash, byte);
            }
        }
        format!("{hash:016x}")
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// One step of 64-bit FNV-1a.
fn fnv(hash: u64, byte: u8) -> u64 {
    (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
}

/// The tasks read per page while grouping.
const PAGE: u32 = 500;

/// The failed tasks `filter` matches (its status, if any, is replaced by
/// failed), grouped by kind and [`error_class`], the largest group first.
/// Reads every matching failed task without its payload, 500 at a time;
/// a row that cannot be read is grouped under the kind `(unreadable)` by
/// its reason.
///
/// ```no_run
/// # async fn demo(store: impl diesel_outbox_core::Maintenance) -> diesel_outbox_core::Result<()> {
/// use diesel_outbox_core::{TaskFilter, failure_groups};
///
/// for group in failure_groups(&store, &TaskFilter::new()).await? {
///     println!("{} {} x{}: {}", group.id, group.kind, group.count(), group.class);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn failure_groups<S: Maintenance>(
    store: &S,
    filter: &TaskFilter,
) -> Result<Vec<FailureGroup>> {
    let filter = filter.clone().status(Status::Failed);
    let mut groups: HashMap<(String, String), FailureGroup> = HashMap::new();
    let mut request = PageRequest::first(PAGE)?
        .order(Order::OldestFirst)
        .without_payloads();
    loop {
        let page = store.list(&filter, &request).await?;
        for listed in page.rows() {
            let (kind, error, at, id) = match listed {
                Listed::Task(record) => (
                    record.task.kind,
                    record.last_error,
                    Some(record.finished_at.unwrap_or(record.updated_at)),
                    record.id,
                ),
                Listed::Unreadable(row) => (
                    UNREADABLE.to_owned(),
                    format!("unreadable {}: {}", row.field, row.reason),
                    None,
                    row.id,
                ),
            };
            let class = error_class(&error);
            let group = groups
                .entry((kind.clone(), class.clone()))
                .or_insert_with(|| FailureGroup {
                    id: group_id(&kind, &class),
                    kind,
                    class,
                    example: String::new(),
                    first_failed: at,
                    last_failed: at,
                    ids: Vec::new(),
                });
            // Oldest first: each task is the group's latest so far.
            group.first_failed = group.first_failed.min(at).or(at);
            group.last_failed = group.last_failed.max(at);
            group.example = error;
            group.ids.push(id);
        }
        match page.next {
            Some(next) => request = request.after(next),
            None => break,
        }
    }
    let mut groups: Vec<FailureGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| {
        b.count()
            .cmp(&a.count())
            .then_with(|| b.last_failed.cmp(&a.last_failed))
            .then_with(|| a.id.cmp(&b.id))
    });
    Ok(groups)
}

/// The kind under which rows that cannot be read are grouped.
pub const UNREADABLE: &str = "(unreadable)";

/// `error` with what differs between tasks failing for one cause folded:
/// a quoted value without spaces (`'...'`, `"..."`, `` `...` ``: an id, a
/// name, a region) becomes `'…'`, while a quoted phrase (`"card
/// declined"`) stays, as it tells causes apart; a word holding a digit
/// (ids, numbers, UUIDs, addresses, durations, times) becomes `#`;
/// whitespace runs become one space. An apostrophe inside a word
/// (`couldn't`) opens no quote.
///
/// ```
/// use diesel_outbox_core::error_class;
///
/// assert_eq!(
///     error_class("order 81723 not found in 'eu-west-1' after 2.5s"),
///     "order # not found in '…' after #.#",
/// );
/// assert_eq!(
///     error_class("HTTP 503 from 10.0.4.17:8080 (request 9f1c2a7e-44b1-4c1e-9d2e-0a1b2c3d4e5f)"),
///     "HTTP # from #.#.#.#:# (request #)",
/// );
/// assert_eq!(
///     error_class(r#"HTTP 400 {"error":"card declined"}"#),
///     r#"HTTP # {"…":"card declined"}"#,
/// );
/// ```
pub fn error_class(error: &str) -> String {
    let is_word = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    let mut class = String::with_capacity(error.len());
    let mut rest = error;
    let mut previous: Option<char> = None;
    while let Some(c) = rest.chars().next() {
        let after = &rest[c.len_utf8()..];
        if matches!(c, '\'' | '"' | '`')
            && !previous.is_some_and(char::is_alphanumeric)
            && let Some(end) = after.find(c)
        {
            let value = &after[..end];
            if value.contains(char::is_whitespace) {
                class.push(c);
                class.push_str(&error_class(value));
                class.push(c);
            } else {
                class.push(c);
                class.push('…');
                class.push(c);
            }
            rest = &after[end + c.len_utf8()..];
            previous = Some(c);
        } else if c.is_whitespace() {
            class.push(' ');
            rest = after.trim_start();
            previous = Some(' ');
        } else if is_word(c) {
            let end = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
            let word = &rest[..end];
            if word.contains(|c: char| c.is_ascii_digit()) {
                class.push('#');
            } else {
                class.push_str(word);
            }
            previous = word.chars().last();
            rest = &rest[end..];
        } else {
            class.push(c);
            previous = Some(c);
            rest = after;
        }
    }
    class.trim().to_owned()
}

/// 12 hex digits of a 64-bit FNV-1a hash of the kind and the class: the
/// same in every run and every version of this crate that folds alike.
fn group_id(kind: &str, class: &str) -> String {
    let hash = kind
        .bytes()
        .chain([0])
        .chain(class.bytes())
        .fold(FNV_OFFSET, fnv);
    format!("{:012x}", hash >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_differing_only_in_values_share_a_class() {
        let a = error_class("payment 1001 declined: card '4242' expired at 2026-12-01T10:00:00Z");
        let b = error_class("payment 77 declined: card '1111' expired at 2026-11-30T09:13:02Z");
        assert_eq!(a, b);
        assert_eq!(a, "payment # declined: card '…' expired at #:#:#");
        assert_ne!(a, error_class("payment 77 refused: card '1111' expired"));
    }

    #[test]
    fn apostrophes_in_words_open_no_quote_and_phrases_stay() {
        assert_eq!(
            error_class("couldn't find 'bob' here"),
            "couldn't find '…' here"
        );
        assert_ne!(
            error_class(r#"{"error":"card declined"}"#),
            error_class(r#"{"error":"amount too large"}"#)
        );
        assert_eq!(
            error_class("payment 'p-1' says \"limit 500 reached\""),
            "payment '…' says \"limit # reached\""
        );
    }

    #[test]
    fn a_long_error_full_of_quotes_is_folded() {
        let error = "'a' ".repeat(1024) + &"'".repeat(4096);
        let class = error_class(&error);
        assert!(class.starts_with("'…' '…'"), "{class}");
    }

    #[test]
    fn whitespace_is_folded_and_unclosed_quotes_kept() {
        assert_eq!(error_class("  it's\n\tbroken  "), "it's broken");
        assert_eq!(
            error_class("say \"hi\" then `ls -l`"),
            "say \"…\" then `ls -l`"
        );
        assert_eq!(error_class(""), "");
    }

    #[test]
    fn group_ids_are_stable_and_tell_kinds_apart() {
        assert_eq!(
            group_id("order.created", "timeout"),
            group_id("order.created", "timeout")
        );
        assert_ne!(
            group_id("order.created", "timeout"),
            group_id("order.paid", "timeout")
        );
        // The separator keeps "a"+"bc" apart from "ab"+"c".
        assert_ne!(group_id("a", "bc"), group_id("ab", "c"));
        assert_eq!(group_id("k", "c").len(), 12);
    }
}
