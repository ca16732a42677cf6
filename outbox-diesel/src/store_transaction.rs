//! The error of transactions the stores open on their own connections.

use diesel::result::Error as DieselError;
use diesel_outbox_core::Error;

/// The error of a store transaction: the body's own, or diesel's from
/// BEGIN/COMMIT. Backends run `conn.transaction::<T, TxError, _>(...)` and
/// turn the result into the outbox's error with [`TxError::into_error`].
#[derive(Debug)]
pub enum TxError {
    /// The body failed; the transaction rolled back.
    Outbox(Error),
    /// BEGIN, COMMIT or ROLLBACK failed.
    Diesel(DieselError),
}

impl From<DieselError> for TxError {
    fn from(error: DieselError) -> Self {
        Self::Diesel(error)
    }
}

impl TxError {
    /// The outbox error: the body's unchanged, diesel's through `classify`.
    pub fn into_error(self, classify: fn(DieselError) -> Error) -> Error {
        match self {
            Self::Outbox(error) => error,
            Self::Diesel(error) => classify(error),
        }
    }
}
