//! MySQL/MariaDB integration tests: the shared conformance suite, then what
//! is specific to this backend. One binary, so the linker runs once.

mod conformance {
    diesel_outbox_testkit::conformance_tests!(diesel_outbox_testkit::mysql::MysqlTestDb);
}
mod auto_increment;
mod migration_lock;
mod prepared_inserts;
mod session_isolation;
mod time_zone;
mod unreadable_keys;
