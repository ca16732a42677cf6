//! The flows every backend shares, written once over
//! [`Dialect`](crate::Dialect)'s primitives: enqueue, claims, completion
//! writes, discards, and the ordering keys' bookkeeping.

pub mod claim;
pub mod complete;
pub mod discard;
pub mod enqueue;
pub mod keys;
pub mod listing;
