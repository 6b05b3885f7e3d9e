//! What the scheduler's stages send each other: the vocabulary of the crate, with no behaviour
//! of its own, so that the actor, the workers, expansion and the report loop all depend on it and
//! never on each other's modules (the old `actor.rs ↔ worker.rs` import circle).
//!
//! - [`job`]: the unit of work (expansion → actor → workers);
//! - [`Ctrl`]: workers and the API → the actor (connection attempts, batches, exits, snapshots,
//!   operator commands), with [`BatchDone`], [`HostFailure`] and the hosts they name;
//! - [`report`]: workers, the actor and expansion → the report loop ([`Report`]);
//! - [`views`]: the queue as the actor shows it to the API;
//! - [`knowledge`]: the cluster's shared knowledge ↔ the actor.
//!
//! Invariant: this module imports nothing from the rest of the crate but its own children.

pub mod job;
pub mod knowledge;
pub mod report;
pub mod views;

pub use job::{Job, PostCtx};
pub use report::{OutcomeReport, PolicyNotes, Report};
pub use views::{DestinationView, HostView, QueueSnapshot, SnapshotRequest, StragglerView};

use herald_types::LaneKind;
use herald_types::Reply;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// One host: MX name and address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostKey {
    pub name: Arc<str>,
    pub addr: IpAddr,
}

/// How long a new connection took to set up, for the host's latency averages (what the actor
/// needs of the SMTP client's timings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectTimings {
    /// TCP connect.
    pub connect: Duration,
    /// From connected to the complete greeting.
    pub banner: Duration,
}

/// Where a worker should try to connect, in order.
#[derive(Debug, Clone)]
pub struct Target {
    pub key: HostKey,
    pub addr: SocketAddr,
    /// This attempt is the one probe of a down host.
    pub probe: bool,
}

/// Why a connection attempt to one host failed, as far as scheduling is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    /// Refused, timed out, broken greeting: counts against the host's health.
    Host,
    /// The host answered with a "too busy" (421 at the greeting): cut the budget, not the host.
    Throttle,
    /// The host answers, slowly but steadily (a tarpit): served by the slow lane from now on,
    /// never counted down for it.
    Tarpit,
    /// This machine ran short (out of descriptors, memory, local ports): nothing is said about
    /// the host, the scheduler pauses new connections for a while instead.
    Local(herald_types::LocalResource),
    /// Neither (e.g. a local error).
    Other,
}

/// One failed connection attempt.
#[derive(Debug, Clone)]
pub struct HostFailure {
    pub key: HostKey,
    pub kind: FailKind,
    pub reason: String,
    /// The attempt failed the TLS the policy demands: what TLS reporting (RFC 8460) records.
    pub tls: Option<TlsFailure>,
}

/// A connection attempt that failed its TLS requirement, for TLS reporting.
#[derive(Debug, Clone)]
pub struct TlsFailure {
    pub policy: herald_types::TlsPolicy,
    pub result: herald_types::TlsResultType,
}

/// A worker's report after one batch.
pub struct BatchDone {
    pub dest: Arc<str>,
    pub host: HostKey,
    pub delivered: usize,
    /// Time per copy in this batch (the batch's time divided by its copies).
    pub per_copy: Duration,
    /// Copies deferred in this batch; `Job::deferral` says why.
    pub deferred: Vec<Job>,
    /// A throttling reply or a dropped connection was seen: cut the budget.
    pub throttled: bool,
    /// Recipients of slow-lane copies that reached a final outcome.
    pub finished_slow: Vec<Box<str>>,
    /// Copies never tried (the batch stopped before them): back to the ready queue, no try
    /// charged.
    pub unsent: Vec<Job>,
    /// Copies whose MAIL was refused for rate: the provider's pace releases them again.
    pub paced: Vec<Job>,
    /// The copy whose body was in flight when the connection dropped (a mid-DATA drop).
    pub dropped: Vec<Job>,
    /// The host closed the connection (`421` at MAIL) after accepting this many messages on it.
    pub conn_cap: Option<usize>,
    /// How long each delivered copy that had been greylisted waited since it first was.
    pub greylist_passed: Vec<std::time::Duration>,
    /// The session broke because the host replied too slowly for the first pass (a tarpit).
    pub tarpit: bool,
}

/// Which queued copies a command is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// Every copy to this address (compared case-insensitively).
    Recipient(String),
    /// Every copy to this recipient domain.
    Domain(String),
    /// Every copy of this post (a shard handed back by a drain).
    Post(herald_types::PostId),
}

/// What to do with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Move waiting copies to the ready queue now; a destination marked down is tried again.
    RetryNow,
    /// Fail the copies with a 5.0.0 "given up by the operator" outcome (journaled, reported) and
    /// the cause [`FailureCause::OperatorGaveUp`] (never scored against the member).
    GiveUp,
}

/// A command and where to send how many copies it matched.
pub struct Command {
    pub selector: Selector,
    pub action: Action,
    pub reply: oneshot::Sender<u64>,
}

/// Messages to the actor from workers and the API (resolver tasks, the actor's own, use its
/// private channel: see `actor::routes`).
pub enum Ctrl {
    NeedWork {
        dest: Arc<str>,
        lane: LaneKind,
        /// Copies it may take at most (never more than `max_copies_per_batch`).
        max: usize,
        /// Copies accepted on this connection so far (a provider's learned messages per
        /// connection may end it).
        delivered_here: usize,
        reply: oneshot::Sender<Vec<Job>>,
    },
    Connected {
        dest: Arc<str>,
        host: HostKey,
        timings: ConnectTimings,
        failed: Vec<HostFailure>,
    },
    ConnectFailed {
        dest: Arc<str>,
        failed: Vec<HostFailure>,
        error: Reply,
        /// Some attempt failed because DANE demanded what the host did not give.
        dane_failed: bool,
        /// No egress source could be leased: the copies' deferral kind.
        local: Option<herald_types::DeferralKind>,
    },
    BatchDone(Box<BatchDone>),
    WorkerExit {
        dest: Arc<str>,
        lane: LaneKind,
    },
    Snapshot(SnapshotRequest, oneshot::Sender<QueueSnapshot>),
    /// An operator's retry-now or give-up (see `operator`).
    Operator(Command),
    /// New shaping rules (SIGHUP; see `operator::reshape`).
    Reshape(Vec<crate::ShapingRule>),
    /// The cluster's shared knowledge to apply; the reply is this node's (so nodes pace a
    /// provider as one sender, see `actor::knowledge`).
    Knowledge(
        knowledge::ClusterKnowledge,
        oneshot::Sender<knowledge::LocalKnowledge>,
    ),
}
