//! Is an accepted message well-formed? Two levels: a cheap strict line-level check (CRLF only, ≤ 998-octet lines,
//! header fields that are `name: value` or folded continuations, 7-bit headers) followed by
//! mail-parser for the MIME structure (a From field, a boundary and a closing delimiter for every
//! multipart, MIME-Version when multipart, decodable transfer encodings). The first costs a few
//! memchr scans and runs on every message; the second costs more than receiving the message and
//! is sampled (`ReceiverSettings::check_mime_every`).
//!
//! Limits: this is not a full RFC 5322/2045 validator; it catches what a list server is likely
//! to break while splicing and re-encoding (line endings, header folding, multipart boundaries,
//! broken base64/quoted-printable). Date is not required: some posts lack it and Herald does not
//! add one.
//!
//! SECURITY: the input is a message from the network; every slice is taken with `get` and
//! mail-parser is known to tolerate arbitrary bytes.

use mail_parser::{MessageParser, MimeHeaders, PartType};

/// Longest line RFC 5322 §2.1.1 allows, without its CRLF.
const MAX_LINE: usize = 998;

/// The verdict on one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MimeVerdict {
    /// Not checked (`ReceiverSettings::check_mime_every` is 0).
    NotChecked,
    /// The cheap line and header-field checks passed; the MIME structure was not parsed
    /// (sampling: see `ReceiverSettings::check_mime_every`).
    LinesOk,
    /// Passed every check.
    WellFormed,
    /// Failed; the text says the first problem found.
    Malformed(&'static str),
}

impl MimeVerdict {
    /// `Some(true)` when fully checked and well-formed, `Some(false)` when malformed (by any
    /// check), `None` when not checked or only line-checked.
    pub fn is_well_formed(self) -> Option<bool> {
        match self {
            MimeVerdict::NotChecked | MimeVerdict::LinesOk => None,
            MimeVerdict::WellFormed => Some(true),
            MimeVerdict::Malformed(_) => Some(false),
        }
    }
}

/// Fully checks one message (after dot-unstuffing, without the final `.` line).
pub fn check(msg: &[u8]) -> MimeVerdict {
    match check_syntax(msg).and_then(|()| check_structure(msg)) {
        Ok(()) => MimeVerdict::WellFormed,
        Err(problem) => MimeVerdict::Malformed(problem),
    }
}

/// Only the cheap checks (line endings and lengths, header field syntax): a few memchr scans,
/// cheap enough for every message at full receiver speed.
pub fn check_lines_only(msg: &[u8]) -> MimeVerdict {
    match check_syntax(msg) {
        Ok(()) => MimeVerdict::LinesOk,
        Err(problem) => MimeVerdict::Malformed(problem),
    }
}

fn check_syntax(msg: &[u8]) -> Result<(), &'static str> {
    check_lines(msg)?;
    let header_end = memchr::memmem::find(msg, b"\r\n\r\n").map_or(msg.len(), |p| p + 2);
    check_header_fields(msg.get(..header_end).unwrap_or(msg))
}

/// The expensive part: mail-parser's view of the structure.
fn check_structure(msg: &[u8]) -> Result<(), &'static str> {
    let parsed = MessageParser::default()
        .parse(msg)
        .ok_or("not parseable as a message")?;
    if parsed.from().is_none() {
        return Err("no From field");
    }
    let has_mime_version = parsed.header("MIME-Version").is_some();
    for part in &parsed.parts {
        if part.is_encoding_problem {
            return Err("a body part has an undecodable transfer encoding");
        }
        let Some(ct) = part.content_type() else {
            continue;
        };
        if !ct.ctype().eq_ignore_ascii_case("multipart") {
            continue;
        }
        if !has_mime_version {
            return Err("multipart without MIME-Version");
        }
        let boundary = ct
            .attribute("boundary")
            .ok_or("multipart without boundary")?;
        let body = msg
            .get(part.offset_body as usize..part.offset_end as usize)
            .unwrap_or_default();
        let closing = format!("--{boundary}--");
        if memchr::memmem::find(body, closing.as_bytes()).is_none() {
            return Err("multipart without its closing boundary");
        }
        if matches!(&part.body, PartType::Multipart(children) if children.is_empty()) {
            return Err("multipart with no parts");
        }
    }
    Ok(())
}

