//! The keyless batch insert, shaped to its batch.
//!
//! A column is sent as an array only when its values differ by row; a
//! column with one value for the whole batch goes as a single parameter, and
//! one absent everywhere as its default. A typical batch (one kind, one
//! version, no headers, no keys, no schedule) then sends one array, the
//! payloads, as a hand-written insert would.

use diesel::{
    pg::Pg,
    serialize::ToSql,
    sql_types::{Array, Bool, Bytea, HasSqlType, Integer, Jsonb, Nullable, Text, Timestamptz},
};
use diesel_async::AsyncPgConnection;
use diesel_async::RunQueryDsl;
use diesel_outbox_core::{Error, Result, TaskId};
use diesel_outbox_sql::{Names, postgres_error, rows::Id};

use crate::insert::Row;

/// How one column's values spread over the batch.
enum Spread<T> {
    /// Absent (None) in every row.
    Absent,
    /// The same value in every row.
    Same(T),
    /// Different by row.
    Varies(Vec<T>),
}

fn spread<T: PartialEq + Clone>(values: Vec<Option<T>>) -> Spread<Option<T>> {
    match <[Option<T>]>::first(&values) {
        Some(None) if values.iter().all(Option::is_none) => Spread::Absent,
        Some(first) if values.iter().all(|v| v == first) => Spread::Same(first.clone()),
        _ => Spread::Varies(values),
    }
}

type Query<'a> = diesel_outbox_sql::CachedQuery<'a, Pg>;

/// Accumulates the statement and its binds together, so `$n` always matches.
struct Builder<'a> {
    query: Option<Query<'a>>,
    params: usize,
    exprs: Vec<String>,
    arrays: Vec<String>,
    aliases: Vec<&'static str>,
}

impl<'a> Builder<'a> {
    fn param(&mut self) -> usize {
        self.params += 1;
        self.params
    }

    fn bind<ST, V>(&mut self, value: V)
    where
        Pg: HasSqlType<ST>,
        V: ToSql<ST, Pg> + Send + 'a,
        ST: Send + 'static,
    {
        self.query = self.query.take().map(|query| query.bind::<ST, V>(value));
    }

    /// Adds a column as `default` when absent, a scalar `$n::ty` when the
    /// same everywhere, or an array `$n::ty[]` unnested as `alias` (and
    /// selected as `alias`, or `COALESCE(alias, default)` when `default` is
    /// not NULL) when it varies.
    fn column<T, ST>(
        &mut self,
        alias: &'static str,
        ty: &str,
        default: &str,
        values: Vec<Option<T>>,
    ) where
        T: PartialEq + Clone + Send + 'a,
        Option<T>: ToSql<Nullable<ST>, Pg>,
        Vec<Option<T>>: ToSql<Array<Nullable<ST>>, Pg>,
        Pg: HasSqlType<Nullable<ST>> + HasSqlType<Array<Nullable<ST>>>,
        ST: Send + 'static,
    {
        let expr = self.value::<T, ST>(alias, ty, default, values);
        self.exprs.push(expr);
    }

    /// Binds a column's values like [`column`](Self::column) and returns the
    /// expression that reads them, without inserting it.
    fn value<T, ST>(
        &mut self,
        alias: &'static str,
        ty: &str,
        default: &str,
        values: Vec<Option<T>>,
    ) -> String
    where
        T: PartialEq + Clone + Send + 'a,
        Option<T>: ToSql<Nullable<ST>, Pg>,
        Vec<Option<T>>: ToSql<Array<Nullable<ST>>, Pg>,
        Pg: HasSqlType<Nullable<ST>> + HasSqlType<Array<Nullable<ST>>>,
        ST: Send + 'static,
    {
        match spread(values) {
            Spread::Absent => default.to_owned(),
            Spread::Same(value) => {
                let n = self.param();
                self.bind::<Nullable<ST>, _>(value);
                format!("${n}::{ty}")
            }
            Spread::Varies(values) => {
                let n = self.param();
                self.arrays.push(format!("${n}::{ty}[]"));
                self.aliases.push(alias);
                self.bind::<Array<Nullable<ST>>, _>(values);
                if default == "NULL" {
                    alias.to_owned()
                } else {
                    format!("COALESCE({alias}, {default})")
                }
            }
        }
    }
}

