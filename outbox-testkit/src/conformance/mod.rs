//! The backend conformance suite: every guarantee of the outbox, written once,
//! generic over the store, and run by each backend's tests.
//!
//! Each scenario is a `pub async fn(&B) -> anyhow::Result<()>` for any
//! [`TestBackend`](crate::TestBackend); [`conformance_tests!`](crate::conformance_tests)
//! turns the whole list into one `#[tokio::test]` per scenario, each on a
//! fresh database:
//!
//! ```ignore
//! // outbox-postgres/tests/lib.rs
//! diesel_outbox_testkit::conformance_tests!(diesel_outbox_testkit::postgres::PgTestDb);
//! ```

mod assertions;
mod async_send;
mod batch_handler;
mod bounds;
mod byte_exact_keys;
pub mod cancellation;
mod completion_batches;
pub mod crash;
mod database_errors;
mod delivery;
mod enqueue;
mod failure_hook;
mod heartbeats;
mod inbox;
mod input;
mod key_heads;
mod leases;
mod migrations;
mod model;
mod operator;
mod ordering;
mod pipeline;
pub mod relay;
mod relay_steps;
mod rounds;
mod send;
mod side_by_side;
pub mod support;
#[cfg(feature = "opentelemetry")]
mod trace_context;
mod transaction;

pub use assertions::*;
pub use async_send::*;
pub use batch_handler::*;
pub use bounds::*;
pub use byte_exact_keys::*;
pub use cancellation::{
    cancelled_discards_leave_nothing_behind, cancelled_inbox_records_leave_nothing_behind,
    cancelled_relay_shutdowns_leave_nothing_behind, cancelled_requeues_leave_nothing_behind,
    cancelled_rounds_leave_nothing_behind, cancelled_sends_leave_nothing_behind,
    cancelled_transaction_helpers_leave_nothing_behind,
};
pub use completion_batches::*;
pub use database_errors::*;
pub use delivery::*;
pub use enqueue::*;
pub use failure_hook::*;
pub use heartbeats::*;
pub use inbox::*;
pub use input::*;
pub use key_heads::*;
pub use leases::*;
pub use migrations::*;
pub use model::*;
pub use operator::*;
pub use ordering::*;
pub use pipeline::*;
pub use relay::{
    a_handler_blocking_its_thread_does_not_stop_the_relay,
    ordering_keys_hold_under_random_failures, purge_keeps_unfinished_and_recent_rows,
    relay_claims_only_what_it_can_start, relay_wakes_for_the_next_due_retry,
    shutdown_deadline_gives_claims_back, shutdown_waits_for_running_handlers,
    stats_age_the_oldest_due_and_running_tasks, stats_and_requeue,
    three_relays_deliver_each_task_once,
};
pub use relay_steps::*;
pub use rounds::*;
pub use send::*;
pub use side_by_side::*;
#[cfg(feature = "opentelemetry")]
pub use trace_context::*;
pub use transaction::*;

