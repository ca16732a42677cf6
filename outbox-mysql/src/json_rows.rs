//! Lists sent to MySQL as one JSON document, read back with `JSON_TABLE`, so
//! a statement over any number of rows has one fixed text, prepared once per
//! connection, instead of a text per list length.

use diesel_outbox_core::{TaskId, transition::Completion};
use serde_json::Value;

/// Bytes of JSON per statement, well under the server's smallest default
/// `max_allowed_packet` (4 MiB on MySQL 8.0, 16 MiB on MariaDB).
const MAX_BYTES: usize = 2 << 20;

/// `[1,2,3]`: the ids, for `JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$'))`.
pub(crate) fn ids(ids: &[TaskId]) -> String {
    Value::from(ids.iter().map(|id| id.get()).collect::<Vec<_>>()).to_string()
}

/// One object per completion, for the `JSON_TABLE` of [`COMPLETE`](crate::statements::COMPLETE): `id`,
/// `attempts` and `owner` (the fence), `status`, `finished` (0 or 1),
/// `released` (0 or 1), and, when set, `retry_us` and `error`. Borrowed
/// from the completion: written straight to text, one allocation each.
#[derive(serde::Serialize)]
struct CompletionRow<'a> {
    id: i64,
    attempts: i64,
    owner: &'a str,
    status: &'a str,
    finished: u8,
    released: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_us: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

impl<'a> From<&'a Completion> for CompletionRow<'a> {
    fn from(c: &'a Completion) -> Self {
        Self {
            id: c.fence.id.get(),
            attempts: c.fence.attempt,
            owner: &c.fence.owner,
            status: c.status.as_str(),
            finished: u8::from(c.status.is_finished()),
            released: u8::from(c.released),
            retry_us: c.retry_in.map(diesel_outbox_sql::micros),
            error: c.last_error.as_deref(),
        }
    }
}

/// `completions` as JSON arrays of at most `max_rows` objects and about
/// [`MAX_BYTES`] each (one object larger than that goes alone).
pub(crate) fn completions<'c>(
    completions: impl IntoIterator<Item = &'c Completion>,
    max_rows: usize,
) -> Vec<String> {
    let mut documents = Vec::new();
    let mut current = String::from("[");
    let mut rows = 0;
    for c in completions {
        // Serialising plain fields cannot fail; were it to, the row would
        // be an empty object, which the statement's fence never matches.
        let object =
            serde_json::to_string(&CompletionRow::from(c)).unwrap_or_else(|_| "{}".to_owned());
        if rows > 0 && (rows == max_rows || current.len() + object.len() + 2 > MAX_BYTES) {
            current.push(']');
            documents.push(std::mem::replace(&mut current, String::from("[")));
            rows = 0;
        }
        if rows > 0 {
            current.push(',');
        }
        current.push_str(&object);
        rows += 1;
    }
    if rows > 0 {
        current.push(']');
        documents.push(current);
    }
    documents
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use diesel_outbox_core::{Status, TaskId, transition::Completion, transition::Fence};
    use serde_json::Value;

    use super::{MAX_BYTES, completions, ids};

    fn completion(id: i64, error: &str) -> Completion {
        Completion {
            fence: Fence {
                id: TaskId::new(id),
                attempt: 2,
                owner: "wörker".into(),
                ordering_key: None,
            },
            status: Status::Waiting,
            retry_in: Some(Duration::from_millis(1_500)),
            last_error: Some(error.to_owned()),
            released: false,
        }
    }

    #[test]
    fn ids_are_a_json_array() {
        assert_eq!(ids(&[TaskId::new(1), TaskId::new(22)]), "[1,22]");
        assert_eq!(ids(&[]), "[]");
    }

    #[test]
    fn completions_keep_every_field_and_split_by_rows_and_bytes() -> anyhow::Result<()> {
        let one = completions(&[completion(7, "boom \\0 \"quoted\" 😀")], 10);
        let parsed: Value = serde_json::from_str(&one[0])?;
        assert_eq!(parsed[0]["id"], 7);
        assert_eq!(parsed[0]["attempts"], 2);
        assert_eq!(parsed[0]["owner"], "wörker");
        assert_eq!(parsed[0]["status"], "waiting");
        assert_eq!(parsed[0]["finished"], 0);
        assert_eq!(parsed[0]["released"], 0);
        assert_eq!(parsed[0]["retry_us"], 1_500_000);
        assert_eq!(parsed[0]["error"], "boom \\0 \"quoted\" 😀");

        let many: Vec<Completion> = (1..=5).map(|id| completion(id, "x")).collect();
        let by_rows = completions(&many, 2);
        assert_eq!(by_rows.len(), 3);
        let big = "e".repeat(4 << 10);
        let large: Vec<Completion> = (1..=1_000).map(|id| completion(id, &big)).collect();
        let by_bytes = completions(&large, 2_000);
        assert!(by_bytes.len() > 1);
        let mut seen = 0;
        for document in &by_bytes {
            assert!(document.len() <= MAX_BYTES);
            seen += serde_json::from_str::<Vec<Value>>(document)?.len();
        }
        assert_eq!(seen, 1_000);
        Ok(())
    }
}
