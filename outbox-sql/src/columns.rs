//! Column lists of statements whose rows are read by position
//! ([`CachedQuery::returning`](crate::CachedQuery::returning)): a test
//! compares the list a statement names with the table's and the row type's.

use diesel::{backend::Backend, query_builder::QueryFragment};

/// The column names `query` (a `SELECT`) selects, in order, without table
/// qualifiers or quotes.
pub fn selected_columns<DB>(query: impl QueryFragment<DB>) -> Vec<String>
where
    DB: Backend + Default,
    DB::QueryBuilder: Default,
{
    let sql = diesel::debug_query::<DB, _>(&query).to_string();
    let list = sql
        .strip_prefix("SELECT ")
        .and_then(|rest| rest.split(" FROM ").next())
        .unwrap_or_default();
    list.split(", ").map(bare).collect()
}

/// The column names of a hand-written list such as `"t.id, t.kind"`, in
/// order, without table qualifiers or quotes.
pub fn listed_columns(list: &str) -> Vec<String> {
    list.split(',').map(|column| bare(column.trim())).collect()
}

/// `column` without its table qualifier and quotes (`"` or `` ` ``).
fn bare(column: &str) -> String {
    column
        .rsplit('.')
        .next()
        .unwrap_or(column)
        .replace(['"', '`'], "")
}

#[cfg(test)]
mod tests {
    use diesel::{mysql::Mysql, pg::Pg, prelude::*};

    use super::{listed_columns, selected_columns};

    diesel::table! {
        things (id) {
            id -> BigInt,
            name -> Text,
        }
    }

    #[test]
    fn both_quotings_give_bare_names_in_order() {
        let query = || things::table.select((things::name, things::id));
        assert_eq!(selected_columns::<Pg>(query()), ["name", "id"]);
        assert_eq!(selected_columns::<Mysql>(query()), ["name", "id"]);
        assert_eq!(listed_columns("t.name, t.id"), ["name", "id"]);
    }
}
