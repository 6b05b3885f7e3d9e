//! The DATA phase, as pure functions over the session's input buffer: finding the end of the
//! message, undoing dot-stuffing, and reading the Message-ID.
//!
//! Speed matters here (every byte of every message passes through): the end marker is found
//! with a SIMD substring search (memchr::memmem), resuming where the previous search stopped,
//! and dot-unstuffing copies only when a line actually starts with a dot.
//!
//! SECURITY: bytes are untrusted; all indexing is bounds-checked by construction (positions come
//! from searches within the same slice).

use bytes::{Bytes, BytesMut};
use memchr::memmem;

/// The end-of-data marker after the first line (RFC 5321 §4.1.1.4).
const END: &[u8] = b"\r\n.\r\n";

/// Where the message ends in `buf`, which starts at the beginning of a line of the message
/// (`at_line_start` — only right after the DATA command). `from` is where to resume searching
/// (the previous buffer length minus the marker length, so a marker split across reads is
/// found). Returns `(message length including its last CRLF, bytes consumed)`.
pub(crate) fn find_end(buf: &[u8], from: usize, at_line_start: bool) -> Option<(usize, usize)> {
    if at_line_start && buf.starts_with(b".\r\n") {
        return Some((0, 3));
    }
    let from = from.min(buf.len());
    let pos = memmem::find(&buf[from..], END)? + from;
    Some((pos + 2, pos + END.len()))
}

/// Removes the leading dot of each line that starts with one (RFC 5321 §4.5.2). Returns the
/// input unchanged (no copy) when no line does.
pub(crate) fn unstuff(msg: Bytes) -> Bytes {
    let first_dot = msg.first() == Some(&b'.');
    let finder = memmem::Finder::new(b"\r\n.");
    if !first_dot && finder.find(&msg).is_none() {
        return msg;
    }
    let mut out = BytesMut::with_capacity(msg.len());
    let mut start = usize::from(first_dot);
    for pos in finder.find_iter(&msg) {
        // Keep "\r\n", skip the dot.
        out.extend_from_slice(&msg[start..pos + 2]);
        start = pos + 3;
    }
    out.extend_from_slice(&msg[start.min(msg.len())..]);
    out.freeze()
}

/// The Message-ID field's value (unfolded, trimmed), from the header section.
pub(crate) fn message_id(msg: &[u8]) -> Option<String> {
    let header_end = memmem::find(msg, b"\r\n\r\n").map_or(msg.len(), |p| p + 2);
    let header = &msg[..header_end];
    let mut lines = header.split(|&b| b == b'\n').peekable();
    while let Some(line) = lines.next() {
        let Some(value) = strip_field_name(line, b"message-id:") else {
            continue;
        };
        let mut v = String::from_utf8_lossy(value).into_owned();
        // Folded continuation lines begin with white space.
        while let Some(next) =
            lines.next_if(|l| l.first().is_some_and(|b| *b == b' ' || *b == b'\t'))
        {
            v.push_str(&String::from_utf8_lossy(next));
        }
        let v: String = v.split_whitespace().collect::<Vec<_>>().join("");
        return (!v.is_empty()).then_some(v);
    }
    None
}

fn strip_field_name<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let head = line.get(..name.len())?;
    head.eq_ignore_ascii_case(name).then(|| &line[name.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_end_across_reads_and_the_empty_message() {
        assert_eq!(find_end(b".\r\nMAIL", 0, true), Some((0, 3)));
        assert_eq!(find_end(b".\r\n", 0, false), None);
        let buf = b"a\r\nb\r\n.\r\nQUIT\r\n";
        assert_eq!(find_end(buf, 0, true), Some((6, 9)));
        assert_eq!(find_end(buf, 2, true), Some((6, 9)));
        assert_eq!(find_end(b"a\r\n.\r", 0, true), None);
    }

    #[test]
    fn unstuffs_leading_dots_only() {
        let m = Bytes::from_static(b"..first\r\nmid\r\n..dot\r\n.x\r\n");
        assert_eq!(&unstuff(m)[..], b".first\r\nmid\r\n.dot\r\nx\r\n");
        let plain = Bytes::from_static(b"no dots\r\n");
        assert_eq!(unstuff(plain.clone()).as_ptr(), plain.as_ptr(), "no copy");
    }

    #[test]
    fn reads_folded_message_id() {
        let m = b"From: a@b\r\nMessage-Id:\r\n <abc@x.example>\r\nSubject: s\r\n\r\nMessage-ID: <body>\r\n";
        assert_eq!(message_id(m).as_deref(), Some("<abc@x.example>"));
        assert_eq!(message_id(b"From: a@b\r\n\r\n"), None);
    }
}
