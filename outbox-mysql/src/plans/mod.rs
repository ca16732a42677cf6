//! The plan tests: `ANALYZE FORMAT=JSON` of the store's statements on real
//! backlogs.

mod claim;
mod complete;
