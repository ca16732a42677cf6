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

/// The error of a transaction whose body has an error type of its own (an
/// inbox consumer's): the body's, or diesel's from BEGIN/COMMIT.
#[derive(Debug)]
pub enum BodyError<E> {
    /// The body failed; the transaction rolled back.
    Body(E),
    /// BEGIN, COMMIT or ROLLBACK failed.
    Diesel(DieselError),
}

impl<E> From<DieselError> for BodyError<E> {
    fn from(error: DieselError) -> Self {
        Self::Diesel(error)
    }
}

impl<E: From<Error>> BodyError<E> {
    /// The body's error unchanged, or diesel's classified by `classify` and
    /// converted.
    pub fn into_body_error(self, classify: fn(DieselError) -> Error) -> E {
        match self {
            Self::Body(error) => error,
            Self::Diesel(error) => E::from(classify(error)),
        }
    }
}
