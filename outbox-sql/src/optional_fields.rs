//! [`optional_fields`]: which optional fields of a task are set, the part of
//! a row's shape that every backend's insert text depends on.

use diesel_outbox_core::Task;

/// Whether `task` sets, in this order: any header, `ordering_key`,
/// `dedup_key`, `max_attempts`, `not_before` and `expires_at`. Rows whose
/// tasks agree here (and on the status they start in) can share one
/// `VALUES` text, since a backend writes absent values as literals.
///
/// ```
/// use diesel_outbox_core::Task;
/// use diesel_outbox_sql::optional_fields;
///
/// let task = Task::new("order.created", 1, "{}").ordering_key("customer-7");
/// assert_eq!(optional_fields(&task), [false, true, false, false, false, false]);
/// ```
pub fn optional_fields(task: &Task) -> [bool; 6] {
    [
        !task.headers.is_empty(),
        task.ordering_key.is_some(),
        task.dedup_key.is_some(),
        task.max_attempts.is_some(),
        task.not_before.is_some(),
        task.expires_at.is_some(),
    ]
}
