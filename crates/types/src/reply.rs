//! SMTP replies (RFC 5321 §4.2) with RFC 3463 enhanced status codes.
//!
//! Used in both directions: the inbound server renders them, the outbound client parses them, and
//! delivery outcomes carry them to the bounce stage as data (never as log text to be re-parsed).
//!
//! SECURITY: [`Reply::parse_lines`] reads text from remote servers. It bounds nothing by itself
//! (the client bounds line length and line count before calling it) but never panics.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An RFC 3463 enhanced status code, e.g. `5.1.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EnhancedStatus {
    pub class: u8,
    pub subject: u16,
    pub detail: u16,
}

impl EnhancedStatus {
    pub const fn new(class: u8, subject: u16, detail: u16) -> Self {
        EnhancedStatus {
            class,
            subject,
            detail,
        }
    }

    /// Parses `c.s.d` where c is 2, 4 or 5 and s, d have at most three digits.
    pub fn parse(s: &str) -> Option<EnhancedStatus> {
        let mut it = s.split('.');
        let class: u8 = it.next()?.parse().ok()?;
        let subject: u16 = parse_small(it.next()?)?;
        let detail: u16 = parse_small(it.next()?)?;
        if it.next().is_some() || !matches!(class, 2 | 4 | 5) {
            return None;
        }
        Some(EnhancedStatus::new(class, subject, detail))
    }
}

fn parse_small(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl fmt::Display for EnhancedStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.class, self.subject, self.detail)
    }
}

/// One SMTP reply: a three-digit code, an optional enhanced status and the human text (lines
/// joined with `\n`, the code and enhanced status stripped from each line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub code: u16,
    pub enhanced: Option<EnhancedStatus>,
    pub text: String,
}

/// Why reply lines could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("empty reply")]
    Empty,
    #[error("reply line does not start with a three-digit code: {0:?}")]
    BadCode(String),
    #[error("reply lines carry different codes")]
    MixedCodes,
    #[error("reply continues after its last line")]
    BadContinuation,
}

impl Reply {
    pub fn new(code: u16, enhanced: Option<EnhancedStatus>, text: impl Into<String>) -> Reply {
        Reply {
            code,
            enhanced,
            text: text.into(),
        }
    }

    /// 2xx and 3xx.
    pub fn is_positive(&self) -> bool {
        (200..400).contains(&self.code)
    }
    /// 4xx: try again later.
    pub fn is_transient(&self) -> bool {
        (400..500).contains(&self.code)
    }
    /// 5xx: do not try again.
    pub fn is_permanent(&self) -> bool {
        (500..600).contains(&self.code)
    }

    /// Parses the lines of one complete reply (without CRLF). Every line but the last must have
    /// `-` after the code; the last has a space or nothing.
    pub fn parse_lines<S: AsRef<str>>(lines: &[S]) -> Result<Reply, ReplyError> {
        let mut code = None;
        let mut enhanced = None;
        let mut text = String::new();
        for (i, line) in lines.iter().enumerate() {
            let line = line.as_ref();
            let b = line.as_bytes();
            if b.len() < 3
                || !b[..3].iter().all(u8::is_ascii_digit)
                || !(b'2'..=b'5').contains(&b[0])
            {
                return Err(ReplyError::BadCode(line.chars().take(80).collect()));
            }
            let this: u16 = line[..3]
                .parse()
                .map_err(|_| ReplyError::BadCode(line.into()))?;
            if code.is_some_and(|c| c != this) {
                return Err(ReplyError::MixedCodes);
            }
            code = Some(this);
            let last = i + 1 == lines.len();
            let sep = b.get(3).copied();
            match (sep, last) {
                (Some(b'-'), false) | (Some(b' '), true) | (None, true) => {}
                _ => return Err(ReplyError::BadContinuation),
            }
            let mut rest = line.get(4..).unwrap_or("");
            if let Some((first, after)) = rest.split_once(' ').or(Some((rest, ""))) {
                if let Some(es) = EnhancedStatus::parse(first) {
                    if enhanced.is_none() {
                        enhanced = Some(es);
                    }
                    rest = after;
                }
            }
            if i > 0 {
                text.push('\n');
            }
            text.push_str(rest);
        }
        Ok(Reply {
            code: code.ok_or(ReplyError::Empty)?,
            enhanced,
            text,
        })
    }

    /// The reply as it goes on the wire, CRLF-terminated, multi-line when the text has `\n`.
    pub fn to_wire(&self) -> String {
        let lines: Vec<&str> = self.text.split('\n').collect();
        let mut out = String::new();
        for (i, line) in lines.iter().enumerate() {
            let sep = if i + 1 == lines.len() { ' ' } else { '-' };
            out.push_str(&self.code.to_string());
            out.push(sep);
            if let Some(es) = self.enhanced {
                out.push_str(&es.to_string());
                out.push(' ');
            }
            out.push_str(line);
            out.push_str("\r\n");
        }
        out
    }
}

impl fmt::Display for Reply {
    /// Single-line form for logs: `550 5.1.1 user unknown` (newlines become spaces).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code)?;
        if let Some(es) = self.enhanced {
            write!(f, " {es}")?;
        }
        write!(f, " {}", self.text.replace(['\n', '\r'], " "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multiline_reply_with_enhanced_code() {
        let r = Reply::parse_lines(&["550-5.1.1 The email account", "550 5.1.1 does not exist"])
            .expect("valid");
        assert_eq!(r.code, 550);
        assert_eq!(r.enhanced, Some(EnhancedStatus::new(5, 1, 1)));
        assert_eq!(r.text, "The email account\ndoes not exist");
        assert!(r.is_permanent());
    }

    #[test]
    fn parses_bare_code_and_plain_text() {
        let r = Reply::parse_lines(&["250"]).expect("valid");
        assert_eq!((r.code, r.enhanced, r.text.as_str()), (250, None, ""));
        let r = Reply::parse_lines(&["421 try later"]).expect("valid");
        assert!(r.is_transient());
        assert_eq!(r.text, "try later");
    }

    #[test]
    fn refuses_malformed_replies() {
        assert_eq!(Reply::parse_lines::<&str>(&[]), Err(ReplyError::Empty));
        assert!(matches!(
            Reply::parse_lines(&["hello"]),
            Err(ReplyError::BadCode(_))
        ));
        assert!(matches!(
            Reply::parse_lines(&["999 x"]),
            Err(ReplyError::BadCode(_))
        ));
        assert!(matches!(
            Reply::parse_lines(&["25"]),
            Err(ReplyError::BadCode(_))
        ));
        assert_eq!(
            Reply::parse_lines(&["250-a", "251 b"]),
            Err(ReplyError::MixedCodes)
        );
        assert_eq!(
            Reply::parse_lines(&["250 a", "250 b"]),
            Err(ReplyError::BadContinuation)
        );
        assert_eq!(
            Reply::parse_lines(&["250-a"]),
            Err(ReplyError::BadContinuation)
        );
    }

    #[test]
    fn renders_wire_form() {
        let r = Reply::new(250, Some(EnhancedStatus::new(2, 0, 0)), "a\nb");
        assert_eq!(r.to_wire(), "250-2.0.0 a\r\n250 2.0.0 b\r\n");
        assert_eq!(r.to_string(), "250 2.0.0 a b");
    }

    #[test]
    fn enhanced_status_rejects_junk() {
        for bad in ["", "5", "5.1", "3.1.1", "5.1.1.1", "5.1000.1", "5.a.1"] {
            assert_eq!(EnhancedStatus::parse(bad), None, "{bad}");
        }
    }
}
