//! Mail to `<list>-request`: `subscribe`, `unsubscribe`, `help`, `confirm <token>` (the
//! reply to a confirmation mail), `approve <token>` / `reject <token>` (a moderator's reply
//! to a moderation notice), and Mailman's delivery settings `set digest mime|plain|off` and
//! `set nomail on|off` (confirmed by a round trip like a subscription). Delivery
//! modes are exclusive, so `set digest off` and `set nomail off` both mean regular delivery. One command per mail: the first one found in the subject or,
//! failing that, the first [`ListsConfig::request_max_lines`] lines of the body.
//!
//! Loop safety: nothing is answered for the null sender, for `Auto-Submitted` mail other than
//! `no`, or for `Precedence: bulk/list/junk`; generated mail is itself marked auto-replied.
//!
//! Limits: at most `request_max_lines` lines (default 50) of at most [`MAX_LINE_CHARS`] characters
//! are looked at, whatever the size of the mail (a 10,000-line request costs the same as a
//! 50-line one beyond MIME parsing, which the SMTP size limit bounds).
//!
//! SECURITY: request mail is hostile input. A forged From only sends a confirmation to the
//! forged address; nothing changes until someone holding that mailbox confirms. A moderation
//! command acts only with a valid moderation token (sent only to moderators) and a moderator
//! sender.
//!
//! [`ListsConfig::request_max_lines`]: crate::ListsConfig

use herald_types::token::MAX_TOKEN_BYTES;
use herald_types::{Address, DeliveryMode};
use mail_parser::MessageParser;

/// Longest line examined for a command.
pub const MAX_LINE_CHARS: usize = 1000;

/// A command found in a request mail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Subscribe,
    Unsubscribe,
    Help,
    Confirm(String),
    Approve(String),
    Reject(String),
    /// `set digest …` / `set nomail …`: the member's new delivery mode.
    SetDelivery(DeliveryMode),
}

/// What a request mail asks, and who asks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub sender: Address,
    pub command: Option<Command>,
    /// Lines actually examined (for the bounded-input test).
    pub lines_read: usize,
}

/// Parses a request mail; `None` when it must not be answered (no usable sender, or automatic
/// mail).
pub fn parse(body: &[u8], envelope_from: Option<&Address>, max_lines: usize) -> Option<Request> {
    let envelope_from = envelope_from?;
    let msg = MessageParser::new().parse(body)?;
    let header = |n: &str| msg.header_raw(n).map(|v| v.trim().to_ascii_lowercase());
    if header("Auto-Submitted").is_some_and(|v| v != "no")
        || header("Precedence").is_some_and(|v| matches!(v.as_str(), "bulk" | "list" | "junk"))
    {
        return None;
    }
    let sender = msg
        .from()
        .and_then(|f| f.first())
        .and_then(|a| a.address())
        .and_then(|a| Address::parse(a).ok())
        .unwrap_or_else(|| envelope_from.clone());
    if let Some(c) = msg.subject().and_then(command_in) {
        return Some(Request {
            sender,
            command: Some(c),
            lines_read: 0,
        });
    }
    let text = msg.body_text(0).unwrap_or_default();
    let mut lines_read = 0;
    let mut command = None;
    for line in text.lines().take(max_lines) {
        lines_read += 1;
        let line: String = line.chars().take(MAX_LINE_CHARS).collect();
        if let Some(c) = command_in(&line) {
            command = Some(c);
            break;
        }
    }
    Some(Request {
        sender,
        command,
        lines_read,
    })
}

/// The command a line or subject starts with (after any `Re:`), ignoring quoted lines.
fn command_in(line: &str) -> Option<Command> {
    let mut rest = line.trim();
    if rest.starts_with('>') {
        return None;
    }
    while let Some(r) = rest
        .strip_prefix("Re:")
        .or_else(|| rest.strip_prefix("RE:"))
        .or_else(|| rest.strip_prefix("re:"))
        .or_else(|| rest.strip_prefix("AW:"))
    {
        rest = r.trim_start();
    }
    let mut words = rest.split_whitespace();
    let first = words.next()?.to_ascii_lowercase();
    match first.as_str() {
        "subscribe" | "join" => Some(Command::Subscribe),
        "unsubscribe" | "leave" | "remove" => Some(Command::Unsubscribe),
        "help" => Some(Command::Help),
        "confirm" => words
            .next()
            .filter(|t| t.len() <= MAX_TOKEN_BYTES)
            .map(|t| Command::Confirm(t.to_string())),
        "approve" => words
            .next()
            .filter(|t| t.len() <= MAX_TOKEN_BYTES)
            .map(|t| Command::Approve(t.to_string())),
        "reject" => words
            .next()
            .filter(|t| t.len() <= MAX_TOKEN_BYTES)
            .map(|t| Command::Reject(t.to_string())),
        "set" => set_command(words).map(Command::SetDelivery),
        _ => None,
    }
}

/// `set digest mime|plain|off` or `set nomail on|off` (words in any case, nothing after them:
/// a line with more is not this command, so prose starting with "set" is never acted on).
fn set_command<'a>(mut words: impl Iterator<Item = &'a str>) -> Option<DeliveryMode> {
    let setting = words.next()?.to_ascii_lowercase();
    let value = words.next()?.to_ascii_lowercase();
    if words.next().is_some() {
        return None;
    }
    match (setting.as_str(), value.as_str()) {
        ("digest", "mime") => Some(DeliveryMode::DigestMime),
        ("digest", "plain") => Some(DeliveryMode::DigestPlain),
        ("digest", "off") | ("nomail", "off") => Some(DeliveryMode::Regular),
        ("nomail", "on") => Some(DeliveryMode::Nomail),
        _ => None,
    }
}

