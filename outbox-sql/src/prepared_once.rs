//! [`PreparedOnce`]: which of an unbounded family of statements a store
//! prepares once per connection.
//!
//! Multi-row inserts take a text per length (and per shape of row), so
//! keeping every one a process meets could keep hundreds of statements on
//! each connection, each holding its parsed form (on MySQL/MariaDB also
//! counting against the server-wide `max_prepared_stmt_count`). A store keeps
//! only a few: a statement met a second time while fewer than
//! [`PREPARED_PER_FAMILY`] are kept joins them for good; any other is
//! prepared on each call, which costs a round trip on a server and a parse on
//! SQLite. A one-off length (the remainder of a backfill, say) thus takes no
//! place that the sizes a service uses every time could have had.
//!
//! ```
//! use diesel_outbox_sql::{PREPARED_PER_FAMILY, PreparedOnce};
//!
//! let inserts = PreparedOnce::default();
//! assert!(!inserts.choose(100)); // a batch of 100 rows, the first time
//! assert!(inserts.choose(100)); // again: kept from now on
//! for rows in 1..PREPARED_PER_FAMILY {
//!     let _ = inserts.choose(rows);
//!     let _ = inserts.choose(rows);
//! }
//! assert!(!inserts.choose(7_000));
//! assert!(!inserts.choose(7_000)); // past the bound: prepared per call
//! assert!(inserts.choose(100));
//! ```

use std::sync::{Mutex, PoisonError};

/// How many statements of one family a store prepares once per connection.
pub const PREPARED_PER_FAMILY: usize = 8;

/// How many keys met once a family remembers, the oldest forgotten first.
const REMEMBERED: usize = 4 * PREPARED_PER_FAMILY;

/// The statements of one family, by key (what their text depends on), that
/// a store prepares once per connection.
#[derive(Debug)]
pub struct PreparedOnce<K> {
    keys: Mutex<Keys<K>>,
}

#[derive(Debug)]
struct Keys<K> {
    /// Prepared once per connection, for good.
    kept: Vec<K>,
    /// Met once, oldest first, while there is room in `kept`.
    met: Vec<K>,
}

impl<K> Default for PreparedOnce<K> {
    fn default() -> Self {
        Self {
            keys: Mutex::new(Keys {
                kept: Vec::new(),
                met: Vec::new(),
            }),
        }
    }
}

impl<K: PartialEq> PreparedOnce<K> {
    /// Whether the statement of `key` is prepared once per connection: true
    /// for a key kept before, or for one met before while fewer than
    /// [`PREPARED_PER_FAMILY`] are kept (it is kept from then on); false,
    /// prepare per call, for a key met the first time or past the bound.
    #[must_use]
    pub fn choose(&self, key: K) -> bool {
        // Both lists are only ever pushed to or drained whole-element, so
        // a panic elsewhere while the lock was held leaves them usable.
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if keys.kept.contains(&key) {
            return true;
        }
        if keys.kept.len() >= PREPARED_PER_FAMILY {
            return false;
        }
        if let Some(at) = keys.met.iter().position(|met| *met == key) {
            keys.met.remove(at);
            keys.kept.push(key);
            if keys.kept.len() >= PREPARED_PER_FAMILY {
                keys.met = Vec::new();
            }
            return true;
        }
        if keys.met.len() >= REMEMBERED {
            keys.met.remove(0);
        }
        keys.met.push(key);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::{PREPARED_PER_FAMILY, PreparedOnce, REMEMBERED};

    #[test]
    fn keeps_keys_met_twice_and_no_more_than_the_bound() {
        let family = PreparedOnce::default();
        for key in 0..PREPARED_PER_FAMILY {
            assert!(!family.choose(key), "key {key}, first time");
            assert!(family.choose(key), "key {key}, second time");
        }
        for _ in 0..3 {
            assert!(!family.choose(PREPARED_PER_FAMILY));
        }
        // The kept ones stay kept.
        assert!(family.choose(0));
        assert!(family.choose(PREPARED_PER_FAMILY - 1));
    }

    #[test]
    fn one_off_keys_take_no_place() {
        let family = PreparedOnce::default();
        for key in 1_000..1_000 + 10 * PREPARED_PER_FAMILY {
            assert!(!family.choose(key));
        }
        assert!(!family.choose(1));
        assert!(family.choose(1));
    }

    #[test]
    fn forgets_the_oldest_key_met_once() {
        let family = PreparedOnce::default();
        for key in 0..=REMEMBERED {
            assert!(!family.choose(key));
        }
        assert!(!family.choose(0), "forgotten, so met once again");
        assert!(family.choose(REMEMBERED), "still remembered");
    }
}
