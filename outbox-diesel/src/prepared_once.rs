//! [`PreparedOnce`]: which of an unbounded family of statements a store
//! prepares once per connection.
//!
//! Multi-row inserts take a text per length (and per shape of row), so
//! keeping every one a process meets could keep hundreds of statements on
//! each connection, each holding its parsed form (on MySQL/MariaDB also
//! counting against the server-wide `max_prepared_stmt_count`). A store
//! prepares once only the first few it meets, and prepares any other on each
//! call, which costs a round trip on a server and a parse on SQLite.
//!
//! ```
//! use diesel_outbox_sql::{PREPARED_PER_FAMILY, PreparedOnce};
//!
//! let inserts = PreparedOnce::default();
//! assert!(inserts.choose(100)); // a batch of 100 rows: kept from now on
//! for rows in 1..PREPARED_PER_FAMILY {
//!     inserts.choose(rows);
//! }
//! assert!(!inserts.choose(7_000)); // past the bound: prepared per call
//! assert!(inserts.choose(100));
//! ```

use std::sync::{Mutex, PoisonError};

/// How many statements of one family a store prepares once per connection.
pub const PREPARED_PER_FAMILY: usize = 8;

/// The statements of one family, by key (what their text depends on), that
/// a store prepares once per connection.
#[derive(Debug)]
pub struct PreparedOnce<K> {
    chosen: Mutex<Vec<K>>,
}

impl<K> Default for PreparedOnce<K> {
    fn default() -> Self {
        Self {
            chosen: Mutex::new(Vec::new()),
        }
    }
}

impl<K: PartialEq> PreparedOnce<K> {
    /// Whether the statement of `key` is prepared once per connection: true
    /// for a key chosen before, or for a new one while fewer than
    /// [`PREPARED_PER_FAMILY`] are.
    pub fn choose(&self, key: K) -> bool {
        // The list is never left half-changed, so a panic elsewhere while
        // it was held does not make it wrong.
        let mut chosen = self.chosen.lock().unwrap_or_else(PoisonError::into_inner);
        if chosen.contains(&key) {
            return true;
        }
        if chosen.len() < PREPARED_PER_FAMILY {
            chosen.push(key);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::{PREPARED_PER_FAMILY, PreparedOnce};

    #[test]
    fn keeps_the_first_keys_and_no_more() {
        let family = PreparedOnce::default();
        for key in 0..PREPARED_PER_FAMILY {
            assert!(family.choose(key), "key {key}");
        }
        assert!(!family.choose(PREPARED_PER_FAMILY));
        assert!(!family.choose(500));
        // The chosen ones stay chosen.
        assert!(family.choose(0));
        assert!(family.choose(PREPARED_PER_FAMILY - 1));
    }
}
