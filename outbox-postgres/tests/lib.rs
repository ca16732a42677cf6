//! PostgreSQL integration tests: the shared conformance suite, then what is
//! specific to this backend. One binary, so the linker runs once.

mod conformance {
    outbox_testkit::conformance_tests!(outbox_testkit::postgres::PgTestDb);
}
mod database_errors;
mod migration_lock;
mod notify;
mod pool_recycling;
