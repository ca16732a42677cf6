//! Trace context across the outbox, in a binary of its own: these tests
//! install a global `tracing` subscriber and the W3C propagator, which would
//! add `traceparent` headers to the tasks of every other test.

diesel_outbox_testkit::trace_context_tests!(diesel_outbox_testkit::mysql::MysqlTestDb);
