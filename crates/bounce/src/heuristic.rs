//! Heuristics for bounces that are not RFC 3464 reports (qmail, old Exim and sendmail, Yahoo,
//! many appliances), and for refining the free text of standard ones: enhanced status codes,
//! SMTP reply codes and well-known phrases.
//!
//! Order matters and is deliberate: delay notices first (a "will retry" message often quotes a
//! 4xx code and also user-unknown-looking text), then policy (a spam block must never count
//! against the member even when it says "550"), then mailbox-full (soft), then user-unknown
//! (hard), then bare codes.
//!
//! Limits: the caller passes at most [`MAX_SCAN_BYTES`] of text; everything here is linear.
//!
//! SECURITY: the text is attacker-controlled; matching is plain substring search on a lowercased
//! copy, no regular expressions, no allocation proportional to anything but the bounded input.

use crate::kind::{kind_of_status, BounceKind};
use herald_types::{Address, EnhancedStatus};

/// Most text examined per bounce.
pub const MAX_SCAN_BYTES: usize = 64 * 1024;

const DELAY_PHRASES: &[&str] = &[
    "delivery delayed",
    "delivery has been delayed",
    "has been delayed",
    "delay notification",
    "will retry",
    "will be retried",
    "still trying",
    "not yet been delivered",
    "no action is required on your part",
    "delivery status notification (delay)",
    "could not send message for past",
];

const POLICY_PHRASES: &[&str] = &[
    "spam",
    "blocked",
    "blacklist",
    "blocklist",
    "denylist",
    "listed at",
    "listed in",
    "listed on",
    "is listed",
    "reputation",
    "policy",
    "rejected for policy",
    "message content rejected",
    "dmarc",
    "spf check failed",
    "too many messages",
    "rate limit",
    "throttl",
    "temporarily deferred due to",
];

const FULL_PHRASES: &[&str] = &[
    "mailbox full",
    "mailbox is full",
    "over quota",
    "quota exceeded",
    "exceeded storage",
    "insufficient storage",
    "out of storage",
    "mailbox size limit",
];

const UNKNOWN_PHRASES: &[&str] = &[
    "user unknown",
    "unknown user",
    "no such user",
    "no such recipient",
    "no such mailbox",
    "unknown recipient",
    "recipient unknown",
    "does not exist",
    "doesn't exist",
    "mailbox unavailable",
    "mailbox not found",
    "invalid recipient",
    "invalid mailbox",
    "recipient address rejected",
    "address rejected",
    "user not found",
    "account has been disabled",
    "account is disabled",
    "account disabled",
    "no mailbox here",
    "this user doesn't have a",
    "addressee unknown",
    "not our customer",
    "recipientnotfound",
    "resolver.adr.recipnotfound",
    "unrouteable address",
    "host or domain name not found",
];

const AUTO_REPLY_SUBJECTS: &[&str] = &[
    "out of office",
    "out of the office",
    "automatic reply",
    "auto reply",
    "autoreply",
    "auto-reply",
    "auto:",
    "away from my mail",
    "vacation",
    "abwesenheitsnotiz",
    "absence",
    "on leave",
];

/// True when the subject looks like an out-of-office or other auto-reply.
pub fn is_auto_reply_subject(subject: &str) -> bool {
    let s = subject.to_ascii_lowercase();
    AUTO_REPLY_SUBJECTS.iter().any(|p| s.contains(p))
}

fn any(hay: &str, needles: &[&str]) -> bool {
    needles.iter().any(|n| hay.contains(n))
}

/// Classifies free text: a non-standard bounce body, or a DSN's diagnostic.
/// `None` when nothing in it is recognizable.
pub fn classify_text(text: &str) -> Option<(BounceKind, Option<EnhancedStatus>)> {
    let text = &text[..floor_char_boundary(text, MAX_SCAN_BYTES)];
    let lower = text.to_ascii_lowercase();
    let status = find_enhanced_status(&lower);
    if any(&lower, DELAY_PHRASES) && status.is_none_or(|s| s.class != 5) {
        return Some((BounceKind::Delayed, status));
    }
    if status.is_some_and(|s| s.class == 5 && s.subject == 7) || any(&lower, POLICY_PHRASES) {
        return Some((BounceKind::Policy, status));
    }
    if any(&lower, FULL_PHRASES) || status.is_some_and(|s| s.subject == 2 && s.detail == 2) {
        return Some((BounceKind::Soft, status));
    }
    if any(&lower, UNKNOWN_PHRASES) {
        return Some((BounceKind::Hard, status));
    }
    if let Some(s) = status {
        return Some((kind_of_status(s), Some(s)));
    }
    match find_reply_code(&lower) {
        Some(550 | 551 | 553) => Some((BounceKind::Hard, None)),
        Some(code) if (500..600).contains(&code) => Some((BounceKind::Soft, None)),
        Some(code) if (400..500).contains(&code) => Some((BounceKind::Soft, None)),
        _ => None,
    }
}

