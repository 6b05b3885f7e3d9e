//! herald-bounce: the bounce stage. Turns what comes back from the Internet into member state.
//!
//! Place in the flow (DESIGN.md: "bounces in ─► bounce: VERP decode, DSN parse, score ─► lists
//! store"): inbound spools mail to `<list>-bounces[+<verp>]@…` as `PostKind::Bounce`; the
//! scheduler's report loop hands over our own SMTP sessions' permanent failures as data
//! (`herald_scheduler::FailedCopy`, received by [`stage`]). Both become a [`Verdict`] ([`classify_message`] / [`classify_reply`]) and then a
//! bounce event and score in the directory ([`herald_directory::Directory::apply_bounce`]).
//!
//! Classification (see [`BounceKind`]): hard 1.0, soft 0.5; delayed, auto-replies and success
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

mod dsn;
pub mod heuristic;
mod kind;
pub mod stage;

pub use dsn::{classify_message, parse_fields, DsnRecipient, MAX_BOUNCE_BYTES, MAX_DSN_RECIPIENTS};
pub use kind::{kind_of_status, BounceKind, Verdict, MAX_DIAGNOSTIC_CHARS};

use herald_types::Reply;

/// Classifies the final reply of one of our own failed SMTP transactions, with the same rules
/// as a DSN's status and diagnostic.
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
    fn expiry_counts_as_a_soft_bounce() {
        // The scheduler gives up on a copy older than the list's maximum age with this reply
        // (issue 4): the member's mailbox may be fine, so it must score as soft, never hard.
        let expired = Reply::new(
            550,
            EnhancedStatus::parse("5.4.7"),
            "delivery time expired: gave up after the list's maximum age",
        );
        assert_eq!(classify_reply(&expired), BounceKind::Soft);
    }
}
