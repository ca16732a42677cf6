//! SQLite integration tests: the shared conformance suite, then what is
//! specific to this backend. One binary, so the linker runs once.

mod conformance {
    // Every scenario but `a_round_skips_rows_locked_elsewhere`, which holds a
    // row with `SELECT ... FOR UPDATE` in another session: SQLite has no row
    // locks (its unit of locking is the database), so there is no row for a
    // claim to skip. What that scenario guards, a claim never waiting on
    // another session's row, becomes a claim waiting its turn for the write
    // lock, which `write_lock` below tests.
    diesel_outbox_testkit::conformance_tests!(
        diesel_outbox_testkit::sqlite::SqliteTestDb,
        without_row_locks
    );
}
/// The same suite on an outbox whose tables have a prefix of the user's.
mod conformance_tenant {
    diesel_outbox_testkit::conformance_tests!(
        diesel_outbox_testkit::sqlite::SqliteTestDbNamed<diesel_outbox_testkit::TenantNames>,
        without_row_locks
    );
}
mod migration_lock;
mod prepared_inserts;
mod processes;
mod settings;
mod time_zone;
mod write_lock;
