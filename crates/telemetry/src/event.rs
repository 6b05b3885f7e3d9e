//! The event taxonomy. Each variant is something an operator may want to count, log or plot.

use herald_types::{Address, DaneNote, MemberId, MtaStsNote, PostId, RcptOutcome};

/// Something that happened in Herald.
#[derive(Debug, Clone)]
pub enum Event {
    /// A post is durably spooled (or recovered after a restart, `recovered: true`).
    PostAccepted {
        post: PostId,
        list: Address,
        size: usize,
        received_at_ms: u64,
        recovered: bool,
    },
    /// Fan-out finished expanding the member list: `recipients` copies will be attempted
    /// (`already_done` of them were finished before a restart).
    PostExpanded {
        post: PostId,
        recipients: u64,
        already_done: u64,
    },
    /// One delivery attempt for one recipient ended.
    Attempt(Box<Attempt>),
    /// Every recipient of the post has a final outcome.
    PostCompleted { post: PostId },
    /// A scheduling decision: host state, lane move, throttling, greylisting, expiry.
    Scheduler(Box<crate::scheduling::SchedulerEvent>),
    /// Mail to postmaster (RFC 5321 §4.5.1) was stored and handled: forwarded to the operators
    /// or kept only, and why.
    Postmaster(Box<PostmasterMail>),
}

/// One stored postmaster message and what its arrival led to.
#[derive(Debug, Clone)]
pub struct PostmasterMail {
    /// The stored message (`herald postmaster show <post>`).
    pub post: PostId,
    /// The postmaster address it was sent to.
    pub rcpt: Address,
    /// The envelope sender; `None` for the null reverse path.
    pub from: Option<Address>,
    pub size: usize,
    pub forward: PostmasterForward,
}

/// What became of a postmaster message at arrival. It is stored in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostmasterForward {
    /// Wrapped and spooled for the operators as post `copy` (its delivery is logged under it).
    Forwarded { copy: PostId },
    /// It carries `Auto-Submitted:` other than `no` (RFC 3834): not forwarded, so automatic
    /// mail cannot start a conversation between machines.
    AutoSubmitted,
    /// It carries our own loop marker: a forward came back.
    Loop,
    /// `postmaster.forward` is empty: kept for the operator only.
    NotConfigured,
    /// The forward could not be spooled; it is tried again at the next start.
    Failed,
}

impl PostmasterForward {
    /// Every variant's word, in [`PostmasterForward::index`] order (the metric's counters).
    pub const WORDS: [&'static str; 5] = [
        "forwarded",
        "auto_submitted",
        "loop",
        "not_configured",
        "failed",
    ];

    /// Position in [`PostmasterForward::WORDS`].
    pub fn index(self) -> usize {
        match self {
            PostmasterForward::Forwarded { .. } => 0,
            PostmasterForward::AutoSubmitted => 1,
            PostmasterForward::Loop => 2,
            PostmasterForward::NotConfigured => 3,
            PostmasterForward::Failed => 4,
        }
    }

    /// The word in the delivery log and the metric label.
    pub fn word(self) -> &'static str {
        Self::WORDS[self.index()]
    }
}

/// The facts of one attempt: what the delivery log line and the metrics are made of.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub post: PostId,
    pub member: MemberId,
    pub rcpt: String,
    /// `mx.example.com[127.1.0.5]:25`, or `none` when no connection was made.
    pub relay: String,
    /// When the post was accepted (ms since the epoch): `delay=` is measured from it.
    pub accepted_at_ms: u64,
    /// Time spent in this attempt's SMTP transaction (ms): `xdelay=`.
    pub xdelay_ms: u64,
    /// 1 for the first attempt.
    pub tries: u32,
    pub outcome: RcptOutcome,
    /// The connection's TLS: `TLSv1.3/verified`, `TLSv1.3/unverified` or `none` (plaintext);
    /// `None` when no connection was made (the log line then has no `tls=`).
    pub tls: Option<String>,
    /// Whether the recipient domain's MTA-STS policy applied, and how (`mta-sts=` in the log);
    /// `None` when it has none (or MTA-STS is off).
    pub mta_sts: Option<MtaStsNote>,
    /// What DANE concluded for the attempt (`dane=` in the log); `None` when DANE is off, or
    /// when no connection was made and DANE was not why.
    pub dane: Option<DaneNote>,
    /// The local source address the connection left from (`src=` in the log), when an egress
    /// source was bound; `None` when the system chose it or no connection was made.
    pub source: Option<std::net::IpAddr>,
}
