//! Reading a temporary reply: is the server throttling us, greylisting, or just failing? The
//! answer decides what happens next (see the actor): throttling slows the destination and
//! retries (never a bounce), greylisting retries after the interval the server implies, other
//! failures follow the retry schedule.
//!
//! Pure functions over [`Reply`] values; the text comes from hostile servers, so only bounded
//! substring checks and a bounded number parse are done on it.

use herald_types::DeferralKind;
use herald_types::Reply;
use std::time::Duration;

/// Longest reply text looked at (longer texts are cut: the signal words come first).
const MAX_SCAN: usize = 512;
/// Implied greylisting intervals are clamped to this range.
const MIN_IMPLIED: Duration = Duration::from_secs(1);
const MAX_IMPLIED: Duration = Duration::from_secs(3600);

/// Words that signal greylisting.
const GREYLIST_WORDS: &[&str] = &[
    "greylist",
    "graylist",
    "grey-list",
    "gray-list",
    "grey list",
];
/// Words that signal a rate limit or a connection limit.
const THROTTLE_WORDS: &[&str] = &[
    "rate limit",
    "rate-limit",
    "ratelimit",
    "too many",
    "too fast",
    "too quickly",
    "throttl",
    "slow down",
    "temporarily rate",
    "unusual rate",
    "exceeded",
];

/// Classifies a temporary reply (a 4xx to a command, or the reply that ended a session).
pub fn classify(reply: &Reply) -> DeferralKind {
    let text = lower_prefix(&reply.text);
    if GREYLIST_WORDS.iter().any(|w| text.contains(w)) {
        return DeferralKind::Greylist;
    }
    let status = reply
        .enhanced
        .map(|e| (e.class, e.subject, e.detail))
        .unwrap_or((0, 0, 0));
    // 4.7.28 (Gmail, RFC 7372 neighbour): "unusual rate"; 4.3.2 / 4.7.0 with 421: busy.
    if status == (4, 7, 28) || reply.code == 421 {
        return DeferralKind::Throttle;
    }
    let rate_word = THROTTLE_WORDS.iter().any(|w| text.contains(w));
    if matches!(reply.code, 450 | 451 | 452 | 454) && rate_word {
        return DeferralKind::Throttle;
    }
    // 452 4.5.3 (too many recipients) and 452 4.3.1 (resources) ask us to send less at once.
    if reply.code == 452 && matches!(status, (4, 5, 3) | (4, 3, 1)) {
        return DeferralKind::Throttle;
    }
    // A bare "451 4.7.1 … try again later" is the classic greylisting answer.
    if reply.code == 451 && status == (4, 7, 1) && text.contains("try again later") {
        return DeferralKind::Greylist;
    }
    DeferralKind::Other
}

/// The retry interval a greylisting reply implies ("retry in 300 seconds", "wait 5 minutes"),
/// clamped to 1 s – 1 h; `None` when the text names none.
pub fn implied_interval(reply: &Reply) -> Option<Duration> {
    let text = lower_prefix(&reply.text);
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() && i - start < 6 {
            i += 1;
        }
        // A digit run glued to a dot is part of a status code or an address, not a duration.
        let glued = (start > 0 && bytes[start - 1] == b'.') || bytes.get(i) == Some(&b'.');
        let n: u64 = text[start..i].parse().unwrap_or(0);
        let unit = text[i..].trim_start();
        let secs = if unit.starts_with("min") {
            n.saturating_mul(60)
        } else if unit.starts_with("sec") || unit.starts_with("s ") || unit == "s" {
            n
        } else {
            continue;
        };
        if !glued && secs > 0 {
            return Some(Duration::from_secs(secs).clamp(MIN_IMPLIED, MAX_IMPLIED));
        }
    }
    None
}

fn lower_prefix(text: &str) -> String {
    let mut end = text.len().min(MAX_SCAN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_types::EnhancedStatus;

    fn r(code: u16, e: Option<(u8, u16, u16)>, text: &str) -> Reply {
        Reply::new(code, e.map(|(c, s, d)| EnhancedStatus::new(c, s, d)), text)
    }

    #[test]
    fn throttling_replies() {
        let gmail = r(
            421,
            Some((4, 7, 28)),
            "Our system has detected an unusual rate of mail",
        );
        assert_eq!(classify(&gmail), DeferralKind::Throttle);
        let sim = r(
            421,
            Some((4, 7, 28)),
            "Too many messages on this connection, try again later",
        );
        assert_eq!(classify(&sim), DeferralKind::Throttle);
        let rcpts = r(452, Some((4, 5, 3)), "Too many recipients");
        assert_eq!(classify(&rcpts), DeferralKind::Throttle);
        let quick = r(
            450,
            Some((4, 2, 1)),
            "The user is receiving mail too quickly",
        );
        assert_eq!(classify(&quick), DeferralKind::Throttle);
        let yahoo = r(
            421,
            Some((4, 7, 0)),
            "[TSS04] Messages temporarily deferred",
        );
        assert_eq!(classify(&yahoo), DeferralKind::Throttle);
    }

    #[test]
    fn greylisting_replies() {
        let sim = r(451, Some((4, 7, 1)), "Greylisted, please try again later");
        assert_eq!(classify(&sim), DeferralKind::Greylist);
        let postgrey = r(
            450,
            Some((4, 2, 0)),
            "Recipient address rejected: Greylisted, see http://postgrey",
        );
        assert_eq!(classify(&postgrey), DeferralKind::Greylist);
        let bare = r(451, Some((4, 7, 1)), "Please try again later");
        assert_eq!(classify(&bare), DeferralKind::Greylist);
        let other = r(451, Some((4, 3, 0)), "Local error in processing");
        assert_eq!(classify(&other), DeferralKind::Other);
    }

    #[test]
    fn implied_intervals() {
        let t = |s: &str| implied_interval(&r(451, Some((4, 7, 1)), s));
        assert_eq!(
            t("Greylisted, retry in 300 seconds"),
            Some(Duration::from_secs(300))
        );
        assert_eq!(
            t("greylisted: wait 5 minutes"),
            Some(Duration::from_secs(300))
        );
        assert_eq!(
            t("Greylisted for 60s please"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(t("Greylisted 4.7.1 see RFC 6647"), None);
        assert_eq!(t("try after 99999999 minutes"), Some(MAX_IMPLIED));
        assert_eq!(t(&"9".repeat(5000)), None);
    }
}
