//! Reading a post's header on the enqueue path: the `From:` address and `Message-ID:` it
//! decides on (parsed once per post), and the CRLF line endings the spool keeps.
//!
//! SECURITY: the header is untrusted; mail-parser parses it, a `From:` counts only when it
//! parses as an address Herald accepts, and a Message-ID is cut to 998 characters.

use bytes::Bytes;
use herald_types::Address;

/// The header fields the enqueue path decides on, parsed once per post.
pub(super) struct Heads {
    /// The first address of `From:`, if it parses as an address Herald accepts.
    pub(super) from: Option<Address>,
    /// `Message-ID:` without angle brackets (at most 998 characters).
    pub(super) message_id: Option<String>,
}

impl Heads {
    pub(super) fn parse(body: &[u8]) -> Heads {
        let Some(msg) = mail_parser::MessageParser::new().parse_headers(body) else {
            return Heads {
                from: None,
                message_id: None,
            };
        };
        Heads {
            from: msg
                .from()
                .and_then(|f| f.first())
                .and_then(|a| a.address())
                .and_then(|a| Address::parse(a).ok()),
            message_id: msg.message_id().map(|s| s.chars().take(998).collect()),
        }
    }
}

/// The first address of the From header, if it parses as an address Herald accepts.
pub fn from_header(body: &[u8]) -> Option<Address> {
    let msg = mail_parser::MessageParser::new().parse_headers(body)?;
    let addr = msg.from()?.first()?.address()?;
    Address::parse(addr).ok()
}

/// The Message-ID header (without angle brackets), kept for duplicate suppression.
pub(super) fn message_id(body: &[u8]) -> Option<String> {
    let msg = mail_parser::MessageParser::new().parse_headers(body)?;
    msg.message_id().map(|s| s.chars().take(998).collect())
}

/// Files on disk often have bare LF line endings; the spool keeps CRLF, as SMTP delivers it.
pub fn crlf(body: Bytes) -> Bytes {
    let has_bare_lf = body
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || body[i - 1] != b'\r'));
    if !has_bare_lf {
        return body;
    }
    let mut out = Vec::with_capacity(body.len() + body.len() / 40);
    let mut prev = 0u8;
    for &b in body.iter() {
        if b == b'\n' && prev != b'\r' {
            out.push(b'\r');
        }
        out.push(b);
        prev = b;
    }
    Bytes::from(out)
}
