//! PostgreSQL integration tests: the shared conformance suite, then what is
//! specific to this backend.

mod conformance {
    outbox_testkit::conformance_tests!(outbox_testkit::postgres::PgTestDb);
}
