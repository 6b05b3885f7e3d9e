//! The fields of a `message/feedback-report` part (RFC 5965 §3.1): header-style lines, with
//! folded continuations. Hand-written because mail-parser hands this part over as opaque text
//! (it parses message headers, not report bodies), and the few fields needed here do not
//! justify another crate; the grammar is the same `name: value` lines.
//!
//! Limits: at most [`MAX_FIELD_LINES`] lines are read; values are cut at [`MAX_VALUE_CHARS`];
//! control characters are dropped from what is kept (it reaches logs and the member's record).

/// Lines of a feedback-report part read at most.
pub const MAX_FIELD_LINES: usize = 200;
/// Characters kept of one field value.
pub const MAX_VALUE_CHARS: usize = 200;

/// The fields Herald uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeedbackFields {
    /// `Feedback-Type`, lower-cased (`abuse`, `fraud`, `virus`, `other`, `not-spam`, …).
    pub feedback_type: Option<String>,
    pub user_agent: Option<String>,
    /// `Original-Rcpt-To` as written (for the log: providers often redact it).
    pub original_rcpt_to: Option<String>,
}

/// Parses the part's text; unknown fields and malformed lines are skipped.
pub fn parse_feedback_fields(text: &str) -> FeedbackFields {
    let mut out = FeedbackFields::default();
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in text.lines().take(MAX_FIELD_LINES) {
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = fields.last_mut() {
                if v.chars().count() < MAX_VALUE_CHARS {
                    v.push(' ');
                    v.push_str(line.trim());
                }
            }
        } else if let Some((n, v)) = line.split_once(':') {
            fields.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    for (name, value) in fields {
        let value = clean(&value);
        if value.is_empty() {
            continue;
        }
        let slot = match name.as_str() {
            "feedback-type" => &mut out.feedback_type,
            "user-agent" => &mut out.user_agent,
            "original-rcpt-to" => &mut out.original_rcpt_to,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(value);
        }
    }
    if let Some(t) = &mut out.feedback_type {
        *t = t.to_ascii_lowercase();
    }
    out
}

/// Bounded, without control characters.
fn clean(v: &str) -> String {
    v.chars()
        .filter(|c| !c.is_control())
        .take(MAX_VALUE_CHARS)
        .collect::<String>()
        .trim()
        .to_string()
}
