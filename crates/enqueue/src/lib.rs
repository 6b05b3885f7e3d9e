//! herald-enqueue: the one enqueue path (Postfix cleanup(8)). Everything that becomes a post —
//! SMTP and LMTP mail, an administrator's injection, an approved held post, mail Herald writes
//! itself, postmaster mail — enters through [`Enqueuer::enqueue`] with a [`Submission`].
//!
//! Place in the flow: `inbound ─► enqueue ─► spool.accept ─► fan-out | bounce stage | lists
//! stage`. The listeners call it through [`ListHandler`] (the `herald_inbound::InboundHandler`
//! the composition root plugs in); the lists stage and the HTTP API call it directly.
//!
//! Modules: `enqueue` (classify, dedup, build `PostMeta`, accept), `backlog` (acknowledged
//! posts waiting for their hand-off to the next stage, and the task that hands them over), `inbound` (the
//! RCPT check and DATA hand-over: never an open relay), `eight_bit` (raw 8-bit header fields
//! without SMTPUTF8 made 7-bit or refused), `arrival` (SPF/DKIM/ARC/DMARC once on
//! arrival), `policy` (per-list content rules), `rights` (who may post), `dedup` (the
//! Message-ID store, kept in `herald-spool` because fan-out's expansion reads it too),
//! `cluster_dedup` (the same Message-IDs in the shared store of a cluster), `error` (the
//! boundary's error type).
//!
//! One-way arrows: this crate depends on the stores (directory, spool), telemetry, auth and
//! the SMTP vocabulary (inbound, smtp) only. The stages downstream of it (scheduler, lists,
//! bounce) are reached through the bounded channels of [`Handoff`], never imported.
//!
//! SECURITY: recipients and bodies come from untrusted peers; see `inbound.rs`, `arrival.rs`
//! and `policy.rs` for what is checked where.

mod arrival;
pub mod backlog;
mod cluster_dedup;
pub mod complete;
pub mod config;
/// The Message-ID store, kept in `herald-spool` (expansion reads it too); named here as well
/// because enqueue is its first user.
pub mod dedup {
    pub use herald_spool::dedup::*;
}
mod eight_bit;
mod enqueue;
mod error;
mod handoff;
mod inbound;
mod policy;
pub mod pressure;
mod rights;
mod shared;

pub use arrival::{ArrivalCheck, LmtpClients, Source};
pub use backlog::{start, Backlog, BacklogQueue, HandoffStarted, IntakeSection};
pub use cluster_dedup::ClusterDedup;
pub use config::{ArrivalSetupError, AuthSection, ComplaintsSection};
pub use enqueue::{crlf, from_header, Enqueuer, Origin, Submission, HANDOFF_CAPACITY};
pub use error::EnqueueError;
pub use handoff::{Handoff, HandoffReceivers};
pub use herald_spool::{DedupConfig, DedupError, DedupStore, Seen};
pub use inbound::{ListHandler, PostmasterPolicy, Target};
pub use policy::MAX_PARTS;
pub use pressure::IntakePressure;
pub use rights::{posting_right, PostingRight};
pub use shared::{ShareFuture, SharedIntake};
