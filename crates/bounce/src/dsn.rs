//! Reading a bounce message: RFC 3464 `multipart/report; report-type=delivery-status` reports
//! (parsed with `mail-parser`, the per-recipient fields read here), auto-replies, and the
//! heuristic fallback for everything else.
//!
//! Limits: only the first [`MAX_BOUNCE_BYTES`] of a message are parsed; at most
//! [`MAX_DSN_RECIPIENTS`] per-recipient groups are read; text scanned by the heuristics is capped
//! at [`crate::heuristic::MAX_SCAN_BYTES`].
//!
//! SECURITY: bounces are hostile input (anyone can send mail to `-bounces`). Nothing here panics
//! on any input (see the proptest and the fuzz target), nothing allocates beyond the bounded
//! input, and a report's claims only ever produce a [`Verdict`]; the bounce stage decides whom it
//! concerns (VERP first).

use crate::heuristic::{self, floor_char_boundary, MAX_SCAN_BYTES};
use crate::kind::{excerpt, kind_of_status, BounceKind, Verdict};
use herald_types::{Address, EnhancedStatus};
use mail_parser::{Message, MessageParser, MimeHeaders, PartType};

/// Most bytes of a bounce that are parsed. Reports put the interesting parts first; the
/// returned original message, which can be large, is not needed.
pub const MAX_BOUNCE_BYTES: usize = 256 * 1024;
/// Most per-recipient field groups read from one delivery-status part.
pub const MAX_DSN_RECIPIENTS: usize = 100;

/// One per-recipient group of a `message/delivery-status` part.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DsnRecipient {
    pub final_recipient: Option<Address>,
    pub action: Option<String>,
    pub status: Option<EnhancedStatus>,
    pub diagnostic: Option<String>,
}

/// Classifies one bounce message.
pub fn classify_message(raw: &[u8]) -> Verdict {
    let raw = &raw[..raw.len().min(MAX_BOUNCE_BYTES)];
    let Some(msg) = MessageParser::new().parse(raw) else {
        return unrecognized("not a parsable message");
    };
    let recipients = delivery_status(&msg);
    if let Some(v) = from_report(&recipients) {
        return v;
    }
    // Bounces carry `Auto-Submitted: auto-replied` too (Postfix, Exim, Exchange), so the strong
    // vacation signals go first, the text heuristics next, and the bare header last.
    let auto = auto_reply_signals(&msg);
    if auto == AutoSignal::Strong {
        return auto_reply(&msg);
    }
    match from_text(&msg) {
        v if v.kind == BounceKind::Unrecognized && auto == AutoSignal::Weak => auto_reply(&msg),
        v => v,
    }
}

fn auto_reply(msg: &Message<'_>) -> Verdict {
    Verdict {
        kind: BounceKind::AutoReply,
        recipient: None,
        status: None,
        diagnostic: excerpt(msg.subject().unwrap_or("auto-reply")),
    }
}

fn unrecognized(why: &str) -> Verdict {
    Verdict {
        kind: BounceKind::Unrecognized,
        recipient: None,
        status: None,
        diagnostic: excerpt(why),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AutoSignal {
    None,
    /// Only `Auto-Submitted: auto-replied`, which bounces carry as well.
    Weak,
    /// Vacation headers or a vacation subject on a message that is not a report.
    Strong,
}

/// RFC 3834 `Auto-Submitted`, the de-facto vacation headers, or a vacation-like subject.
fn auto_reply_signals(msg: &Message<'_>) -> AutoSignal {
    let header = |name: &str| msg.header_raw(name).map(|v| v.trim().to_ascii_lowercase());
    let is_report = msg.content_type().is_some_and(|ct| {
        ct.ctype().eq_ignore_ascii_case("multipart")
            && ct
                .subtype()
                .is_some_and(|s| s.eq_ignore_ascii_case("report"))
    });
    if is_report {
        return AutoSignal::None;
    }
    let strong = header("X-Autoreply").is_some()
        || header("X-Autorespond").is_some()
        || header("X-Auto-Response-Suppress").is_some_and(|v| v.contains("oof"))
        || header("Precedence").is_some_and(|v| v == "auto_reply")
        || msg.subject().is_some_and(heuristic::is_auto_reply_subject);
    if strong {
        AutoSignal::Strong
    } else if header("Auto-Submitted").is_some_and(|v| v.starts_with("auto-replied")) {
        AutoSignal::Weak
    } else {
        AutoSignal::None
    }
}

/// The per-recipient groups of every `message/delivery-status` part (the first ones only).
pub fn delivery_status(msg: &Message<'_>) -> Vec<DsnRecipient> {
    let mut out = Vec::new();
    for part in &msg.parts {
        let is_ds = part.content_type().is_some_and(|ct| {
            ct.ctype().eq_ignore_ascii_case("message")
                && ct.subtype().is_some_and(|s| {
                    s.eq_ignore_ascii_case("delivery-status")
                        || s.eq_ignore_ascii_case("global-delivery-status")
                })
        });
        if !is_ds {
            continue;
        }
        let bytes: &[u8] = match &part.body {
            PartType::Text(t) | PartType::Html(t) => t.as_bytes(),
            PartType::Binary(b) | PartType::InlineBinary(b) => b,
            PartType::Message(_) | PartType::Multipart(_) => continue,
        };
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_SCAN_BYTES)]);
        parse_fields(&text, &mut out);
        if out.len() >= MAX_DSN_RECIPIENTS {
            break;
        }
    }
    out.truncate(MAX_DSN_RECIPIENTS);
    out
}

