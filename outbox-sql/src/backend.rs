//! [`SqlBackend`]: what the shared flows bind and read alike on every
//! diesel backend, so a statement whose values are plain integers and text
//! runs from code written once.

use std::future::Future;

use diesel::{
    QueryResult,
    backend::Backend,
    deserialize::FromSql,
    serialize::ToSql,
    sql_types::{BigInt, HasSqlType, Text},
};
use diesel_async::{AsyncConnectionCore, RunQueryDsl};

use crate::{CachedQuery, rows::Id};

/// A diesel backend whose integers and text the flows bind, and whose ids
/// they read, without naming it: implemented for every backend that has
/// them (PostgreSQL, MySQL and SQLite do).
pub trait SqlBackend: Backend + Send + 'static {
    /// Binds `value` as a `BIGINT` to the query's next placeholder.
    fn int<'f>(query: CachedQuery<'f, Self>, value: i64) -> CachedQuery<'f, Self>;

    /// Binds `value` as text to the query's next placeholder.
    fn text<'f>(query: CachedQuery<'f, Self>, value: &'f str) -> CachedQuery<'f, Self>;

    /// Runs `query` on `conn` and reads its `id` column.
    fn ids<'a, C>(
        query: CachedQuery<'a, Self>,
        conn: &'a mut C,
    ) -> impl Future<Output = QueryResult<Vec<i64>>> + Send + 'a
    where
        C: AsyncConnectionCore<Backend = Self> + Send;
}

impl<DB> SqlBackend for DB
where
    DB: Backend + HasSqlType<BigInt> + HasSqlType<Text> + Send + 'static,
    i64: ToSql<BigInt, DB> + FromSql<BigInt, DB>,
    str: ToSql<Text, DB>,
{
    fn int<'f>(query: CachedQuery<'f, Self>, value: i64) -> CachedQuery<'f, Self> {
        query.bind::<BigInt, _>(value)
    }

    fn text<'f>(query: CachedQuery<'f, Self>, value: &'f str) -> CachedQuery<'f, Self> {
        query.bind::<Text, _>(value)
    }

    #[allow(
        clippy::manual_async_fn,
        reason = "the future must be Send for every caller (rust-lang/rust#100013)"
    )]
    fn ids<'a, C>(
        query: CachedQuery<'a, Self>,
        conn: &'a mut C,
    ) -> impl Future<Output = QueryResult<Vec<i64>>> + Send + 'a
    where
        C: AsyncConnectionCore<Backend = Self> + Send,
    {
        async move {
            let rows: Vec<Id> = query.load(conn).await?;
            Ok(rows.into_iter().map(|row| row.id).collect())
        }
    }
}
