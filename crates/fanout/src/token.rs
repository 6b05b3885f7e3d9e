//! Unsubscribe URLs (RFC 8058 one-click links). The token itself is signed and verified in
//! `herald_types::token` (with every other HMAC token); this module builds the URL around it.
//!
//! The URL is `{base}/unsubscribe/{list}/{member}/{token}` with each address percent-encoded as
//! one path segment, so the HTTP side can recover both addresses and check the token without
//! any stored state.
//!
//! SECURITY: addresses are `herald_types::Address` values, already validated (no CR/LF), and are
//! percent-encoded before going into a URL.

use crate::encode::percent_encode;
use herald_types::Address;

pub(crate) use herald_types::token::{
    keyed_mac, unsubscribe_token_with as token_with, HmacSha256,
    UNSUBSCRIBE_TOKEN_CHARS as TOKEN_CHARS,
};
pub use herald_types::token::{unsubscribe_token, verify_unsubscribe_token};

/// `{base}/unsubscribe/{list}/{member}/{token}`, addresses and token percent-encoded.
pub fn unsubscribe_url(base: &str, list: &Address, member: &Address, token: &str) -> String {
    let mut out = url_prefix(base, list);
    write_url_tail(&mut out, member, token.as_bytes());
    String::from_utf8_lossy(&out).into_owned()
}

/// `{base}/unsubscribe/{list}/`: the part of the URL shared by every member of a list.
pub(crate) fn url_prefix(base: &str, list: &Address) -> Vec<u8> {
    let mut out = Vec::with_capacity(base.len() + 96);
    out.extend_from_slice(base.trim_end_matches('/').as_bytes());
    out.extend_from_slice(b"/unsubscribe/");
    percent_encode(&mut out, list.to_string().as_bytes());
    out.push(b'/');
    out
}

/// `{member}/{token}`: the per-member end of the URL.
pub(crate) fn write_url_tail(out: &mut Vec<u8>, member: &Address, token: &[u8]) {
    percent_encode(out, member.local().as_bytes());
    out.extend_from_slice(b"%40");
    percent_encode(out, member.domain().as_bytes());
    out.push(b'/');
    percent_encode(out, token);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s).unwrap()
    }

    #[test]
    fn url_percent_encodes_addresses() {
        let url = unsubscribe_url(
            "https://h.example/",
            &a("dev@l.example"),
            &a("a+b@ex.com"),
            "tok",
        );
        assert_eq!(
            url,
            "https://h.example/unsubscribe/dev%40l.example/a%2Bb%40ex.com/tok"
        );
    }
}