/// CRLF line endings only, no NUL, and no line longer than 998 octets. Whole-buffer SIMD scans
/// rather than per-line work: this runs on every accepted message.
fn check_lines(msg: &[u8]) -> Result<(), &'static str> {
    if memchr::memchr(0, msg).is_some() {
        return Err("NUL octet");
    }
    let mut line_start = 0;
    let mut lfs = 0usize;
    for nl in memchr::memchr_iter(b'\n', msg) {
        if nl == 0 || msg[nl - 1] != b'\r' {
            return Err("bare LF");
        }
        if nl - 1 - line_start > MAX_LINE {
            return Err("line longer than 998 octets");
        }
        line_start = nl + 1;
        lfs += 1;
    }
    if msg.len() - line_start > MAX_LINE {
        return Err("line longer than 998 octets");
    }
    // Every LF follows a CR (checked above), so any CR beyond the LF count stands alone.
    if memchr::memchr_iter(b'\r', msg).count() != lfs {
        return Err("bare CR");
    }
    Ok(())
}

/// Each header line is a field (`name:` with a printable name) or a folded continuation of the
/// previous one; headers are 7-bit (8-bit headers need SMTPUTF8, which the receivers do not
/// offer).
fn check_header_fields(header: &[u8]) -> Result<(), &'static str> {
    let mut first = true;
    for line in header.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        if !line.is_ascii() {
            return Err("8-bit header");
        }
        if line[0] == b' ' || line[0] == b'\t' {
            if first {
                return Err("header starts with a continuation line");
            }
            continue;
        }
        let colon = memchr::memchr(b':', line).ok_or("header line without a colon")?;
        let name = &line[..colon];
        if name.is_empty() || !name.iter().all(|b| (33..=126).contains(b)) {
            return Err("invalid header field name");
        }
        first = false;
    }
    if first {
        return Err("no header fields");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &[u8] = b"From: a@b.example\r\nTo: c@d.example\r\nSubject: hi\r\n\r\nbody\r\n";

    #[test]
    fn accepts_a_plain_message() {
        assert_eq!(check(GOOD), MimeVerdict::WellFormed);
        assert_eq!(check_lines_only(GOOD), MimeVerdict::LinesOk);
        assert_eq!(
            check_lines_only(b"From: a\nb\n"),
            MimeVerdict::Malformed("bare LF")
        );
    }

    #[test]
    fn accepts_a_multipart_message() {
        let m = b"From: a@b.example\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/alternative; boundary=\"XX\"\r\n\r\n\
--XX\r\nContent-Type: text/plain\r\n\r\nhello\r\n--XX\r\n\
Content-Type: text/html\r\n\r\n<p>hello</p>\r\n--XX--\r\n";
        assert_eq!(check(m), MimeVerdict::WellFormed);
    }

    #[test]
    fn flags_common_breakage() {
        let cases: [(&[u8], &str); 6] = [
            (b"From: a@b.example\nSubject: x\n\nbody\n", "bare LF"),
            (b"Subject: x\r\n\r\nbody\r\n", "no From field"),
            (b" folded: x\r\nFrom: a@b.example\r\n\r\n", "header starts with a continuation line"),
            (b"From: a@b.example\r\nno colon here\r\n\r\nx\r\n", "header line without a colon"),
            (
                b"From: a@b.example\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=Q\r\n\r\n--Q\r\n\r\nx\r\n",
                "multipart without its closing boundary",
            ),
            (
                b"From: a@b.example\r\nContent-Type: multipart/mixed; boundary=Q\r\n\r\n--Q\r\n\r\nx\r\n--Q--\r\n",
                "multipart without MIME-Version",
            ),
        ];
        for (msg, want) in cases {
            assert_eq!(
                check(msg),
                MimeVerdict::Malformed(want),
                "{:?}",
                String::from_utf8_lossy(msg)
            );
        }
        let long = format!("From: a@b.example\r\n\r\n{}\r\n", "x".repeat(999));
        assert_eq!(
            check(long.as_bytes()),
            MimeVerdict::Malformed("line longer than 998 octets")
        );
    }
}