/// The first `c.s.d` enhanced status code standing on its own (not inside an IP address or a
/// version number).
pub fn find_enhanced_status(text: &str) -> Option<EnhancedStatus> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if matches!(b[i], b'2' | b'4' | b'5')
            && i + 1 < b.len()
            && b[i + 1] == b'.'
            && (i == 0 || !is_code_char(b[i - 1]))
        {
            let end = (i..b.len())
                .find(|&j| !is_code_char(b[j]))
                .unwrap_or(b.len());
            if let Some(s) = text.get(i..end).and_then(EnhancedStatus::parse) {
                return Some(s);
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    None
}

fn is_code_char(c: u8) -> bool {
    c.is_ascii_digit() || c == b'.'
}

/// The first three-digit 4xx/5xx SMTP code standing on its own at a word start.
pub fn find_reply_code(text: &str) -> Option<u16> {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(2)).find_map(|i| {
        let w = &b[i..i + 3];
        let before_ok = i == 0 || !b[i - 1].is_ascii_alphanumeric() && b[i - 1] != b'.';
        let after_ok = b
            .get(i + 3)
            .is_none_or(|c| matches!(c, b' ' | b'-' | b'\r' | b'\n'));
        if before_ok && after_ok && matches!(w[0], b'4' | b'5') && w.iter().all(u8::is_ascii_digit)
        {
            std::str::from_utf8(w).ok()?.parse().ok()
        } else {
            None
        }
    })
}

/// The first address in `<…>` (Postfix, qmail, Exim style "  <bob@example.com>: …" lines), else
/// the first bare `local@domain` token that parses.
pub fn find_address(text: &str) -> Option<Address> {
    let text = &text[..floor_char_boundary(text, MAX_SCAN_BYTES)];
    for chunk in text.split('<').skip(1).take(64) {
        if let Some(end) = chunk.find('>') {
            if let Ok(a) = Address::parse(&chunk[..end]) {
                return Some(a);
            }
        }
    }
    text.split(|c: char| c.is_whitespace() || "<>()[]\"',;:".contains(c))
        .filter(|w| w.contains('@'))
        .take(64)
        .find_map(|w| Address::parse(w.trim_end_matches('.')).ok())
}

/// `s.floor_char_boundary(max)` (stable only from Rust 1.91).
pub(crate) fn floor_char_boundary(s: &str, max: usize) -> usize {
    if max >= s.len() {
        return s.len();
    }
    (0..=max)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_found_only_standing_alone() {
        assert_eq!(
            find_enhanced_status("said: 550 5.1.1 <x@y>: user unknown"),
            EnhancedStatus::parse("5.1.1")
        );
        assert_eq!(find_enhanced_status("from 192.168.5.1.4 ok"), None);
        assert_eq!(
            find_enhanced_status("version 2.5.12"),
            EnhancedStatus::parse("2.5.12")
        );
        assert_eq!(find_reply_code("host said: 550 no"), Some(550));
        assert_eq!(find_reply_code("port 2550 x"), None);
    }

    #[test]
    fn phrases_classify_in_priority_order() {
        let k = |t: &str| classify_text(t).map(|(k, _)| k);
        assert_eq!(
            k("550 5.7.1 Message rejected as spam"),
            Some(BounceKind::Policy)
        );
        assert_eq!(k("550 user unknown"), Some(BounceKind::Hard));
        assert_eq!(k("552 mailbox full"), Some(BounceKind::Soft));
        assert_eq!(
            k("Delivery has been delayed; will retry"),
            Some(BounceKind::Delayed)
        );
        assert_eq!(k("your IP is listed at spamhaus"), Some(BounceKind::Policy));
        assert_eq!(k("hello there"), None);
    }

    #[test]
    fn addresses_are_found() {
        assert_eq!(
            find_address("  <bob@d0.test>: host said").map(|a| a.to_string()),
            Some("bob@d0.test".into())
        );
        assert_eq!(
            find_address("mail to alice@x.example failed.").map(|a| a.to_string()),
            Some("alice@x.example".into())
        );
    }
}