/// Parses the field groups (blank-line separated, with folded continuation lines) of a
/// delivery-status body. The first group is per-message; recipient groups follow.
pub fn parse_fields(text: &str, out: &mut Vec<DsnRecipient>) {
    for group in text.replace("\r\n", "\n").split("\n\n") {
        if out.len() >= MAX_DSN_RECIPIENTS {
            return;
        }
        let mut r = DsnRecipient::default();
        let mut any = false;
        for (name, value) in unfold(group) {
            let value = value.trim();
            match name.to_ascii_lowercase().as_str() {
                "final-recipient" | "original-recipient" if r.final_recipient.is_none() => {
                    r.final_recipient = typed_address(value);
                    any = true;
                }
                "action" => {
                    r.action = Some(value.to_ascii_lowercase());
                    any = true;
                }
                "status" => {
                    r.status = value
                        .split_whitespace()
                        .next()
                        .and_then(EnhancedStatus::parse);
                    any = true;
                }
                "diagnostic-code" => r.diagnostic = Some(value.to_string()),
                _ => {}
            }
        }
        if any {
            out.push(r);
        }
    }
}

/// `rfc822; bob@example.com` → the address.
fn typed_address(value: &str) -> Option<Address> {
    let addr = value.split_once(';').map_or(value, |(_, a)| a).trim();
    Address::parse(addr.trim_start_matches('<').trim_end_matches('>')).ok()
}

/// Header-style lines with continuations joined.
fn unfold(group: &str) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in group.lines().take(200) {
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = fields.last_mut() {
                if v.len() < 4096 {
                    v.push(' ');
                    v.push_str(line.trim());
                }
            }
        } else if let Some((n, v)) = line.split_once(':') {
            fields.push((n.trim().to_string(), v.to_string()));
        }
    }
    fields
}

/// A verdict from the report's recipient groups: the most severe recipient decides.
fn from_report(recipients: &[DsnRecipient]) -> Option<Verdict> {
    let verdicts: Vec<Verdict> = recipients.iter().filter_map(recipient_verdict).collect();
    verdicts.into_iter().min_by_key(|v| severity(v.kind))
}

fn severity(kind: BounceKind) -> u8 {
    match kind {
        BounceKind::Hard => 0,
        // A report never yields `Expired` (that is Herald's own verdict); ranked with soft.
        BounceKind::Soft | BounceKind::Expired => 1,
        BounceKind::Policy => 2,
        BounceKind::Delayed => 3,
        BounceKind::Informational => 4,
        BounceKind::AutoReply => 5,
        BounceKind::Unrecognized => 6,
    }
}

fn recipient_verdict(r: &DsnRecipient) -> Option<Verdict> {
    let diag = r.diagnostic.clone().unwrap_or_default();
    let kind = match r.action.as_deref() {
        Some("delayed") => BounceKind::Delayed,
        Some("delivered" | "relayed" | "expanded") => BounceKind::Informational,
        _ => {
            // `failed`, or no Action at all: the diagnostic's words refine the status class,
            // e.g. a 5.0.0 "blocked as spam" is policy, a 5.0.0 "user unknown" is hard.
            let text_kind = heuristic::classify_text(&diag).map(|(k, _)| k);
            match (r.status, text_kind) {
                (_, Some(BounceKind::Policy)) => BounceKind::Policy,
                (Some(s), _) if s.class == 5 && s.subject == 7 => BounceKind::Policy,
                (Some(s), Some(k)) if s.class == 5 && s.subject == 0 => k,
                (Some(s), _) => kind_of_status(s),
                (None, Some(k)) => k,
                (None, None) => return None,
            }
        }
    };
    Some(Verdict {
        kind,
        recipient: r.final_recipient.clone(),
        status: r.status,
        diagnostic: excerpt(&diag),
    })
}

/// The heuristic path: the subject and the first text parts.
fn from_text(msg: &Message<'_>) -> Verdict {
    let mut text = String::new();
    if let Some(s) = msg.subject() {
        text.push_str(s);
        text.push('\n');
    }
    for i in 0..3 {
        match msg.body_text(i) {
            Some(t) => text.push_str(&t[..floor_char_boundary(&t, MAX_SCAN_BYTES)]),
            None => break,
        }
        if text.len() >= MAX_SCAN_BYTES {
            break;
        }
    }
    // Without a failure-ish word anywhere, a stray "550" in an ordinary message means nothing.
    let lower = text.to_ascii_lowercase();
    let looks_like_bounce = [
        "undeliver",
        "delivery",
        "failure",
        "failed",
        "returned",
        "rejected",
        "could not be delivered",
        "couldn't be delivered",
        "permanent error",
        "unable to deliver",
    ]
    .iter()
    .any(|w| lower.contains(w));
    match heuristic::classify_text(&text) {
        Some((kind, status)) if looks_like_bounce => Verdict {
            kind,
            recipient: heuristic::find_address(&text),
            status,
            diagnostic: excerpt(&diagnostic_line(&text)),
        },
        _ => unrecognized(msg.subject().unwrap_or("no subject")),
    }
}

/// The line that carries the error, for the excerpt: the first with a 4xx/5xx code, else the
/// first non-empty body line.
fn diagnostic_line(text: &str) -> String {
    text.lines()
        .find(|l| heuristic::find_reply_code(&l.to_ascii_lowercase()).is_some())
        .or_else(|| text.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or_default()
        .to_string()
}
