//! Raw SQL that diesel prepares once per connection: [`cached`].
//!
//! diesel's `sql_query` marks every statement unsafe to cache, so
//! diesel-async prepares it again on each call, one more round trip per
//! statement. A [`CachedQuery`] builds the same statement from the same text
//! and binds but leaves it cacheable, so the connection's statement cache
//! keys it by its text and bind types and prepares it once.
//!
//! Only statements whose text takes a bounded number of shapes belong here:
//! every distinct text is a prepared statement kept on each connection.

use std::marker::PhantomData;

use diesel::{
    QueryResult,
    backend::Backend,
    query_builder::{AstPass, Query, QueryFragment, QueryId},
    query_dsl::RunQueryDsl,
    serialize::ToSql,
    sql_types::{HasSqlType, Untyped},
};

/// The statement `sql`, cacheable, with its binds to come from
/// [`bind`](CachedQuery::bind) in placeholder order.
///
/// The text uses the backend's placeholders: `$1`, `$2`, ... on PostgreSQL,
/// in any order and as often as needed (`$n` is the `n`th bind), or `?` on
/// MySQL (binds in order); SQLite takes both, and `?NNN`, a bare `?` being
/// one more than the largest number before it. The statement is rebuilt from its pieces with
/// diesel writing each placeholder, so PostgreSQL receives it renumbered in
/// order of appearance, a repeated number bound once per appearance. A
/// statement whose placeholders and binds do not match fails when it runs.
pub fn cached<'f, DB: Backend>(sql: &'f str) -> CachedQuery<'f, DB> {
    let (parts, numbers) = split(sql);
    // A bare `?` is one more than the largest number so far, as SQLite
    // numbers it (so on MySQL, where every placeholder is bare, the binds
    // in order).
    let mut largest = 0;
    let slots = numbers
        .into_iter()
        .map(|number| {
            let n = number.unwrap_or(largest + 1);
            largest = largest.max(n);
            n.checked_sub(1)
        })
        .collect();
    CachedQuery {
        parts,
        slots,
        binds: Vec::new(),
        cacheable: true,
    }
}

/// The same builder as [`cached`] for a statement whose text varies without
/// bound (a list of ids written into it, a multi-row insert not chosen by
/// [`PreparedOnce`](crate::PreparedOnce)): prepared for each call, since
/// keeping every variant would fill each connection's statement cache.
pub fn uncached<'f, DB: Backend>(sql: &'f str) -> CachedQuery<'f, DB> {
    CachedQuery {
        cacheable: false,
        ..cached(sql)
    }
}

/// A raw statement diesel may prepare once per connection; see [`cached`].
#[must_use = "queries are only executed when calling `load`, `get_result` or similar"]
pub struct CachedQuery<'f, DB: Backend> {
    /// The text between placeholders; one more piece than placeholders.
    parts: Vec<&'f str>,
    /// For each placeholder, the index of its bind (`None` for `$0`).
    slots: Vec<Option<usize>>,
    binds: Vec<Box<dyn QueryFragment<DB> + Send + 'f>>,
    /// False for [`uncached`] statements.
    cacheable: bool,
}

impl<DB: Backend> std::fmt::Debug for CachedQuery<'_, DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedQuery")
            .field("sql", &self.parts.join("?"))
            .field("slots", &self.slots)
            .field("binds", &self.binds.len())
            .finish()
    }
}

impl<'f, DB: Backend> CachedQuery<'f, DB> {
    /// Replaces the statement's text, keeping its binds and whether it is
    /// cached: for builders that bind values before their text is complete.
    pub fn sql(self, sql: &'f str) -> Self {
        let cacheable = self.cacheable;
        CachedQuery {
            binds: self.binds,
            cacheable,
            ..cached(sql)
        }
    }

