//! Why a copy failed for good, as data: the vocabulary the scheduler hands to the bounce stage.
//!
//! Place in the flow: the scheduler decides a copy's final failure (a worker reads a 5xx from the
//! receiving server; the actor itself expires a copy, fails it for a domain that has no route,
//! or gives it up on the operator's command) and its report loop sends a [`FailedCopy`] to the
//! bounce stage, which scores the member from the [`FailureCause`] variant. Only
//! [`FailureCause::Remote`] is somebody else's verdict, to be read with the bounce rules; the
//! other variants are Herald's own verdicts and say exactly what happened, so nothing downstream
//! re-derives them from SMTP text (STYLE rule 17: that is how an operator's give-up once became a
//! hard bounce against every member it touched).
//!
//! Invariant: every cause has the one SMTP reply written to the delivery log and the journal
//! ([`FailureCause::reply`]); `RcptOutcome::Failed` carries that reply, unchanged.

use crate::{Address, EnhancedStatus, ListId, PostId, Reply};

/// Why one copy failed permanently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureCause {
    /// The receiving server refused the copy with a permanent (5xx) reply, or the SMTP session
    /// refused to send it against the server's advertised limits. This is the only cause read
    /// with the bounce rules: the reply is the remote's word about the mailbox.
    Remote(Reply),
    /// The copy was still undelivered after the list's maximum age. Herald stopped trying; the
    /// receiving side never said the mailbox is bad. `last_reply` is the last deferral, if any,
    /// for the operator.
    Expired { last_reply: Option<Reply> },
    /// The list operator gave up on the copy (`herald stragglers --action give-up`). A decision
    /// about our queue, not about the member.
    OperatorGaveUp,
    /// DNS says the recipient's domain cannot receive mail: `reply` is the synthetic reply the
    /// delivery log shows (it names the domain), `why` is what DNS said.
    NoRoute { why: NoRoute, reply: Reply },
}

/// What DNS said about a recipient domain that has no route, as far as bounce scoring cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoute {
    /// NXDOMAIN, or a name that is not a valid domain: the address cannot exist.
    NoSuchDomain,
    /// A null MX (RFC 7505): the domain says it accepts no mail at all.
    NullMx,
    /// The domain exists and has mail exchangers, but none of them has an address: a
    /// misconfiguration its owner may well fix; the mailbox may exist.
    NoMailHost,
}

impl FailureCause {
    /// The SMTP reply recorded for this failure in the delivery log and the journal.
    pub fn reply(&self) -> Reply {
        match self {
            FailureCause::Remote(reply) | FailureCause::NoRoute { reply, .. } => reply.clone(),
            FailureCause::Expired { .. } => expired_reply(),
            FailureCause::OperatorGaveUp => given_up_reply(),
        }
    }

    /// The name used in logs and by the bounce stage (`remote`, `expired`, `operator_gave_up`,
    /// `no_route`).
    pub fn as_str(&self) -> &'static str {
        match self {
            FailureCause::Remote(_) => "remote",
            FailureCause::Expired { .. } => "expired",
            FailureCause::OperatorGaveUp => "operator_gave_up",
            FailureCause::NoRoute { .. } => "no_route",
        }
    }
}

/// The reply logged for an expired copy (RFC 3463 5.4.7: delivery time expired).
pub fn expired_reply() -> Reply {
    Reply::new(
        550,
        Some(EnhancedStatus::new(5, 4, 7)),
        "delivery time expired: gave up after the list's maximum age",
    )
}

/// The reply logged for a copy the operator gave up on.
pub fn given_up_reply() -> Reply {
    Reply::new(
        550,
        Some(EnhancedStatus::new(5, 0, 0)),
        "given up by the list operator",
    )
}

/// A copy that failed for good, handed by the scheduler's report loop to the bounce stage
/// (STYLE rule 6: the bounce stage consumes outcomes, nothing parses logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedCopy {
    /// The list the copy was for: the member is scored on it (`ListId::NONE` for server mail).
    pub list: ListId,
    pub post: PostId,
    pub rcpt: Address,
    pub cause: FailureCause,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_has_the_reply_the_log_shows() {
        let remote = Reply::new(550, EnhancedStatus::parse("5.1.1"), "no such user");
        assert_eq!(FailureCause::Remote(remote.clone()).reply(), remote);
        let expired = FailureCause::Expired {
            last_reply: Some(Reply::new(
                451,
                EnhancedStatus::parse("4.7.1"),
                "greylisted",
            )),
        };
        assert_eq!(expired.reply(), expired_reply());
        assert_eq!(expired.reply().enhanced, Some(EnhancedStatus::new(5, 4, 7)));
        let gave_up = FailureCause::OperatorGaveUp.reply();
        assert_eq!(
            (gave_up.code, gave_up.enhanced),
            (550, Some(EnhancedStatus::new(5, 0, 0)))
        );
        let nx = Reply::new(
            550,
            EnhancedStatus::parse("5.1.2"),
            "domain x.test does not exist",
        );
        let cause = FailureCause::NoRoute {
            why: NoRoute::NoSuchDomain,
            reply: nx.clone(),
        };
        assert_eq!(cause.reply(), nx);
    }
}
