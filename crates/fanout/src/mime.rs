//! Where the footer goes without breaking MIME: the body plan, decided once per post.
//!
//! - no footer: the body passes through untouched;
//! - single-part `text/plain`, 7bit/8bit (or no encoding), us-ascii/utf-8 (or no charset):
//!   the footer is appended. Member values may be non-ASCII, so the part is relabeled
//!   `charset=utf-8` and `Content-Transfer-Encoding: 8bit` (us-ascii is a subset of UTF-8, so
//!   the original text reads the same). 8BITMIME is offered by every modern receiver; a
//!   receiver without it would need a downgrade, which Herald does not do;
//! - `multipart/mixed` with a well-formed closing delimiter: a `text/plain; charset=utf-8`
//!   footer part is inserted just before the closing delimiter;
//! - anything else (quoted-printable or base64 text, html, alternative, related, signed,
//!   other charsets, malformed multiparts): the original body and its `Content-*` fields become
//!   the first part of a new `multipart/mixed`, the footer the second.
//!
//! Invariants: a generated boundary occurs nowhere in the post or the footer template, and is
//! derived from the list secret, so a member cannot predict it and plant it in a custom field.
//!
//! SECURITY: the post is untrusted and its MIME may be malformed on purpose. Nothing here
//! panics; every doubt (unparseable Content-Type, no boundary, no closing delimiter, an encoded
//! multipart) falls back to wrapping, which is valid whatever the original body holds.

use crate::footer::Piece;
use crate::message::{find, Field, Post};
use crate::template::{Builder, Slot};
use crate::token::keyed_mac;
use crate::FanoutError;
use hmac::Mac;
use mail_parser::{MessageParser, MimeHeaders};

/// Headers of the footer part in the multipart cases.
pub(crate) const FOOTER_PART_HEADERS: &[u8] = b"Content-Type: text/plain; charset=utf-8\r\n\
Content-Transfer-Encoding: 8bit\r\nContent-Disposition: inline\r\n\r\n";
/// Candidates tried before giving up on finding a boundary absent from the post.
const BOUNDARY_ATTEMPTS: u32 = 64;

/// How the body is laid out around the footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BodyPlan {
    /// No footer: the body passes through.
    Unchanged,
    /// Append the footer to a single text/plain part.
    Append,
    /// Insert a footer part into a multipart/mixed body: `close` is the offset in the body of
    /// the CRLF that starts the closing delimiter.
    InsertPart { boundary: String, close: usize },
    /// Wrap the body in a new multipart/mixed with this boundary.
    Wrap { boundary: String },
}

/// Header changes that go with a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HeaderEdits {
    /// Drop every `Content-*` field (they move into the first part of a wrap).
    pub drop_content_fields: bool,
    /// Drop `Content-Type` and add this complete field instead.
    pub content_type: Option<Vec<u8>>,
    /// Drop `Content-Transfer-Encoding` and add this complete field instead.
    pub transfer_encoding: Option<Vec<u8>>,
    /// Add `MIME-Version: 1.0` (the post has none).
    pub add_mime_version: bool,
}

/// What the parsed post's top-level `Content-*` fields say.
struct Shape {
    /// Lower-cased `type/subtype`; None when absent. Unparseable → `Some("invalid")`.
    mime_type: Option<String>,
    charset: Option<String>,
    boundary: Option<String>,
    /// Parameters other than charset and boundary, to carry over when relabeling.
    other_params: Vec<(String, String)>,
    /// Lower-cased, trimmed `Content-Transfer-Encoding`, None when absent.
    encoding: Option<String>,
}

/// Decides the body plan and the header edits it needs.
pub(crate) fn plan(
    post: &Post<'_>,
    msg: &[u8],
    footer: Option<&str>,
    secret: &[u8],
) -> Result<(BodyPlan, HeaderEdits), FanoutError> {
    let Some(footer) = footer else {
        return Ok((BodyPlan::Unchanged, HeaderEdits::default()));
    };
    let shape = shape(post);
    let has_mime_version = post.first("MIME-Version").is_some();
    let enc7or8 = matches!(shape.encoding.as_deref(), None | Some("7bit" | "8bit"));
    let mime_type = shape.mime_type.as_deref();
    if matches!(mime_type, None | Some("text/plain"))
        && enc7or8
        && charset_is_utf8_compatible(&shape)
    {
        return Ok((BodyPlan::Append, relabel(&shape, has_mime_version)));
    }
    if mime_type == Some("multipart/mixed") {
        if let Some(insert) = insert_plan(post, &shape) {
            return Ok(insert);
        }
    }
    let boundary = make_boundary(msg, footer, secret)?;
    let outer_encoding = if shape.encoding.as_deref() == Some("binary") {
        "binary"
    } else {
        "8bit"
    };
    let edits = HeaderEdits {
        drop_content_fields: true,
        content_type: Some(
            format!("Content-Type: multipart/mixed; boundary=\"{boundary}\"\r\n").into_bytes(),
        ),
        transfer_encoding: Some(
            format!("Content-Transfer-Encoding: {outer_encoding}\r\n").into_bytes(),
        ),
        add_mime_version: !has_mime_version,
    };
    Ok((BodyPlan::Wrap { boundary }, edits))
}

