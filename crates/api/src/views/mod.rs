//! The explicit mapping from domain structs (directory, spool, scheduler, telemetry) to the
//! wire views of `herald-api-types`. One file per source stage, so a stage's field rename is a
//! compile error here, in one place, instead of a silent change of the JSON the dashboard, the
//! CLI and operators' scripts read. `tests/it/api_contract.rs` pins the result.
//!
//! Functions rather than `From` impls: both sides are foreign to this crate (the orphan rule),
//! and a plain function reads as what it is — a translation owned by the API.
//!
//! Counts that are `usize` inside a stage are `u64` on the wire (the JSON is the same number;
//! the contract must not depend on the server's pointer width).

pub(crate) mod directory;
pub(crate) mod scheduler;
pub(crate) mod spool;
pub(crate) mod telemetry;

/// A count as the wire carries it.
pub(crate) fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