    /// The same statement, its result columns read by position as the SQL
    /// types `ST` (a tuple, in the order the statement returns them), so
    /// rows load into a type deriving `Queryable` instead of
    /// `QueryableByName`, which looks every field up by name in every row.
    /// The statement must return exactly those columns, in that order:
    /// name them rather than use `*`, which also returns columns added to the
    /// table later.
    pub fn returning<ST>(self) -> TypedQuery<'f, DB, ST> {
        TypedQuery {
            query: self,
            sql_type: PhantomData,
        }
    }

    /// Binds `value` as SQL type `ST` to the next placeholder.
    pub fn bind<ST, T>(mut self, value: T) -> Self
    where
        DB: HasSqlType<ST>,
        T: ToSql<ST, DB> + Send + 'f,
        ST: Send + 'static,
    {
        self.binds.push(Box::new(Bind::<ST, T> {
            value,
            sql_type: PhantomData,
        }));
        self
    }
}

/// The pieces of `sql` around its placeholders (`$` or `?` followed by
/// digits, or a bare `?`), and each placeholder's number (`None` for a bare
/// `?`).
fn split(sql: &str) -> (Vec<&str>, Vec<Option<usize>>) {
    let bytes = sql.as_bytes();
    let (mut parts, mut numbers) = (Vec::new(), Vec::new());
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let digits = match bytes[i] {
            b'$' | b'?' => bytes[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count(),
            _ => 0,
        };
        if bytes[i] == b'?' || digits > 0 {
            parts.push(&sql[start..i]);
            numbers.push(sql[i + 1..i + 1 + digits].parse().ok());
            i += 1 + digits;
            start = i;
        } else {
            i += 1;
        }
    }
    parts.push(&sql[start..]);
    (parts, numbers)
}

struct Bind<ST, T> {
    value: T,
    sql_type: PhantomData<fn() -> ST>,
}

impl<DB, ST, T> QueryFragment<DB> for Bind<ST, T>
where
    DB: Backend + HasSqlType<ST>,
    T: ToSql<ST, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_bind_param::<ST, T>(&self.value)
    }
}

impl<DB: Backend> QueryFragment<DB> for CachedQuery<'_, DB> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        let mismatch = |what: String| Err(diesel::result::Error::QueryBuilderError(what.into()));
        if !self.cacheable {
            out.unsafe_to_cache_prepared();
        }
        // One pass over the placeholders: a multi-row statement has thousands.
        let mut used = vec![false; self.binds.len()];
        for &i in self.slots.iter().flatten() {
            if let Some(slot) = used.get_mut(i) {
                *slot = true;
            }
        }
        if let Some(unused) = used.iter().position(|used| !used) {
            return mismatch(format!("bind {} has no placeholder", unused + 1));
        }
        for (part, slot) in self.parts.iter().zip(&self.slots) {
            out.push_sql(part);
            match slot.and_then(|i| self.binds.get(i)) {
                Some(bind) => bind.walk_ast(out.reborrow())?,
                None => {
                    return mismatch(format!(
                        "a placeholder has no bind: {} binds",
                        self.binds.len()
                    ));
                }
            }
        }
        if let Some(last) = self.parts.last() {
            out.push_sql(last);
        }
        Ok(())
    }
}

impl<DB: Backend> QueryId for CachedQuery<'_, DB> {
    type QueryId = ();
    // The text is the cache key: no type identifies the statement.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<DB: Backend> Query for CachedQuery<'_, DB> {
    type SqlType = Untyped;
}

impl<DB: Backend, Conn> RunQueryDsl<Conn> for CachedQuery<'_, DB> {}

/// A [`CachedQuery`] whose rows are read by position; see
/// [`CachedQuery::returning`].
#[must_use = "queries are only executed when calling `load`, `get_result` or similar"]
pub struct TypedQuery<'f, DB: Backend, ST> {
    query: CachedQuery<'f, DB>,
    sql_type: PhantomData<fn() -> ST>,
}

impl<DB: Backend, ST> std::fmt::Debug for TypedQuery<'_, DB, ST> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TypedQuery").field(&self.query).finish()
    }
}

