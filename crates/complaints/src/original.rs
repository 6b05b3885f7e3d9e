//! What the quoted original copy tells: its `Return-Path` (our VERP bounce address), its
//! `List-Id` label and the per-member unsubscribe URL of its `List-Unsubscribe`
//! (`{base}/unsubscribe/{list}/{member}/{token}`, percent-encoded: `herald-fanout` writes it).
//!
//! SECURITY: every value is a claim from the reporter; addresses are re-validated through
//! `Address::parse`, the token is only carried (the caller verifies its HMAC).

use herald_types::Address;
use mail_parser::{Message, MessageParser};

/// Longest header value looked at.
const MAX_HEADER_CHARS: usize = 2048;

/// A per-member unsubscribe reference found in the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsubscribeRef {
    pub list: Address,
    pub member: Address,
    pub token: String,
}

/// The original copy's identifying headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Original {
    /// The address in `Return-Path` (VERP: `<list>-bounces+<member>@<domain>`).
    pub return_path: Option<Address>,
    /// The label inside `List-Id: … <label>`, lower-cased.
    pub list_id: Option<String>,
    pub unsubscribe: Option<UnsubscribeRef>,
}

impl Original {
    pub(crate) fn from_message(m: &Message<'_>) -> Original {
        let raw = |name: &str| {
            m.header_raw(name)
                .map(|v| v.chars().take(MAX_HEADER_CHARS).collect::<String>())
        };
        Original {
            return_path: raw("Return-Path").and_then(|v| bracketed_address(&v)),
            list_id: raw("List-Id").and_then(|v| list_id_label(&v)),
            unsubscribe: raw("List-Unsubscribe").and_then(|v| unsubscribe_ref(&v)),
        }
    }

    /// From a header block alone (`text/rfc822-headers`): parsed as a message without body.
    pub(crate) fn from_header_text(bytes: &[u8]) -> Original {
        let mut text = bytes.to_vec();
        // A header block ends with a blank line; add one so the parser sees an empty body.
        text.extend_from_slice(b"\r\n\r\n");
        match MessageParser::new().parse_headers(&text[..]) {
            Some(m) => Original::from_message(&m),
            None => Original::default(),
        }
    }
}

/// `<a@b>` (or a bare `a@b`) → the address.
fn bracketed_address(v: &str) -> Option<Address> {
    let v = v.trim();
    let inner = match (v.find('<'), v.rfind('>')) {
        (Some(s), Some(e)) if s < e => &v[s + 1..e],
        _ => v,
    };
    Address::parse(inner.trim()).ok()
}

/// `Dev list <dev.lists.test>` → `dev.lists.test`.
fn list_id_label(v: &str) -> Option<String> {
    let (s, e) = (v.rfind('<')?, v.rfind('>')?);
    let label = v.get(s + 1..e)?.trim();
    (!label.is_empty() && label.is_ascii() && !label.contains(char::is_whitespace))
        .then(|| label.to_ascii_lowercase())
}

/// The first `…/unsubscribe/{list}/{member}/{token}` URL in a `List-Unsubscribe` value.
fn unsubscribe_ref(v: &str) -> Option<UnsubscribeRef> {
    let at = v.find("/unsubscribe/")?;
    let rest = &v[at + "/unsubscribe/".len()..];
    let end = rest
        .find(['>', ',', ' ', '\t', '\r', '\n'])
        .unwrap_or(rest.len());
    let mut segs = rest[..end].split('/');
    let (list, member, token) = (segs.next()?, segs.next()?, segs.next()?);
    if segs.next().is_some() {
        return None;
    }
    Some(UnsubscribeRef {
        list: Address::parse(&percent_decode(list)?).ok()?,
        member: Address::parse(&percent_decode(member)?).ok()?,
        token: percent_decode(token)?,
    })
}

/// `%XX` decoding; `None` for a malformed escape or a result that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsubscribe_urls_decode_and_junk_does_not() {
        let v = "<https://h.test/unsubscribe/dev%40lists.test/alice%2Bx%40d0.test/AbC-_9>,\r\n <mailto:dev-request@lists.test?subject=unsubscribe>";
        let r = unsubscribe_ref(v).expect("ref");
        assert_eq!(r.list.to_string(), "dev@lists.test");
        assert_eq!(r.member.to_string(), "alice+x@d0.test");
        assert_eq!(r.token, "AbC-_9");
        for junk in [
            "<mailto:x@y>",
            "<https://h/unsubscribe/dev%40l.test/a%40b>",
            "<https://h/unsubscribe/dev%4/a%40b/t>",
            "<https://h/unsubscribe/dev%40l.test/a%40b/t/extra>",
            "<https://h/unsubscribe/%FF%FE/a%40b/t>",
            "/unsubscribe/",
        ] {
            assert_eq!(unsubscribe_ref(junk), None, "{junk}");
        }
    }

    #[test]
    fn list_ids_and_return_paths() {
        assert_eq!(
            list_id_label("Dev <Dev.Lists.test>").as_deref(),
            Some("dev.lists.test")
        );
        assert_eq!(list_id_label("<>"), None);
        assert_eq!(list_id_label("no brackets"), None);
        assert_eq!(list_id_label("x <a b>"), None);
        assert_eq!(
            bracketed_address(" <dev-bounces+a=b.test@l.test>").map(|a| a.to_string()),
            Some("dev-bounces+a=b.test@l.test".into())
        );
        assert_eq!(bracketed_address("<>"), None);
    }
}
