//! What a bounce says, as data: the [`BounceKind`] classes and the [`Verdict`] one bounce message
//! (or one failed SMTP transaction of ours) yields.
//!
//! Only `Hard`, `Soft` and `Expired` ever count against a member; `Policy` counts against the
//! list's reputation; every other kind is recorded and never counted.

use herald_types::{Address, EnhancedStatus};
use serde::{Deserialize, Serialize};

/// The class of a bounce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BounceKind {
    /// The mailbox does not exist / is disabled (5.1.x, "user unknown"): weight 1.0.
    Hard,
    /// A problem that may clear (mailbox full, 4.x.x given up, 5.2.x, 5.3.x, 5.4.x): weight 0.5.
    Soft,
    /// Herald tried for the list's whole retry period and the receiving side never took the
    /// copy (hung, refusing, deferring forever): weight 0.5, a soft failure of its own kind so
    /// an address that never answers leaves the list under the same policy as one that bounces,
    /// and its history says why.
    Expired,
    /// `Action: delayed` or "will retry" notices: never counted.
    Delayed,
    /// Out-of-office and other auto-replies: never counted.
    AutoReply,
    /// Spam / policy / reputation rejections (5.7.x, "blocked", "listed"): recorded against the
    /// list, never against the member.
    Policy,
    /// Success notices (`Action: delivered | relayed | expanded`): never counted.
    Informational,
    /// Nothing recognizable: kept for an administrator.
    Unrecognized,
}

impl BounceKind {
    /// Score added to the member (before the once-per-day rule).
    pub fn weight(self) -> f64 {
        match self {
            BounceKind::Hard => 1.0,
            BounceKind::Soft | BounceKind::Expired => 0.5,
            _ => 0.0,
        }
    }

    /// The name stored in the directory and shown by the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            BounceKind::Hard => "hard",
            BounceKind::Soft => "soft",
            BounceKind::Expired => "expired",
            BounceKind::Delayed => "delayed",
            BounceKind::AutoReply => "auto_reply",
            BounceKind::Policy => "policy",
            BounceKind::Informational => "informational",
            BounceKind::Unrecognized => "unrecognized",
        }
    }

    /// Inverse of [`BounceKind::as_str`].
    pub fn parse(s: &str) -> Option<BounceKind> {
        Some(match s {
            "hard" => BounceKind::Hard,
            "soft" => BounceKind::Soft,
            "expired" => BounceKind::Expired,
            "delayed" => BounceKind::Delayed,
            "auto_reply" => BounceKind::AutoReply,
            "policy" => BounceKind::Policy,
            "informational" => BounceKind::Informational,
            "unrecognized" => BounceKind::Unrecognized,
            _ => return None,
        })
    }
}

/// What one bounce message says.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub kind: BounceKind,
    /// The failed recipient the report names (DSN `Final-Recipient`, or an address found next to
    /// the error text). The bounce stage prefers the VERP-decoded member over this.
    pub recipient: Option<Address>,
    /// The enhanced status, if the report or the text carried one.
    pub status: Option<EnhancedStatus>,
    /// A short excerpt of the diagnostic (at most [`MAX_DIAGNOSTIC_CHARS`], control characters
    /// removed), for `herald bounces`.
    pub diagnostic: String,
}

/// Longest diagnostic excerpt kept per bounce.
pub const MAX_DIAGNOSTIC_CHARS: usize = 200;

/// One line, printable, bounded: safe to store and to show in a terminal.
pub(crate) fn excerpt(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_DIAGNOSTIC_CHARS));
    let mut last_space = true;
    for c in text.chars() {
        if out.chars().count() >= MAX_DIAGNOSTIC_CHARS {
            break;
        }
        if c.is_whitespace() || c.is_control() {
            if !last_space {
                out.push(' ');
            }
            last_space = true;
        } else {
            out.push(c);
            last_space = false;
        }
    }
    out.trim_end().to_string()
}

/// The class an enhanced status code implies, for a failure (not a delay).
pub fn kind_of_status(status: EnhancedStatus) -> BounceKind {
    match (status.class, status.subject) {
        (2, _) => BounceKind::Informational,
        (4, _) => BounceKind::Soft,
        (5, 7) => BounceKind::Policy,
        (5, 1) => BounceKind::Hard,
        // 5.0.0 is "other": used by many MTAs for user unknown; phrases refine it (see heuristic).
        (5, 0) => BounceKind::Hard,
        // 5.2.x mailbox (full, disabled temporarily), 5.3.x system, 5.4.x network, 5.5.x/5.6.x
        // protocol and content: the mailbox may well exist.
        (5, 2) if status.detail == 1 => BounceKind::Hard, // 5.2.1 mailbox disabled
        _ => BounceKind::Soft,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_is_one_bounded_line() {
        let long = "a\r\nb\tc ".repeat(500);
        let e = excerpt(&long);
        assert!(e.chars().count() <= MAX_DIAGNOSTIC_CHARS);
        assert!(!e.contains('\n') && !e.contains('\r') && !e.contains('\t'));
        assert!(e.starts_with("a b c a"));
    }

    #[test]
    fn kinds_round_trip_and_statuses_classify() {
        for k in [
            BounceKind::Hard,
            BounceKind::Soft,
            BounceKind::Expired,
            BounceKind::Delayed,
            BounceKind::AutoReply,
            BounceKind::Policy,
            BounceKind::Informational,
            BounceKind::Unrecognized,
        ] {
            assert_eq!(BounceKind::parse(k.as_str()), Some(k));
        }
        let s = |t: &str| kind_of_status(EnhancedStatus::parse(t).expect("status"));
        assert_eq!(s("5.1.1"), BounceKind::Hard);
        assert_eq!(s("5.7.1"), BounceKind::Policy);
        assert_eq!(s("5.2.2"), BounceKind::Soft);
        assert_eq!(s("4.4.7"), BounceKind::Soft);
    }
}
