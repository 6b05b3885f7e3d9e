//! herald-complaints: feedback-loop reports. A library (no loop): the bounce
//! stage, which receives what arrives at a list's `-bounces` address and the configured
//! complaints address, asks [`parse`] whether a message is a complaint and what it says about
//! the copy complained about; the stage then maps it to a member and acts (`herald-bounce`,
//! `complaint.rs`).
//!
//! Formats recognised:
//! - RFC 5965 ARF: `multipart/report; report-type=feedback-report` with a
//!   `message/feedback-report` part (AOL, Yahoo CFL, Mail.ru, Fastmail, most FBL senders), the
//!   original as `message/rfc822` or only its header as `text/rfc822-headers` (RFC 6430
//!   allows both; Yahoo and Comcast often send headers only);
//! - Microsoft JMRP (Outlook.com / Hotmail): not multipart/report but a message carrying the
//!   original as a `message/rfc822` attachment and the `X-HmXmrOriginalRecipient` header.
//!
//! What is read from the original (our copy, as the provider quotes it): its `Return-Path`
//! (our VERP bounce address: list and member), its `List-Id`, and the per-member unsubscribe
//! URL in its `List-Unsubscribe` (list, member and the HMAC token, checked by the caller).
//!
//! Limits: only the first [`MAX_REPORT_BYTES`] are parsed; feedback fields: at most
//! [`MAX_FIELD_LINES`] lines, values cut at [`MAX_VALUE_CHARS`].
//!
//! SECURITY: a report is hostile input from anyone who can mail `-bounces` or the complaints
//! address. Nothing here panics on any input (property test) and nothing here trusts a claim:
//! the result only names candidates; the bounce stage acts on a member only when the copy's
//! unsubscribe token verifies, or when the VERP address and the `List-Id` agree on the list.

mod fields;
mod original;

pub use fields::{parse_feedback_fields, FeedbackFields, MAX_FIELD_LINES, MAX_VALUE_CHARS};
pub use original::{Original, UnsubscribeRef};

use mail_parser::{Message, MessageParser, MimeHeaders, PartType};

/// Most bytes of a report that are parsed (the quoted original can be large; its header,
/// which is all we read, comes first).
pub const MAX_REPORT_BYTES: usize = 256 * 1024;

/// Which report format a complaint came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// RFC 5965 with the original as `message/rfc822`.
    Arf,
    /// RFC 5965 with only the original's header (`text/rfc822-headers`).
    ArfHeaders,
    /// Microsoft's JMRP: the original attached, `X-HmXmrOriginalRecipient` set.
    Jmrp,
}

impl Format {
    pub fn word(self) -> &'static str {
        match self {
            Format::Arf => "arf",
            Format::ArfHeaders => "arf-headers",
            Format::Jmrp => "jmrp",
        }
    }
}

/// A complaint report as parsed: what kind, from whom, and what it says about the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Complaint {
    pub format: Format,
    /// `Feedback-Type` (`abuse`, `fraud`, …; lower-cased); `abuse` for JMRP.
    pub feedback_type: String,
    /// `User-Agent` of the report, or the report's `From:` domain: who complained, for the log.
    pub reporter: String,
    /// What the original copy tells (`None`: the report quotes no original).
    pub original: Option<Original>,
}

/// The complaint in `raw`, or `None` when it is not a feedback report (a bounce, an
/// auto-reply, garbage: the caller classifies it as a bounce).
pub fn parse(raw: &[u8]) -> Option<Complaint> {
    let raw = &raw[..raw.len().min(MAX_REPORT_BYTES)];
    let msg = MessageParser::new().parse(raw)?;
    let arf = is_feedback_report(&msg);
    let jmrp = !arf && msg.header_raw("X-HmXmrOriginalRecipient").is_some();
    if !arf && !jmrp {
        return None;
    }
    let fields = feedback_part(&msg).map(|t| parse_feedback_fields(&t));
    let (original, headers_only) = match find_original(&msg) {
        Some((o, h)) => (Some(o), h),
        None => (None, false),
    };
    let format = match (jmrp, headers_only) {
        (true, _) => Format::Jmrp,
        (false, true) => Format::ArfHeaders,
        (false, false) => Format::Arf,
    };
    let feedback_type = fields
        .as_ref()
        .and_then(|f| f.feedback_type.clone())
        .unwrap_or_else(|| "abuse".to_string());
    let reporter = fields
        .as_ref()
        .and_then(|f| f.user_agent.clone())
        .or_else(|| {
            let from = msg.from()?.first()?.address()?;
            Some(
                from.rsplit('@')
                    .next()
                    .unwrap_or(from)
                    .chars()
                    .take(100)
                    .collect(),
            )
        })
        .unwrap_or_else(|| "unknown".to_string());
    Some(Complaint {
        format,
        feedback_type,
        reporter,
        original,
    })
}

fn is_type(ct: Option<&mail_parser::ContentType<'_>>, t: &str, sub: &str) -> bool {
    ct.is_some_and(|ct| {
        ct.ctype().eq_ignore_ascii_case(t)
            && ct.subtype().is_some_and(|s| s.eq_ignore_ascii_case(sub))
    })
}

/// `multipart/report; report-type=feedback-report`, or any `message/feedback-report` part
/// (some senders get the top-level parameter wrong).
fn is_feedback_report(msg: &Message<'_>) -> bool {
    let top = msg.content_type();
    let by_param = is_type(top, "multipart", "report")
        && top
            .and_then(|ct| ct.attribute("report-type"))
            .is_some_and(|v| v.eq_ignore_ascii_case("feedback-report"));
    by_param || feedback_part(msg).is_some()
}

/// The text of the `message/feedback-report` part.
fn feedback_part(msg: &Message<'_>) -> Option<String> {
    msg.parts.iter().find_map(|p| {
        if !is_type(p.content_type(), "message", "feedback-report") {
            return None;
        }
        Some(match &p.body {
            PartType::Text(t) | PartType::Html(t) => t.to_string(),
            PartType::Binary(b) | PartType::InlineBinary(b) => String::from_utf8_lossy(b).into(),
            PartType::Message(_) | PartType::Multipart(_) => return None,
        })
    })
}

/// The quoted original: a `message/rfc822` part (`false`) or `text/rfc822-headers` (`true`).
fn find_original(msg: &Message<'_>) -> Option<(Original, bool)> {
    for p in &msg.parts {
        match &p.body {
            PartType::Message(m) => return Some((Original::from_message(m), false)),
            PartType::Text(t) if is_type(p.content_type(), "text", "rfc822-headers") => {
                return Some((Original::from_header_text(t.as_bytes()), true));
            }
            PartType::Binary(b) | PartType::InlineBinary(b)
                if is_type(p.content_type(), "text", "rfc822-headers")
                    || is_type(p.content_type(), "message", "rfc822") =>
            {
                return Some((Original::from_header_text(b), true));
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests;