impl<DB: Backend, ST> QueryFragment<DB> for TypedQuery<'_, DB, ST> {
    fn walk_ast<'b>(&'b self, out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.query.walk_ast(out)
    }
}

impl<DB: Backend, ST> QueryId for TypedQuery<'_, DB, ST> {
    type QueryId = ();
    // As for `CachedQuery`: the text is the cache key.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<DB: Backend, ST: 'static> Query for TypedQuery<'_, DB, ST> {
    type SqlType = ST;
}

impl<DB: Backend, ST, Conn> RunQueryDsl<Conn> for TypedQuery<'_, DB, ST> {}

#[cfg(test)]
mod tests {
    use diesel::{
        mysql::Mysql,
        pg::Pg,
        query_builder::QueryFragment,
        sql_types::{BigInt, Text},
    };

    use super::{cached, split};

    #[test]
    fn postgres_placeholders_are_renumbered_in_order_of_appearance() {
        let query = cached::<Pg>("SELECT $2::text, $1::int8, $2::text")
            .bind::<BigInt, _>(7_i64)
            .bind::<Text, _>("k");
        assert_eq!(
            diesel::debug_query(&query).to_string(),
            r#"SELECT $1::text, $2::int8, $3::text -- binds: ["k", 7, "k"]"#
        );
        assert!(matches!(query.is_safe_to_cache_prepared(&Pg), Ok(true)));
    }

    #[test]
    fn mysql_placeholders_take_the_binds_in_order() {
        let query = cached::<Mysql>("SELECT ? + ?")
            .bind::<BigInt, _>(1_i64)
            .bind::<BigInt, _>(2_i64);
        assert_eq!(
            diesel::debug_query(&query).to_string(),
            "SELECT ? + ? -- binds: [1, 2]"
        );
        assert!(matches!(query.is_safe_to_cache_prepared(&Mysql), Ok(true)));
    }

    #[test]
    fn uncached_statements_say_so() {
        let query = super::uncached::<Mysql>("SELECT ?").bind::<BigInt, _>(1_i64);
        assert!(matches!(query.is_safe_to_cache_prepared(&Mysql), Ok(false)));
    }

    #[test]
    fn a_missing_or_unused_bind_fails_the_statement() {
        let missing = cached::<Pg>("SELECT $1, $2").bind::<BigInt, _>(1_i64);
        let unused = cached::<Pg>("SELECT $1")
            .bind::<BigInt, _>(1_i64)
            .bind::<BigInt, _>(2_i64);
        assert!(
            missing
                .to_sql(&mut diesel::pg::PgQueryBuilder::default(), &Pg)
                .is_err()
        );
        assert!(
            unused
                .to_sql(&mut diesel::pg::PgQueryBuilder::default(), &Pg)
                .is_err()
        );
    }

    #[test]
    fn splits_at_numbered_and_positional_placeholders() {
        assert_eq!(
            split("a = $1 AND b = $12::int8[] AND c = '$'"),
            (
                vec!["a = ", " AND b = ", "::int8[] AND c = '$'"],
                vec![Some(1), Some(12)]
            )
        );
        assert_eq!(
            split("x IN (?, ?)"),
            (vec!["x IN (", ", ", ")"], vec![None, None])
        );
        assert_eq!(split("no binds"), (vec!["no binds"], vec![]));
        assert_eq!(split("?2 < ?"), (vec!["", " < ", ""], vec![Some(2), None]));
    }

    #[test]
    fn a_bare_placeholder_follows_the_largest_number_as_on_sqlite() {
        let query = cached::<Mysql>("SELECT $2, ?, $1, ?")
            .bind::<BigInt, _>(1_i64)
            .bind::<BigInt, _>(2_i64)
            .bind::<BigInt, _>(3_i64)
            .bind::<BigInt, _>(4_i64);
        assert_eq!(
            diesel::debug_query(&query).to_string(),
            "SELECT ?, ?, ?, ? -- binds: [2, 3, 1, 4]"
        );
    }
}