/// Expands into one `#[tokio::test]` per conformance scenario for the given
/// [`TestBackend`](crate::TestBackend) type. Each test creates its own
/// database, runs the scenario, and panics with the scenario's error so the
/// database is kept for inspection.
///
/// A backend whose unit of locking is the whole database rather than a row
/// (SQLite: one writer at a time) writes `conformance_tests!(Backend,
/// without_row_locks)`: the one scenario that holds a row lock in another
/// session (`SELECT ... FOR UPDATE`, which such a database has no syntax for)
/// is left out, and every other scenario runs.
///
/// The first form is the database servers' ([`IsolatedDb`](crate::isolated::IsolatedDb)
/// of a [`Server`](crate::isolated::Server)): it adds the scenarios in which
/// the server itself fails (a constraint, a deadlock, a lock timeout, a
/// killed session), which take the server's codes and statements from its
/// `Server`.
#[macro_export]
macro_rules! conformance_tests {
    ($backend:ty) => {
        $crate::conformance_tests!($backend, without_row_locks);
        $crate::conformance_tests!(@each $backend; a_round_skips_rows_locked_elsewhere);
        $crate::conformance_tests!(@each $backend;
            constraint_violations_are_permanent_and_carry_their_code,
            a_deadlock_between_two_enqueues_is_retryable,
            a_lock_timeout_is_retryable,
            a_connection_the_server_killed_is_retryable,
        );
    };
    ($backend:ty, without_row_locks) => {
        $crate::conformance_tests!(@each $backend;
            enqueue_commits_with_the_transaction,
            two_outboxes_in_one_database_stay_apart,
            an_outbox_in_another_schema_stays_apart,
            enqueue_rolls_back_with_the_transaction,
            enqueue_outside_a_transaction_is_refused,
            enqueue_many_returns_ids_in_order,
            enqueue_many_stores_every_field,
            concurrent_dedup_gives_one_row,
            dedup_keys_differing_by_trailing_spaces_are_distinct,
            bad_input_names_the_field_and_writes_nothing,
            payload_limit_is_exactly_one_mebibyte,
            zero_batch_size_is_refused,
            send_success_marks_succeeded_once,
            send_retryable_error_schedules_a_retry,
            send_permanent_error_marks_failed,
            send_reaching_max_attempts_marks_failed,
            send_after_expiry_fails_without_calling,
            send_unknown_id_is_not_found,
            send_without_handler_stays_unfinished,
            concurrent_sends_run_the_handler_once,
            lease_takeover_fences_the_late_writer,
            hung_handler_is_cut_and_another_worker_delivers,
            stale_attempt_of_the_same_owner_is_fenced,
            completion_by_another_owner_is_fenced,
            a_write_with_a_stale_and_a_current_result_applies_the_current,
            a_write_of_thousands_of_results_applies_them_all,
            retry_rounds_share_work_exactly_once,
            retry_round_expires_overdue_tasks,
            writers_and_workers_run_side_by_side,
            a_round_tries_each_task_once,
            a_round_delivers_the_key_successor_its_write_released,
            claims_near_their_lease_end_are_released,
            send_waits_for_the_older_task_of_its_key,
            a_round_keeps_a_key_in_order,
            ordering_keys_differing_by_trailing_spaces_are_independent,
            three_relays_deliver_each_task_once,
            ordering_keys_hold_under_random_failures,
            shutdown_waits_for_running_handlers,
            shutdown_deadline_gives_claims_back,
            a_handler_blocking_its_thread_does_not_stop_the_relay,
            relay_claims_only_what_it_can_start,
            purge_keeps_unfinished_and_recent_rows,
            stats_and_requeue,
            stats_age_the_oldest_due_and_running_tasks,
            heartbeats_record_live_relays_and_forget_stopped_ones,
            a_relay_beats_while_it_runs_and_forgets_its_row_when_stopped,
            a_worker_beats_beside_its_rounds,
            relay_wakes_for_the_next_due_retry,
            send_async_returns_at_once,
            hanging_handler_is_cut_at_the_timeout,
            panicking_handler_is_recorded_and_the_worker_lives,
            a_handler_panicking_before_its_future_is_recorded,
            headers_reach_the_handler_unchanged,
            deliveries_carry_their_outboxs_own_id,
            last_error_is_cut_on_a_utf8_boundary,
            attempts_are_measured,
            transaction_sends_after_commit,
            transaction_failure_writes_and_sends_nothing,
            testkit_assertions_see_what_was_enqueued_and_delivered,
            trickle_runs_each_handler_once_and_writes_promptly,
            poisoned_error_text_is_stored_and_neighbours_succeed,
            a_refused_result_is_isolated_and_recorded,
            an_unreadable_row_fails_alone,
            listings_show_unreadable_rows_beside_the_others,
            claims_never_spend_attempts_unrun,
            a_released_claim_is_not_a_run,
            a_burst_of_send_async_stays_within_concurrency,
            longest_durations_work_end_to_end,
            a_relay_at_its_bounds_runs_without_errors,
            a_round_of_the_largest_batch_writes_every_result,
            a_failed_head_blocks_its_key_and_no_other,
            requeue_of_an_expired_head_delivers_it_first,
            a_task_never_runs_while_its_keys_head_runs,
            lapsed_leases_are_rescued,
            waiting_tasks_are_promoted_once_due,
            concurrent_enqueues_of_one_key_take_turns,
            a_held_dedup_key_leaves_the_head_to_the_next_task,
            discard_refuses_running_and_finished_tasks,
            purge_keeps_a_failed_head,
            stats_count_every_status,
            listing_filters_combine_and_pages_cover_each_task_once,
            listings_without_payloads_keep_every_other_field,
            bulk_requeue_takes_matching_failed_tasks_in_batches,
            bulk_discard_lets_ordering_keys_move_on,
            bulk_changes_take_more_ids_than_a_statement_binds,
            relay_delivers_a_scheduled_task_when_due,
            relay_rescues_a_lapsed_lease,
            a_purge_backlog_never_holds_promotion_back,
            a_purge_pauses_between_passes_unless_behind,
            inbox_applies_a_message_once_per_consumer,
            inbox_record_rolls_back_with_the_effect,
            inbox_outside_a_transaction_or_with_bad_keys_is_refused,
            inbox_concurrent_deliveries_apply_once,
            inbox_purge_deletes_old_records_in_batches,
            failure_hook_runs_once_for_each_task_failed_for_good,
            failure_hook_runs_once_under_a_relay_and_its_panics_stop_nothing,
            cancelled_sends_leave_nothing_behind,
            cancelled_rounds_leave_nothing_behind,
            cancelled_discards_leave_nothing_behind,
            cancelled_requeues_leave_nothing_behind,
            cancelled_inbox_records_leave_nothing_behind,
            cancelled_transaction_helpers_leave_nothing_behind,
            cancelled_relay_shutdowns_leave_nothing_behind,
            model_claim_by_id_decides_as_the_transitions,
            model_batch_claim_decides_as_the_transitions,
            model_completions_decide_as_the_transitions,
            model_promotion_decides_as_the_transitions,
            model_rescue_decides_as_the_transitions,
            model_requeue_decides_as_the_transitions,
            model_discard_decides_as_the_transitions,
            model_enqueue_decides_as_the_transitions,
            model_purge_keeps_what_the_rules_keep,
            a_batch_handler_answers_each_task_of_a_claim,
            a_batch_handler_cut_or_panicking_retries_its_whole_batch,
            a_batch_handler_keeps_ordering_keys,
            shutdown_mid_batch_gives_the_batch_back,
            send_hands_a_batch_handler_a_batch_of_one,
            the_next_batch_is_claimed_while_one_runs,
            a_claim_taken_ahead_is_given_back_at_shutdown,
        );
        $crate::conformance_tests!(@each $backend, (flavor = "current_thread");
            migrations_are_idempotent_and_reversible,
            concurrent_migration_runs_both_succeed,
            revert_leaves_the_applications_migrations,
            printed_migration_sql_makes_a_working_table,
            copied_migrations_count_as_applied,
        );

        // The helper spawned by `tokio::spawn` at this backend's own types:
        // the check a handler in a web framework meets.
        $crate::conformance_tests!(@spawned $backend;
            transaction_runs_inside_a_spawned_task => place_order_in_a_task,
            the_transaction_helper_runs_in_a_spawned_task => enqueue_in_a_task,
        );

        /// The child process of `killed_relay_loses_nothing`: does nothing
        /// unless that test started it.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "run as a child process by killed_relay_loses_nothing"]
        async fn relay_child() {
            if let Err(error) = $crate::conformance::crash::relay_child::<$backend>().await {
                panic!("{error:#}");
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn killed_relay_loses_nothing() {
            let db = <$backend as $crate::TestBackend>::create("killed_relay_loses_nothing")
                .await
                .unwrap_or_else(|error| panic!("{error:#}"));
            let child = $crate::conformance::crash::test_name(module_path!(), "relay_child");
            let scenario = $crate::conformance::crash::killed_relay_loses_nothing(db, &child);
            match ::tokio::time::timeout(::std::time::Duration::from_secs(120), scenario).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => panic!("{error:#}"),
                Err(_) => panic!("the scenario did not finish within 120 s"),
            }
        }
    };
    (@spawned $backend:ty; $($scenario:ident => $task:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let db = <$backend as $crate::TestBackend>::create(stringify!($scenario))
                    .await
                    .unwrap_or_else(|error| panic!("{error:#}"));
                let scenario = $crate::conformance::$scenario(&db, |worker, conn| {
                    ::tokio::spawn($crate::conformance::$task::<$backend>(worker, conn))
                });
                let limit = ::std::time::Duration::from_secs(120);
                match ::tokio::time::timeout(limit, scenario).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => panic!("{error:#}"),
                    Err(_) => panic!("the scenario did not finish within {limit:?}"),
                }
            }
        )*
    };
    (@each $backend:ty; $($scenario:ident),* $(,)?) => {
        $crate::conformance_tests!(
            @each $backend, (flavor = "multi_thread", worker_threads = 2); $($scenario),*
        );
    };
    (@each $backend:ty, $runtime:tt; $($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test $runtime]
            async fn $scenario() {
                let db = <$backend as $crate::TestBackend>::create(stringify!($scenario))
                    .await
                    .unwrap_or_else(|error| panic!("{error:#}"));
                // A broken timeout or lock must fail the test, not hang CI.
                let limit = ::std::time::Duration::from_secs(120);
                match ::tokio::time::timeout(limit, $crate::conformance::$scenario(&db)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => panic!("{error:#}"),
                    Err(_) => panic!("the scenario did not finish within {limit:?}"),
                }
            }
        )*
    };
}
