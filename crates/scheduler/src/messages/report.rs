//! What stages tell the report loop ([`Report`]): a post's expansion total, and each attempt's
//! outcome detached from its job ([`OutcomeReport`]) so the job can go back to its queue. Made
//! by the workers (a connection's outcomes), the actor (outcomes decided without a connection)
//! and expansion; consumed by `outcomes`.

use super::job::Job;
use herald_types::{Address, FailureCause, ListId, MemberId, PostId, RcptOutcome};
use herald_types::{DaneNote, MtaStsNote};

/// One attempt's result, detached from the job so the job can go back to its queue.
pub struct OutcomeReport {
    pub post: PostId,
    /// The list the copy was for (the bounce stage scores the member on it).
    pub list: ListId,
    /// The recipient as an address (`rcpt` is its text for the log).
    pub rcpt_address: Address,
    pub accepted_at_ms: u64,
    pub member: MemberId,
    pub rcpt: String,
    pub relay: String,
    pub xdelay_ms: u64,
    pub tries: u32,
    pub outcome: RcptOutcome,
    /// Why a `Failed` outcome failed (`None` otherwise): what the bounce stage scores. Set by
    /// the constructor that made the report (see [`OutcomeReport::new`] and
    /// [`OutcomeReport::failed`]), never read back from the reply.
    pub cause: Option<FailureCause>,
    /// The connection's TLS for the delivery log (`TLSv1.3/verified`, `TLSv1.3/unverified`,
    /// `none` for plaintext); `None` when no connection was made.
    pub tls: Option<String>,
    /// How the recipient domain's MTA-STS policy applied (`mta-sts=` in the log).
    pub mta_sts: Option<MtaStsNote>,
    /// What DANE concluded (`dane=` in the log).
    pub dane: Option<DaneNote>,
    /// The egress source address the copy left from (`src=` in the log).
    pub source: Option<std::net::IpAddr>,
    /// When the report was made: the report loop measures how long it waited in the channel.
    pub queued_at: std::time::Instant,
    /// The worker journaled the final state itself (see `workers/mod.rs`); the report loop only
    /// journals outcomes the scheduler decided without a connection (expiry, give-up, no route).
    pub journaled: bool,
}

impl OutcomeReport {
    /// A report of what a receiving server said: a `Failed` outcome here is its permanent
    /// reply ([`FailureCause::Remote`]). The scheduler's own final verdicts use
    /// [`OutcomeReport::failed`].
    pub fn new(job: &Job, outcome: RcptOutcome, relay: String, xdelay_ms: u64) -> OutcomeReport {
        let cause = match &outcome {
            RcptOutcome::Failed(reply) => Some(FailureCause::Remote(reply.clone())),
            RcptOutcome::Delivered(_) | RcptOutcome::Deferred(_) => None,
        };
        OutcomeReport {
            post: job.post.id,
            list: job.post.list_id,
            rcpt_address: job.member.address.clone(),
            accepted_at_ms: job.post.accepted_at_ms,
            member: job.member.id,
            rcpt: job.member.address.to_string(),
            relay,
            xdelay_ms,
            tries: job.tries,
            outcome,
            cause,
            tls: None,
            mta_sts: None,
            dane: None,
            source: None,
            queued_at: std::time::Instant::now(),
            journaled: false,
        }
    }

    /// A final failure the scheduler decided without a connection (expiry, the operator's
    /// give-up, no route): the outcome carries the cause's reply for the log and the journal.
    pub fn failed(job: &Job, cause: FailureCause) -> OutcomeReport {
        let mut report =
            OutcomeReport::new(job, RcptOutcome::Failed(cause.reply()), "none".into(), 0);
        report.cause = Some(cause);
        report
    }
}

/// How a recipient domain's TLS policies applied to an attempt (`mta-sts=`, `dane=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyNotes {
    pub mta_sts: Option<MtaStsNote>,
    pub dane: Option<DaneNote>,
}

/// What stages tell the report loop.
pub enum Report {
    /// Expansion finished: `recipients` in all, of which `already_done` were final before a
    /// restart.
    Expanded {
        post: PostId,
        recipients: u64,
        already_done: u64,
    },
    Outcome(Box<OutcomeReport>),
}