/// The footer part can go into an existing multipart/mixed when the body has a proper
/// opening and closing delimiter and the multipart is not (illegally) transfer-encoded.
fn insert_plan(post: &Post<'_>, shape: &Shape) -> Option<(BodyPlan, HeaderEdits)> {
    let encoding = shape.encoding.as_deref();
    if !matches!(encoding, None | Some("7bit" | "8bit" | "binary")) {
        return None;
    }
    let boundary = shape.boundary.clone()?;
    let close = closing_delimiter(post.body, &boundary)?;
    let edits = HeaderEdits {
        // A multipart that declares 7bit may not hold our 8bit footer part.
        transfer_encoding: (encoding == Some("7bit"))
            .then(|| b"Content-Transfer-Encoding: 8bit\r\n".to_vec()),
        ..HeaderEdits::default()
    };
    Some((BodyPlan::InsertPart { boundary, close }, edits))
}

fn charset_is_utf8_compatible(shape: &Shape) -> bool {
    match shape.charset.as_deref() {
        None => true,
        Some(c) => ["us-ascii", "ascii", "utf-8", "utf8"]
            .iter()
            .any(|k| c.eq_ignore_ascii_case(k)),
    }
}

/// Reads the first `Content-Type` and `Content-Transfer-Encoding` fields with mail-parser,
/// each parsed on its own so duplicates later in the header cannot change the answer.
fn shape(post: &Post<'_>) -> Shape {
    let parser = MessageParser::new();
    let mut shape = Shape {
        mime_type: None,
        charset: None,
        boundary: None,
        other_params: Vec::new(),
        encoding: None,
    };
    if let Some(f) = post.first("Content-Type") {
        let parsed = parse_field(&parser, f);
        let ct = parsed.as_ref().and_then(|m| m.content_type());
        match ct {
            Some(ct) => {
                let subtype = ct.subtype().unwrap_or("");
                shape.mime_type = Some(format!("{}/{}", ct.ctype(), subtype).to_ascii_lowercase());
                for attr in ct.attributes().unwrap_or(&[]) {
                    match attr.name.as_ref() {
                        "charset" => shape.charset = Some(attr.value.to_string()),
                        "boundary" => shape.boundary = Some(attr.value.to_string()),
                        name => shape
                            .other_params
                            .push((name.to_string(), attr.value.to_string())),
                    }
                }
            }
            None => shape.mime_type = Some("invalid".to_string()),
        }
    }
    if let Some(f) = post.first("Content-Transfer-Encoding") {
        let value = String::from_utf8_lossy(f.value);
        shape.encoding = Some(value.trim().to_ascii_lowercase());
    }
    shape
}

fn parse_field<'a>(parser: &MessageParser, f: &Field<'a>) -> Option<mail_parser::Message<'a>> {
    parser.parse_headers(f.raw)
}

/// Header edits for appending to a text/plain part: UTF-8, 8bit, MIME-Version present.
fn relabel(shape: &Shape, has_mime_version: bool) -> HeaderEdits {
    let utf8 = shape
        .charset
        .as_deref()
        .is_some_and(|c| c.eq_ignore_ascii_case("utf-8"));
    let content_type = (!utf8).then(|| {
        let mut params = vec!["charset=utf-8".to_string()];
        params.extend(shape.other_params.iter().filter_map(|(n, v)| param(n, v)));
        let mut out = Vec::new();
        let mut f = crate::encode::Folder::new(&mut out, "Content-Type");
        f.token(&[b"text/plain;"]);
        for (i, p) in params.iter().enumerate() {
            let sep: &[u8] = if i + 1 < params.len() { b";" } else { b"" };
            f.token(&[p.as_bytes(), sep]);
        }
        f.finish();
        out
    });
    HeaderEdits {
        drop_content_fields: false,
        content_type,
        transfer_encoding: (shape.encoding.as_deref() != Some("8bit"))
            .then(|| b"Content-Transfer-Encoding: 8bit\r\n".to_vec()),
        add_mime_version: !has_mime_version,
    }
}

/// `name=value` for a carried-over Content-Type parameter, quoted when the value is not a
/// token. RFC 2231-decoded values may be non-ASCII; such parameters are dropped rather than
/// written back in a form some readers would mangle.
fn param(name: &str, value: &str) -> Option<String> {
    let name_ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !name_ok || !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    let is_token = !value.is_empty()
        && value
            .bytes()
            .all(|b| b > b' ' && !b"()<>@,;:\\\"/[]?=".contains(&b));
    Some(if is_token {
        format!("{name}={value}")
    } else {
        format!(
            "{name}=\"{}\"",
            value.replace('\\', "\\\\").replace('"', "\\\"")
        )
    })
}

