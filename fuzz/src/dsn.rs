//! The DSN parser check (`bounce_parse`): any bytes mailed to `-bounces` classify without
//! panicking, with bounded output, and the same way twice.
//!
//! Place in the flow: the bounce stage calls [`herald_bounce::classify_message`] on every
//! message that reaches a `-bounces` address, and [`herald_bounce::parse_fields`] on the
//! `message/delivery-status` parts in it.
//!
//! SECURITY: anyone on the Internet can write to `-bounces`; these are the bounds the bounce
//! crate promises (diagnostic length, recipients per report).

use herald_bounce::{classify_message, parse_fields, MAX_DIAGNOSTIC_CHARS, MAX_DSN_RECIPIENTS};

/// Classifies `data` as a whole message and parses it as a delivery-status body.
pub fn check(data: &[u8]) {
    let verdict = classify_message(data);
    assert!(
        verdict.diagnostic.chars().count() <= MAX_DIAGNOSTIC_CHARS,
        "diagnostic longer than {MAX_DIAGNOSTIC_CHARS} characters"
    );
    // A verdict decides whether a member is scored: it must not depend on anything but the
    // bytes (no hidden state between messages).
    assert_eq!(
        classify_message(data),
        verdict,
        "two classifications differ"
    );
    let mut out = Vec::new();
    parse_fields(&String::from_utf8_lossy(data), &mut out);
    assert!(
        out.len() <= MAX_DSN_RECIPIENTS,
        "{} recipient groups, more than {MAX_DSN_RECIPIENTS}",
        out.len()
    );
}
