//! PostgreSQL integration tests: the shared conformance suite, then what is
//! specific to this backend. One binary, so the linker runs once.

mod conformance {
    diesel_outbox_testkit::conformance_tests!(diesel_outbox_testkit::postgres::PgTestDb);
}
/// The same suite on an outbox in a schema of its own, its tables with a
/// prefix of the user's.
mod conformance_tenant {
    diesel_outbox_testkit::conformance_tests!(
        diesel_outbox_testkit::postgres::PgTestDbNamed<diesel_outbox_testkit::SchemaTenantNames>
    );
}
mod migration_lock;
mod notify;
mod own_schema;
mod plain_enqueue;
mod pool_recycling;
mod round_faults;
mod storage;