/// Offset of the CRLF before the first closing delimiter `--boundary--` of the body, when the
/// body also has an opening delimiter before it. RFC 2046 forbids the boundary inside parts, so
/// the first closing line is the real one (a later one would be in the epilogue).
fn closing_delimiter(body: &[u8], boundary: &str) -> Option<usize> {
    let dash = format!("--{boundary}");
    let mut opened = false;
    let mut start = 0;
    while start < body.len() {
        let end = find(&body[start..], b"\r\n").map_or(body.len(), |i| start + i);
        let line = &body[start..end];
        if let Some(rest) = line.strip_prefix(dash.as_bytes()) {
            if let Some(after) = rest.strip_prefix(b"--") {
                let padding_only = after.iter().all(|&b| b == b' ' || b == b'\t');
                return (opened && padding_only && start >= 2).then(|| start - 2);
            }
            opened |= rest.iter().all(|&b| b == b' ' || b == b'\t');
        }
        start = end + 2;
    }
    None
}

/// A boundary that occurs neither in the post nor in the footer template. Keyed by the list
/// secret so nobody outside can predict it (see the module SECURITY note).
fn make_boundary(msg: &[u8], footer: &str, secret: &[u8]) -> Result<String, FanoutError> {
    let digest = {
        let mut mac = keyed_mac(secret);
        mac.update(msg);
        mac.finalize().into_bytes()
    };
    for attempt in 0..BOUNDARY_ATTEMPTS {
        let mut mac = keyed_mac(secret);
        mac.update(&digest);
        mac.update(&attempt.to_be_bytes());
        let tag = mac.finalize().into_bytes();
        let mut b = String::from("=_herald_");
        for byte in &tag[..12] {
            b.push_str(&format!("{byte:02x}"));
        }
        if find(msg, b.as_bytes()).is_none() && !footer.contains(&b) {
            return Ok(b);
        }
    }
    Err(FanoutError::NoBoundary)
}

/// Writes the body according to `plan`, with the footer pieces where the plan puts them.
pub(crate) fn write_body(b: &mut Builder, plan: &BodyPlan, post: &Post<'_>, footer: &[Piece]) {
    let body = post.body;
    match plan {
        BodyPlan::Unchanged => b.push(body),
        BodyPlan::Append => {
            b.push(body);
            if !body.is_empty() {
                // A blank line between the post and the footer.
                b.push(b"\r\n");
            }
            write_footer(b, footer);
        }
        BodyPlan::InsertPart { boundary, close } => {
            b.push(&body[..*close]);
            b.push(format!("\r\n--{boundary}\r\n").as_bytes());
            b.push(FOOTER_PART_HEADERS);
            write_footer(b, footer);
            // `body[close..]` starts with the CRLF of the closing delimiter.
            b.push(&body[*close..]);
        }
        BodyPlan::Wrap { boundary } => {
            b.push(
                format!("This is a multi-part message in MIME format.\r\n\r\n--{boundary}\r\n")
                    .as_bytes(),
            );
            for f in post.fields.iter().filter(|f| f.is_content_field()) {
                b.push(f.raw);
            }
            b.push(b"\r\n");
            // The body ends with CRLF (normalized) or is empty; the CRLF below belongs to the
            // delimiter, so the original part's content is exactly the original body.
            b.push(body);
            b.push(format!("\r\n--{boundary}\r\n").as_bytes());
            b.push(FOOTER_PART_HEADERS);
            write_footer(b, footer);
            b.push(format!("\r\n--{boundary}--\r\n").as_bytes());
        }
    }
}

fn write_footer(b: &mut Builder, footer: &[Piece]) {
    for piece in footer {
        match piece {
            Piece::Text(t) => b.push(t.as_bytes()),
            Piece::Slot { value, cap } => b.slot(Slot::Footer {
                value: value.clone(),
                cap: *cap,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_closing_delimiter() {
        let body = b"pre\r\n--b\r\n\r\nx\r\n--b--\r\nepi\r\n--b--\r\n";
        assert_eq!(closing_delimiter(body, "b"), Some(13));
        assert_eq!(&body[13..20], b"\r\n--b--");
    }

    #[test]
    fn refuses_missing_or_early_delimiters() {
        assert_eq!(closing_delimiter(b"--b\r\nx\r\n", "b"), None);
        assert_eq!(closing_delimiter(b"--b--\r\n", "b"), None);
        assert_eq!(closing_delimiter(b"x\r\n--b--\r\n--b\r\n", "b"), None);
        assert_eq!(closing_delimiter(b"--bc\r\nx\r\n--b--\r\n", "b"), None);
    }

    #[test]
    fn boundary_avoids_the_post() {
        let b = make_boundary(b"hello", "", b"k").unwrap();
        assert!(b.starts_with("=_herald_") && b.len() == 33);
        assert_ne!(b, make_boundary(b"hello", "", b"other").unwrap());
    }
}
