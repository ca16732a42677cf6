//! The session advisory lock that serialises outbox migration runs on one
//! PostgreSQL database.

use diesel::{RunQueryDsl, pg::Pg, sql_types::BigInt};
use diesel_async::AsyncConnection;
use diesel_outbox_core::{Error, Result};
use diesel_outbox_sql::{MigrationConnection, MigrationLock};

/// The advisory-lock key of outbox migration runs: the 64-bit FNV-1a hash of
/// the name `outbox migrations`, fixed so that every release agrees on it.
/// Advisory locks are per database, so runs on different databases of one
/// server do not wait for each other.
pub(crate) const LOCK_KEY: i64 = fnv1a_64(b"outbox migrations");

/// `pg_advisory_lock(LOCK_KEY)` for the whole run. It waits as long as the
/// session's `lock_timeout` allows (by default, without limit).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdvisoryLock;

impl<C> MigrationLock<MigrationConnection<C>> for AdvisoryLock
where
    C: AsyncConnection<Backend = Pg> + 'static,
{
    fn acquire(&mut self, conn: &mut MigrationConnection<C>) -> Result<()> {
        diesel::sql_query("SELECT pg_advisory_lock($1)")
            .bind::<BigInt, _>(LOCK_KEY)
            .execute(conn)
            .map(drop)
            .map_err(Error::database)
    }

    fn release(&mut self, conn: &mut MigrationConnection<C>) -> Result<()> {
        diesel::sql_query("SELECT pg_advisory_unlock($1)")
            .bind::<BigInt, _>(LOCK_KEY)
            .execute(conn)
            .map(drop)
            .map_err(Error::database)
    }
}

/// The 64-bit FNV-1a hash of `bytes`, as the bits of an `i64`.
const fn fnv1a_64(bytes: &[u8]) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    i64::from_be_bytes(hash.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::{LOCK_KEY, fnv1a_64};

    #[test]
    fn the_lock_key_never_changes() {
        // Instances of different releases must take the same lock.
        assert_eq!(LOCK_KEY, 6_958_026_779_691_657_285);
        // FNV-1a's published test vector.
        assert_eq!(
            fnv1a_64(b"a"),
            i64::from_be_bytes(0xaf63_dc4c_8601_ec8c_u64.to_be_bytes())
        );
    }
}
