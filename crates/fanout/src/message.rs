//! Reading a post once: line endings, the header block, header fields.
//!
//! Invariants: after [`normalize`], every line of the post ends with CRLF, including the last
//! one; [`split`] returns slices of that normalized buffer, and each [`Field::raw`] is the
//! field's exact bytes including its folding and final CRLF, so a kept field is copied
//! byte-for-byte.
//!
//! Limits: the header block is at most [`MAX_HEADER_BYTES`]; a post without a blank line in
//! its first [`MAX_HEADER_BYTES`] bytes is refused. Line length is not checked here (inbound
//! enforces it).
//!
//! SECURITY: the post is untrusted. Nothing here panics on any input; a header line that is
//! not a field is refused rather than passed on, because receivers disagree on how to read it.

use crate::FanoutError;
use std::borrow::Cow;

/// Largest header block accepted (the bytes before the blank line).
pub const MAX_HEADER_BYTES: usize = 256 * 1024;

/// One header field of the post.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field<'a> {
    /// The field name as written (without trailing whitespace before the colon).
    pub name: &'a str,
    /// The whole field: name, colon, value, folding and the final CRLF.
    pub raw: &'a [u8],
    /// The value: everything after the colon, without the final CRLF.
    pub value: &'a [u8],
}

impl Field<'_> {
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
    }

    /// `Content-*` fields describe the body and move with it when the body is wrapped.
    pub fn is_content_field(&self) -> bool {
        self.name.len() > 8 && self.name[..8].eq_ignore_ascii_case("content-")
    }
}

/// A post split into its header fields and its body.
#[derive(Debug)]
pub(crate) struct Post<'a> {
    pub fields: Vec<Field<'a>>,
    /// Everything after the blank line (empty when there is none).
    pub body: &'a [u8],
}

impl<'a> Post<'a> {
    pub fn first(&self, name: &str) -> Option<&Field<'a>> {
        self.fields.iter().find(|f| f.is(name))
    }
}

/// Rewrites bare LF and bare CR as CRLF and makes sure the post ends with CRLF. Borrows when
/// the post is already clean, which is the normal case (inbound refuses bare LF / CR).
pub(crate) fn normalize(raw: &[u8]) -> Cow<'_, [u8]> {
    if is_clean_crlf(raw) {
        return Cow::Borrowed(raw);
    }
    let mut out = Vec::with_capacity(raw.len() + raw.len() / 32 + 2);
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'\r' if raw.get(i + 1) == Some(&b'\n') => {
                out.extend_from_slice(b"\r\n");
                i += 2;
                continue;
            }
            b'\r' | b'\n' => out.extend_from_slice(b"\r\n"),
            b => out.push(b),
        }
        i += 1;
    }
    if !out.ends_with(b"\r\n") {
        out.extend_from_slice(b"\r\n");
    }
    Cow::Owned(out)
}

fn is_clean_crlf(raw: &[u8]) -> bool {
    if !raw.ends_with(b"\r\n") {
        return false;
    }
    let mut prev = 0u8;
    for (i, &b) in raw.iter().enumerate() {
        let bad = (b == b'\n' && prev != b'\r') || (b == b'\r' && raw.get(i + 1) != Some(&b'\n'));
        if bad {
            return false;
        }
        prev = b;
    }
    true
}

/// Splits a normalized post into header fields and body, enforcing the header limit.
pub(crate) fn split(msg: &[u8]) -> Result<Post<'_>, FanoutError> {
    if msg.is_empty() || msg.starts_with(b"\r\n") {
        return Err(FanoutError::NotAMessage("no header fields"));
    }
    let window = &msg[..msg.len().min(MAX_HEADER_BYTES + 4)];
    let (header, body) = match find(window, b"\r\n\r\n") {
        Some(i) if i + 2 <= MAX_HEADER_BYTES => (&msg[..i + 2], &msg[i + 4..]),
        Some(_) => return Err(too_long()),
        // A post may legally be all header (RFC 5322 makes the body optional).
        None if msg.len() <= MAX_HEADER_BYTES => (msg, &msg[msg.len()..]),
        None => return Err(too_long()),
    };
    Ok(Post {
        fields: parse_fields(header)?,
        body,
    })
}

