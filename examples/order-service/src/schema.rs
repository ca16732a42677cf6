//! The service's own table, as diesel sees it (the same on both backends).

diesel::table! {
    /// Orders, one row each; created by `postgres::CREATE_ORDERS` or
    /// `mysql::CREATE_ORDERS`.
    orders (id) {
        /// The order's id.
        id -> BigInt,
        /// Who placed it.
        customer -> Text,
        /// What it costs, in cents.
        total_cents -> BigInt,
    }
}