/// Inserts `rows` without dedup keys (`heads` whether each heads its
/// ordering key) in one statement and returns
/// their ids in input order: rows are inserted, and their identity values
/// drawn, in `ORDER BY ord` order, so the returned ids sorted ascending
/// follow the input (the server-generated-key sentinel SQLAlchemy relies on
/// for PostgreSQL).
pub(crate) async fn insert(
    conn: &mut AsyncPgConnection,
    names: &Names,
    rows: &[Row],
    heads: &[bool],
) -> Result<Vec<TaskId>> {
    let tasks = || rows.iter().map(|row| &row.task);
    let payloads: Vec<&[u8]> = tasks().map(|t| t.payload.as_slice()).collect();
    let mut b = Builder {
        // Its text takes one of a few shapes (which columns vary by row), so
        // each connection prepares it once per shape.
        query: Some(diesel_outbox_sql::cached("")),
        params: 0,
        exprs: Vec::new(),
        arrays: Vec::new(),
        aliases: Vec::new(),
    };
    b.column::<String, Text>(
        "kind",
        "text",
        "NULL",
        tasks().map(|t| Some(t.kind.clone())).collect(),
    );
    b.column::<i32, Integer>(
        "version",
        "int4",
        "NULL",
        tasks().map(|t| Some(t.version)).collect(),
    );
    let payload = b.param();
    b.arrays.push(format!("${payload}::bytea[]"));
    b.aliases.push("payload");
    b.exprs.push("payload".into());
    b.bind::<Array<Bytea>, _>(payloads);
    let empty = serde_json::Value::Object(serde_json::Map::new());
    let headers = rows
        .iter()
        .map(|row| row.headers.clone())
        .map(|h| (h != empty).then_some(h))
        .collect();
    b.column::<serde_json::Value, Jsonb>("headers", "jsonb", "'{}'::jsonb", headers);
    b.column::<String, Text>(
        "ordering_key",
        "text",
        "NULL",
        tasks().map(|t| t.ordering_key.clone()).collect(),
    );
    b.column::<i32, Integer>(
        "max_attempts",
        "int4",
        "NULL",
        tasks().map(|t| t.max_attempts).collect(),
    );
    let not_before = b.value::<chrono::DateTime<chrono::Utc>, Timestamptz>(
        "next_attempt_at",
        "timestamptz",
        "now()",
        tasks().map(|t| t.not_before).collect(),
    );
    b.exprs.push(not_before.clone());
    // transition::enqueued, with "due" on the database clock.
    let head = b.value::<bool, Bool>(
        "head",
        "bool",
        "true",
        heads.iter().map(|&head| Some(head)).collect(),
    );
    b.exprs.push(format!(
        "CASE WHEN NOT {head} THEN 'blocked' WHEN {not_before} > now() THEN 'waiting' \
         ELSE 'available' END"
    ));
    b.column::<chrono::DateTime<chrono::Utc>, Timestamptz>(
        "expires_at",
        "timestamptz",
        "NULL",
        tasks().map(|t| t.expires_at).collect(),
    );
    let sql = format!(
        "INSERT INTO {} (kind, version, payload, headers, ordering_key, max_attempts, \
         next_attempt_at, status, expires_at) \
         SELECT {} FROM unnest({}) WITH ORDINALITY AS i({}, ord) ORDER BY ord RETURNING id",
        names.render("outbox_tasks"),
        b.exprs.join(", "),
        b.arrays.join(", "),
        b.aliases.join(", "),
    );
    let query = b
        .query
        .take()
        .ok_or_else(|| Error::database("the batch insert was already built"))?;
    let inserted: Vec<Id> = query.sql(&sql).load(conn).await.map_err(postgres_error)?;
    if inserted.len() != rows.len() {
        return Err(Error::database(format!(
            "inserted {} rows for {} tasks",
            inserted.len(),
            rows.len()
        )));
    }
    let mut ids: Vec<i64> = inserted.into_iter().map(|row| row.id).collect();
    ids.sort_unstable();
    Ok(ids.into_iter().map(TaskId::new).collect())
}
