//! The outbox's own id, as its migration wrote it into `outbox_meta`.

use diesel::{
    OptionalExtension as _, QueryableByName, result::Error as DieselError, sql_types::Text,
};
use diesel_async::{AsyncConnection, RunQueryDsl as _, methods::LoadQuery};
use diesel_outbox_core::{Error, OutboxId, Result};

/// The statement that reads the outbox's id (the same text on every backend).
pub const OUTBOX_ID_SQL: &str = "SELECT value FROM outbox_meta WHERE name = 'outbox_id'";

/// A `value` column of `outbox_meta`.
#[derive(Debug, QueryableByName)]
pub struct MetaValue {
    /// The value.
    #[diesel(sql_type = Text)]
    pub value: String,
}

/// The outbox id [`OUTBOX_ID_SQL`] read from the outbox called `names`;
/// an error naming `outbox_meta`, and saying how to fix it (with the table
/// schema and prefix, if any), when the row is missing or empty.
pub fn outbox_id(row: Option<MetaValue>, names: &crate::Names) -> Result<OutboxId> {
    match row {
        Some(row) if !row.value.is_empty() => Ok(OutboxId::new(row.value)),
        _ => Err(Error::Config {
            field: "outbox_meta",
            reason: match names.is_default() {
                true => {
                    "the outbox's id (name 'outbox_id') is missing: apply the outbox migrations \
                         (`outbox migrate`, or run_migrations)"
                        .to_owned()
                }
                false => {
                    let schema = names
                        .schema()
                        .map(|schema| format!(" --schema {schema}"))
                        .unwrap_or_default();
                    let prefix = match names.table_prefix() {
                        "" => String::new(),
                        prefix => format!(" --table-prefix {prefix}"),
                    };
                    format!(
                        "the outbox's id (name 'outbox_id' in {}) is missing: apply the outbox \
                         migrations (`outbox{schema}{prefix} migrate`, or run_migrations_named)",
                        names.display_table("outbox_meta")
                    )
                }
            },
        }),
    }
}

/// Reads the outbox's id on `conn` ([`OUTBOX_ID_SQL`]), classifying a
/// failure with `classify`: what each backend's dialect answers for
/// [`Dialect::outbox_id`](crate::Dialect::outbox_id).
pub async fn read_outbox_id<C>(
    conn: &mut C,
    names: &crate::Names,
    classify: fn(DieselError) -> Error,
) -> Result<OutboxId>
where
    C: AsyncConnection,
    for<'a> diesel::query_builder::SqlQuery: LoadQuery<'a, C, MetaValue>,
{
    let row = diesel::sql_query(&*names.sql(OUTBOX_ID_SQL))
        .get_result::<MetaValue>(conn)
        .await
        .optional()
        .map_err(classify)?;
    outbox_id(row, names)
}
