//! MySQL/MariaDB integration tests: the shared conformance suite, then what
//! is specific to this backend. One binary, so the linker runs once.

mod conformance {
    diesel_outbox_testkit::conformance_tests!(diesel_outbox_testkit::mysql::MysqlTestDb);
}
/// The same suite on an outbox whose tables have a prefix of the user's.
mod conformance_tenant {
    diesel_outbox_testkit::conformance_tests!(
        diesel_outbox_testkit::mysql::MysqlTestDbNamed<diesel_outbox_testkit::TenantNames>
    );
}
mod auto_increment;
mod concurrent_purges;
mod migration_lock;
mod pooled_sessions;
mod prepared_inserts;
mod session_isolation;
mod time_zone;
mod unreadable_keys;