fn too_long() -> FanoutError {
    FanoutError::HeaderTooLong {
        limit: MAX_HEADER_BYTES,
    }
}

/// Parses a header block whose every line ends with CRLF.
fn parse_fields(header: &[u8]) -> Result<Vec<Field<'_>>, FanoutError> {
    let mut fields: Vec<Field<'_>> = Vec::new();
    let mut start = 0;
    let mut line_no = 0usize;
    while start < header.len() {
        line_no += 1;
        let end = find(&header[start..], b"\r\n").map_or(header.len(), |i| start + i + 2);
        let line = &header[start..end];
        if matches!(line[0], b' ' | b'\t') {
            let last = fields.last_mut().ok_or(FanoutError::NotAMessage(
                "first header line is a continuation",
            ))?;
            let field_start = last.raw.as_ptr() as usize - header.as_ptr() as usize;
            let name_len = last.raw.len() - last.value.len() - 2;
            last.raw = &header[field_start..end];
            last.value = &header[field_start + name_len..end - 2];
        } else {
            fields.push(parse_field_line(line, line_no)?);
        }
        start = end;
    }
    Ok(fields)
}

fn parse_field_line(line: &[u8], line_no: usize) -> Result<Field<'_>, FanoutError> {
    let bad = || FanoutError::Unparseable(format!("header line {line_no} is not a field"));
    let colon = line.iter().position(|&b| b == b':').ok_or_else(bad)?;
    // RFC 5322 obs-optional allows whitespace between the name and the colon.
    let name = trim_end_wsp(&line[..colon]);
    if name.is_empty() || !name.iter().all(|&b| (33..=126).contains(&b)) {
        return Err(bad());
    }
    let name = std::str::from_utf8(name).map_err(|_| bad())?;
    let value_end = line.len().saturating_sub(2).max(colon + 1);
    Ok(Field {
        name,
        raw: line,
        value: &line[colon + 1..value_end],
    })
}

fn trim_end_wsp(b: &[u8]) -> &[u8] {
    let n = b
        .iter()
        .rposition(|&c| c != b' ' && c != b'\t')
        .map_or(0, |i| i + 1);
    &b[..n]
}

/// Position of the first occurrence of `needle` in `hay`.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while let Some(p) = hay[from..].iter().position(|&b| b == first) {
        let at = from + p;
        if hay[at + 1..].starts_with(rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_bare_lf_and_cr() {
        assert_eq!(&*normalize(b"a\nb\rc\r\nd"), b"a\r\nb\r\nc\r\nd\r\n");
        assert!(matches!(normalize(b"a\r\nb\r\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn splits_fields_with_folding() {
        let msg = b"Subject: a\r\n b\r\nTo : x@y\r\n\r\nbody\r\n";
        let post = split(msg).unwrap();
        assert_eq!(post.fields.len(), 2);
        assert_eq!(post.fields[0].raw, b"Subject: a\r\n b\r\n");
        assert_eq!(post.fields[0].value, b" a\r\n b");
        assert_eq!(post.fields[1].name, "To");
        assert_eq!(post.fields[1].value, b" x@y");
        assert_eq!(post.body, b"body\r\n");
    }

    #[test]
    fn refuses_non_messages_and_huge_headers() {
        assert!(matches!(split(b""), Err(FanoutError::NotAMessage(_))));
        assert!(matches!(
            split(b" x\r\n\r\n"),
            Err(FanoutError::NotAMessage(_))
        ));
        assert!(matches!(
            split(b"no colon\r\n\r\n"),
            Err(FanoutError::Unparseable(_))
        ));
        let mut big = b"X: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_HEADER_BYTES));
        big.extend_from_slice(b"\r\n\r\nbody\r\n");
        assert!(matches!(
            split(&big),
            Err(FanoutError::HeaderTooLong { .. })
        ));
        big.truncate(MAX_HEADER_BYTES + 10);
        big.extend_from_slice(b"\r\n");
        assert!(matches!(
            split(&big),
            Err(FanoutError::HeaderTooLong { .. })
        ));
    }

    #[test]
    fn header_only_post_is_accepted() {
        let post = split(b"Subject: x\r\n").unwrap();
        assert_eq!(post.fields.len(), 1);
        assert!(post.body.is_empty());
    }
}
