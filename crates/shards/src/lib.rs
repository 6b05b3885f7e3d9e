//! herald-shards: shared fan-out between the nodes of a cluster, on when
//! `[cluster] shared_fanout = true` with a PostgreSQL store.
//!
//! ```text
//! enqueue ─► local spool ─► SharedIntake::share (waited for before the 250)
//!     list post ─► publisher: one transaction per batch of waiting posts: the post (meta, body,
//!                  SHA-256) and its shards (member-id ranges of `shard_members`) ─► local post
//!                  completed (the shared store has it now)
//!     then the hand-over as usual (archive) ─► Shards::submit: shared posts skipped, other
//!     posts (generated mail) ─► the local scheduler, as without a cluster
//! every node's loop (`node.rs`), every `shard_report_ms`:
//!     report: finished members of each held shard (one batched UPDATE) + lease renewal
//!     claim (`FOR UPDATE SKIP LOCKED`): open shards, or leased ones whose lease ran out
//!        ─► fetch the post once (cached), check it ─► local spool with `member_range`
//!        ─► scheduler.submit_shard(done so far) ─► the scheduler's report loop tells the
//!        tracker each final outcome (`herald_scheduler::FinalSink`)
//! ```
//!
//! Decisions, with why:
//! - **Shards are member-id ranges**, not destination groups: a range is a contiguous index
//!   scan for the node that fans it out (the same page query as a whole post), a shard's
//!   progress is a small bitmap, and each node still groups its copies by destination in its
//!   own scheduler, so connection reuse stays per node. (Destination groups would reuse
//!   connections better across nodes but need a member → domain index and make shards as
//!   uneven as the domains.)
//! - **Deferred copies stay with their shard**: the owner keeps its lease while alive (renewed
//!   with every report), so its host health, backoff and slow lane keep serving them; if the
//!   owner dies the shard is reclaimed and every copy not reported final — deferred ones
//!   included — is sent by the new owner. A shared retry queue would cost a row per deferred
//!   copy and split one destination's retries between nodes that know nothing of its health.
//! - **Reports carry a shard's whole finished set** (roaring bitmap), idempotent: a report
//!   repeated after a failed commit changes nothing, and a reclaimer starts from it.
//! - **Duplicates after `kill -9`** are bounded by what the dead node finished since its last
//!   report: at most `shard_report_ms` worth of its copies plus what was in flight.
//! - **Durability**: a post is durable before `250` in the accepting node's spool (as without
//!   a cluster) *and* in the shared store: enqueue waits for the publisher's commit
//!   (`herald_enqueue::SharedIntake`; group commit: every post waiting for the publisher goes
//!   into one transaction). If the store does not answer within 5 s the post is acknowledged
//!   from the spool alone and published when the store is back; a node restarted after a
//!   crash republishes what its spool recovered (idempotent by origin node and spool id).
//!
//! SECURITY: rows in the shared store come from other nodes; a shard whose range, bitmap,
//! metadata or body does not check out is set aside as `bad` with the reason (never claimed
//! again, no crash loop) and logged; the post stays stored for the operator.

mod error;
pub mod metrics;
mod node;
mod offers;
mod publisher;
mod share;
mod start;
mod tracker;

pub use error::ShardError;
pub use node::{DrainReport, Shards, ShardsDeps};
pub use publisher::split_recovered;
pub use start::{prepare, start, Prepared};
pub use tracker::Tracker;
