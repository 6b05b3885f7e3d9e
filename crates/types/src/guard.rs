//! The list-post guards' vocabulary: why a post to a list was stopped before
//! fan-out, and what the list does about it. The guard crate decides, enqueue acts, telemetry
//! counts, all in these words (STYLE rule 17: our verdicts are data, never text).

use serde::{Deserialize, Serialize};

/// Why a list post tripped a guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardTrip {
    /// `Auto-Submitted:` other than `no` (RFC 3834 §5): a machine wrote it.
    AutoSubmitted,
    /// `Precedence: bulk`, `junk` or `list`: bulk or list mail, never a person's post.
    Precedence,
    /// Our own `List-Id` or an `X-Loop` naming this list: one of our copies came back.
    Loop,
    /// Vacation / out-of-office marks (`X-Autoreply`, `Precedence: auto_reply`, an
    /// "Out of Office:" subject, ...).
    AutoReply,
    /// The sender passed the list's `max_posts_per_hour`.
    PostRate,
    /// `From:` names a member or moderator, but the arrival check did not find it authentic
    /// (no DMARC pass for the From domain) on a list that requires it (`require_aligned_from`).
    Unauthenticated,
    /// The sender (envelope at RCPT, or `From:` at the end of DATA) matches a ban of the list or
    /// a global one. Always refused, whatever `guard_action` says.
    Banned,
}

impl GuardTrip {
    /// Every variant's word, in [`GuardTrip::index`] order (the metric's label values).
    pub const WORDS: [&'static str; 7] = [
        "auto_submitted",
        "precedence",
        "loop",
        "auto_reply",
        "post_rate",
        "unauthenticated",
        "banned",
    ];

    /// Position in [`GuardTrip::WORDS`].
    pub fn index(self) -> usize {
        match self {
            GuardTrip::AutoSubmitted => 0,
            GuardTrip::Precedence => 1,
            GuardTrip::Loop => 2,
            GuardTrip::AutoReply => 3,
            GuardTrip::PostRate => 4,
            GuardTrip::Unauthenticated => 5,
            GuardTrip::Banned => 6,
        }
    }

    /// The word in logs and the metric label.
    pub fn word(self) -> &'static str {
        Self::WORDS[self.index()]
    }

    /// The hold reason a moderator reads (and the SMTP text when the list rejects).
    pub fn reason(self) -> &'static str {
        match self {
            GuardTrip::AutoSubmitted => "automatic mail (Auto-Submitted)",
            GuardTrip::Precedence => "bulk or list mail (Precedence)",
            GuardTrip::Loop => "mail loop: a copy from this list came back",
            GuardTrip::AutoReply => "auto-reply (vacation or out of office)",
            GuardTrip::PostRate => "the sender posted more than max_posts_per_hour",
            GuardTrip::Unauthenticated => "unauthenticated sender",
            GuardTrip::Banned => "the sender is banned",
        }
    }
}

/// What a list does with a post that tripped a guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuardAction {
    /// Held for moderation with the reason (nothing is lost; a moderator may approve it).
    #[default]
    Hold,
    /// Refused at the end of DATA (`550 5.7.1` with the reason): the sending MTA keeps it and
    /// tells its sender, or drops it when it came from the null sender (auto-replies do).
    Reject,
}

/// What the content filter (rspamd) made of a list post: the label of
/// `herald_content_filter_total{action}`. `Failed` is a post held because the filter could not
/// answer (timeout, connection refused, an answer that does not parse): held, never lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterVerdict {
    /// Passed on to the posting authorization and fan-out.
    Accept,
    /// Held for moderation with the filter's reason.
    Hold,
    /// Refused at the end of DATA with `550 5.7.1`.
    Reject,
    /// The filter did not answer usably; the post is held with the reason.
    Failed,
}

impl FilterVerdict {
    /// Every variant, in [`FilterVerdict::index`] order.
    pub const ALL: [FilterVerdict; 4] = [
        FilterVerdict::Accept,
        FilterVerdict::Hold,
        FilterVerdict::Reject,
        FilterVerdict::Failed,
    ];

    /// Position in [`FilterVerdict::ALL`] (counter arrays).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The word in logs and the metric label.
    pub fn word(self) -> &'static str {
        match self {
            FilterVerdict::Accept => "accept",
            FilterVerdict::Hold => "hold",
            FilterVerdict::Reject => "reject",
            FilterVerdict::Failed => "failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_the_index() {
        for t in [
            GuardTrip::AutoSubmitted,
            GuardTrip::Precedence,
            GuardTrip::Loop,
            GuardTrip::AutoReply,
            GuardTrip::PostRate,
            GuardTrip::Unauthenticated,
            GuardTrip::Banned,
        ] {
            assert_eq!(GuardTrip::WORDS[t.index()], t.word());
        }
    }

    #[test]
    fn filter_verdicts_follow_the_index() {
        for (i, v) in FilterVerdict::ALL.iter().enumerate() {
            assert_eq!(v.index(), i);
        }
    }
}