/// The help text sent for `help` and for mail with no command.
pub fn help_text(w: &herald_i18n::Words<'_>, list: &Address) -> String {
    let request = herald_types::verp::request_address(list).to_string();
    let list = list.to_string();
    let mut t = w.text("help-text", &[("list", &list), ("request", &request)]);
    t.push('\n');
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from() -> Address {
        Address::parse("bob@x.test").expect("address")
    }

    #[test]
    fn commands_in_subject_or_body() {
        let m = b"From: Bob <bob@x.test>\r\nSubject: subscribe\r\n\r\n";
        let r = parse(m, Some(&from()), 50).expect("parsed");
        assert_eq!(r.command, Some(Command::Subscribe));
        let m = b"From: bob@x.test\r\nSubject: hi\r\n\r\n> unsubscribe\r\n\r\nUnsubscribe me\r\n";
        assert_eq!(
            parse(m, Some(&from()), 50).expect("p").command,
            Some(Command::Unsubscribe)
        );
        let m = b"From: bob@x.test\r\nSubject: Re: confirm abc.def\r\n\r\n";
        assert_eq!(
            parse(m, Some(&from()), 50).expect("p").command,
            Some(Command::Confirm("abc.def".into()))
        );
        let m = b"From: mod@x.test\r\nSubject: Re: approve t.k\r\n\r\n";
        assert_eq!(
            parse(m, Some(&from()), 50).expect("p").command,
            Some(Command::Approve("t.k".into()))
        );
        let m = b"From: mod@x.test\r\nSubject: Re: held\r\n\r\nreject t.k\r\n";
        assert_eq!(
            parse(m, Some(&from()), 50).expect("p").command,
            Some(Command::Reject("t.k".into()))
        );
        let m = b"From: mod@x.test\r\nSubject: approve\r\n\r\n";
        assert_eq!(parse(m, Some(&from()), 50).expect("p").command, None);
    }

    #[test]
    fn set_commands_name_a_delivery_mode() {
        let cmd = |line: &str| {
            let m = format!("From: bob@x.test\r\nSubject: hi\r\n\r\n{line}\r\n");
            parse(m.as_bytes(), Some(&from()), 50).expect("p").command
        };
        let set = |m| Some(Command::SetDelivery(m));
        assert_eq!(cmd("set digest mime"), set(DeliveryMode::DigestMime));
        assert_eq!(cmd("  SET Digest PLAIN  "), set(DeliveryMode::DigestPlain));
        assert_eq!(cmd("set digest off"), set(DeliveryMode::Regular));
        assert_eq!(cmd("set nomail on"), set(DeliveryMode::Nomail));
        assert_eq!(cmd("set nomail off"), set(DeliveryMode::Regular));
        let m = b"From: bob@x.test\r\nSubject: Re: set digest mime\r\n\r\n";
        assert_eq!(
            parse(m, Some(&from()), 50).expect("p").command,
            set(DeliveryMode::DigestMime)
        );
    }

    /// Hostile and malformed `set` lines are no command (the sender gets the help), never a
    /// guess: a quoted line, prose, extra words, unknown values, control characters, a
    /// 100,000-character value and a command past the line budget.
    #[test]
    fn malformed_set_commands_are_refused() {
        let cmd = |body: &str| {
            let m = format!("From: bob@x.test\r\nSubject: hi\r\n\r\n{body}\r\n");
            parse(m.as_bytes(), Some(&from()), 50).expect("p").command
        };
        for bad in [
            "> set digest mime",
            "set",
            "set digest",
            "set digest mime please",
            "set digest html",
            "set digest on",
            "set nomail yes",
            "set nomail",
            "set delivery off",
            "set digest\u{0}mime",
            "set digest mime\u{7}",
            "setdigest mime",
            "set digest-mime",
            "set me up with digests",
        ] {
            assert_eq!(cmd(bad), None, "{bad:?}");
        }
        let long = format!("set digest {}", "m".repeat(100_000));
        assert_eq!(cmd(&long), None);
        let late = format!("{}set nomail on", "blah\r\n".repeat(60));
        assert_eq!(cmd(&late), None, "past request_max_lines");
    }

    #[test]
    fn automatic_mail_and_the_null_sender_get_no_answer() {
        let m = b"From: bob@x.test\r\nAuto-Submitted: auto-replied\r\nSubject: subscribe\r\n\r\n";
        assert!(parse(m, Some(&from()), 50).is_none());
        assert!(parse(b"Subject: subscribe\r\n\r\n", None, 50).is_none());
    }

    #[test]
    fn a_ten_thousand_line_request_reads_only_the_first_lines() {
        let mut m = b"From: bob@x.test\r\nSubject: hello\r\n\r\n".to_vec();
        for _ in 0..10_000 {
            m.extend_from_slice(b"blah blah blah\r\n");
        }
        m.extend_from_slice(b"unsubscribe\r\n");
        let r = parse(&m, Some(&from()), 50).expect("parsed");
        assert_eq!(r.lines_read, 50);
        assert_eq!(r.command, None, "a command after the limit is not read");
    }
}
