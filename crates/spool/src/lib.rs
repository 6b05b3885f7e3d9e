//! herald-spool: durable posts and per-recipient final states.
//!
//! Place in the flow: inbound calls [`Spool::accept`] and answers `250` only after it returns;
//! the server's report loop calls [`Spool::record`] for every delivered or failed recipient and
//! [`Spool::complete`] when a post is finished; at startup [`Spool::open`] hands every unfinished
//! post back with the set of members already final, so fan-out resumes without re-sending them.
//!
//! Storage is one append-only journal of segment files under `<dir>/journal/` (the format is documented in
//! `record.rs`). Post bodies live in the journal too, so concurrent
//! accepts share one fdatasync (group commit), and per-recipient outcomes are 27-byte records
//! committed every `commit_max_records` records or `commit_interval_ms` — never a file per
//! recipient, never an fsync per record. A single writer thread owns the files.
//!
//! Invariants:
//! - durable before 250: `accept` returns after its Post record is fsync'd;
//! - a crash loses at most the outcomes recorded in the last `commit_interval_ms` (or the last
//!   `commit_max_records`), never an accepted post nor anything `flush` confirmed;
//! - recovery never drops damage silently: a torn tail of the last segment is cut with a warning,
//!   anything else is quarantined as `*.corrupt` with an error, keeping every record before it;
//! - memory is per live post (metadata + a roaring set of done members), not per record.
//!
//! Limits: a post body up to 511 MiB; segments roll at `segment_max_bytes`; old segments are
//! compacted by copying the few long-lived posts forward (see `journal.rs`).
//! Only one process may open a spool directory at a time; this is not yet enforced by a lock.
//!
//! SECURITY: the journal is trusted as much as the process that writes it; CRCs detect accidental
//! damage, and every on-disk length is bounded before it is used, so a damaged or hostile segment
//! file yields a quarantine and a log line, never a panic or an unbounded allocation.

mod config;
pub mod dedup;
mod error;
mod journal;
mod live;
mod model;
mod record;
mod recovery;
mod scan;
mod segment;
mod shared;
mod spool;
mod writer;

pub use config::{SpoolConfig, SpoolSection};
pub use dedup::{DedupConfig, DedupError, DedupStore, Seen};
pub use error::SpoolError;
pub use model::{
    DoneSet, FinalState, PostKind, PostMeta, PostProgress, RecoveredPost, SnapshotSegment,
    SpoolStats, SpooledPost,
};
pub use spool::{Durable, Spool, QUEUE_CAPACITY};
