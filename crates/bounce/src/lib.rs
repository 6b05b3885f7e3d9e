//! herald-bounce: the bounce stage. Turns what comes back from the Internet into member state.
//!
//! Place in the flow (DESIGN.md: "bounces in ─► bounce: VERP decode, DSN parse, score ─► lists
//! store"): inbound spools mail to `<list>-bounces[+<verp>]@…` as `PostKind::Bounce`; the
//! scheduler's report loop hands over every copy that failed for good as data
//! ([`herald_types::FailedCopy`], received by [`stage`]), with its [`FailureCause`]. Both become a
//! [`Verdict`] ([`classify_message`] / [`classify_failure`]) and then a bounce event and score,
//! written through the member lifecycle ([`herald_lists::Membership::record_bounce`], one
//! directory transaction, with this crate's rule, [`score`]); complaints go through it too
//! (`complaint.rs`). This crate does not depend on the scheduler: the failure vocabulary
//! lives in `herald-types`; it depends on `lists`, which sits below it, for that service.
//!
//! Herald's own verdicts are scored by their cause, never by reading our synthetic reply's text
//! (STYLE rule 17): an expired copy counts as a soft failure of its own kind (`expired`), a copy
//! the operator gave up on is not scored at all, and a domain with no route is scored by what
//! DNS said (see [`classify_failure`]).
//!
//! Classification (see [`BounceKind`]): hard 1.0, soft and expired 0.5; delayed, auto-replies and success
//! notices never count; spam/policy/reputation rejections count against the list's reputation,
//! never the member; anything unrecognized is kept (the spooled bounce stays live and is listed
//! for an administrator).
//!
//! Invariants: a bounce can only ever change the member it names through VERP (or, for the
//! plain `-bounces` address, the DSN's final recipient if that address is a member of the same
//! list); a member's score rises at most once per day, so a bounce bomb of any size moves one
//! member by at most 1.0 a day and touches no other member.
//!
//! Limits: see [`MAX_BOUNCE_BYTES`], [`MAX_DSN_RECIPIENTS`], [`heuristic::MAX_SCAN_BYTES`].
//!
//! SECURITY: everything here reads hostile input. The parser never panics (proptest in the
//! normal suite, `fuzz/fuzz_targets/bounce_parse.rs` for cargo-fuzz) and allocates only in
//! proportion to the bounded input. VERP addresses are not signed: somebody who knows a member's
//! address can forge bounces for that member, which the once-per-day rule slows to one point a
//! day (a known gap: signed VERP would close it).

pub mod complaint;
mod dsn;
mod error;
pub mod heuristic;
mod kind;
mod score;
pub mod stage;

pub use dsn::{classify_message, parse_fields, DsnRecipient, MAX_BOUNCE_BYTES, MAX_DSN_RECIPIENTS};
pub use kind::{kind_of_status, BounceKind, Verdict, MAX_DIAGNOSTIC_CHARS};
pub use score::score;

use herald_types::{FailureCause, NoRoute, Reply};

/// How a copy's final failure counts against its member, decided by its cause; `None`: not a
/// bounce at all, the member's score must not move.
///
/// - `Remote`: the receiving server's word about the mailbox, read like a DSN ([`classify_reply`]).
/// - `Expired`: Herald tried for the list's whole retry period (`max_age_secs`) and the
///   receiving side never took the copy: hung, refusing, or deferring forever. Scored as a soft
///   failure of its own kind ([`BounceKind::Expired`], 0.5): the Postfix or sendmail that gave
///   up on it would have sent a DSN to the list's VERP address, which would count there too, so
///   a member whose host never answers is disabled under the list's bounce policy (the same
///   threshold, once-per-day rule and staleness as any bounce) instead of holding copies in the
///   spool for every post forever.
/// - `OperatorGaveUp`: a decision about our queue, not about the member. Not scored.
/// - `NoRoute`: DNS's answer is a fact about the address, so an experienced list admin scores it
///   like the matching remote reply would be: a domain that does not exist (NXDOMAIN, invalid
///   name) or that publishes a null MX (RFC 7505: it accepts no mail) cannot hold this mailbox —
///   hard; MX hosts without addresses are a misconfiguration its owner may well fix while the
///   mailbox exists — soft. (These are the kinds their synthetic replies, 5.1.2, 5.1.10 and
///   5.4.4, always had; now they follow from the variant, not the text.)
pub fn classify_failure(cause: &FailureCause) -> Option<BounceKind> {
    match cause {
        FailureCause::Remote(reply) => Some(classify_reply(reply)),
        FailureCause::Expired { .. } => Some(BounceKind::Expired),
        FailureCause::OperatorGaveUp => None,
        FailureCause::NoRoute { why, .. } => Some(match why {
            NoRoute::NoSuchDomain | NoRoute::NullMx => BounceKind::Hard,
            NoRoute::NoMailHost => BounceKind::Soft,
        }),
    }
}

/// Classifies a receiving server's permanent reply to one of our SMTP transactions, with the
/// same rules as a DSN's status and diagnostic. Only for replies from elsewhere: Herald's own
/// verdicts go through [`classify_failure`].
pub fn classify_reply(reply: &Reply) -> BounceKind {
    let text_kind = heuristic::classify_text(&reply.text).map(|(k, _)| k);
    match (reply.enhanced, text_kind) {
        (_, Some(BounceKind::Policy)) => BounceKind::Policy,
        (Some(s), _) if s.class == 5 && s.subject == 7 => BounceKind::Policy,
        (Some(s), Some(k)) if s.subject == 0 => k,
        (Some(s), _) => kind_of_status(s),
        (None, Some(k)) => k,
        (None, None) if reply.is_permanent() && matches!(reply.code, 550 | 551 | 553) => {
            BounceKind::Hard
        }
        (None, None) => BounceKind::Soft,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_types::EnhancedStatus;

    #[test]
    fn our_own_failures_classify_like_reports() {
        let r = |code, st: &str, text: &str| {
            classify_reply(&Reply::new(code, EnhancedStatus::parse(st), text))
        };
        assert_eq!(r(550, "5.1.1", "no such user"), BounceKind::Hard);
        assert_eq!(r(550, "5.7.1", "rejected"), BounceKind::Policy);
        assert_eq!(r(554, "5.0.0", "blocked as spam"), BounceKind::Policy);
        assert_eq!(r(552, "5.2.2", "mailbox full"), BounceKind::Soft);
        assert_eq!(r(450, "4.2.0", "try later"), BounceKind::Soft);
        assert_eq!(r(550, "", "nope"), BounceKind::Hard);
    }

    #[test]
    fn herald_s_own_verdicts_are_scored_by_cause_not_text() {
        // The operator's give-up reads like "550 5.0.0" (a hard bounce by the reply rules): it
        // may never move the member's score. Expiry reads like "550 5.4.7" (soft by the reply
        // rules) but is its own kind, whatever the last deferral said.
        assert_eq!(classify_failure(&FailureCause::OperatorGaveUp), None);
        let unknown_then = Reply::new(550, EnhancedStatus::parse("5.1.1"), "no such user");
        for last_reply in [None, Some(unknown_then)] {
            let expired = FailureCause::Expired { last_reply };
            assert_eq!(classify_failure(&expired), Some(BounceKind::Expired));
        }
        assert_eq!(BounceKind::Expired.weight(), BounceKind::Soft.weight());
        let unknown = Reply::new(550, EnhancedStatus::parse("5.1.1"), "no such user");
        assert_eq!(
            classify_failure(&FailureCause::Remote(unknown)),
            Some(BounceKind::Hard)
        );
    }

    #[test]
    fn no_route_keeps_the_kinds_its_replies_always_had() {
        // The resolver's synthetic replies (herald-routing `ResolveError::synthetic_reply`):
        // the variant now decides, and agrees with what the reply rules gave before.
        let cases = [
            (
                NoRoute::NoSuchDomain,
                550,
                "5.1.2",
                "domain gone.test does not exist",
            ),
            (
                NoRoute::NullMx,
                556,
                "5.1.10",
                "gone.test does not accept mail (null MX)",
            ),
            (
                NoRoute::NoMailHost,
                550,
                "5.4.4",
                "no address found for the mail exchangers of gone.test",
            ),
        ];
        for (why, code, status, text) in cases {
            let reply = Reply::new(code, EnhancedStatus::parse(status), text);
            let before = classify_reply(&reply);
            let cause = FailureCause::NoRoute { why, reply };
            assert_eq!(classify_failure(&cause), Some(before), "{why:?}");
        }
    }
}
