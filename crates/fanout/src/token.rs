//! Unsubscribe tokens (RFC 8058 one-click links) and their URLs.
//!
//! token = base64url-no-pad( HMAC-SHA256(secret, list address + "\n" + member address)[..16] )
//!
//! 128 bits of the MAC are plenty for a link that only unsubscribes one address from one list.
//! The URL is `{base}/unsubscribe/{list}/{member}/{token}` with each address percent-encoded as
//! one path segment, so the HTTP side can recover both addresses and check the token without
//! any stored state.
//!
//! Invariants: [`verify_unsubscribe_token`] compares in constant time (hmac's
//! `verify_truncated_left`); only the canonical 22-character encoding is accepted.
//!
//! SECURITY: the token is the only thing that stops anyone from unsubscribing anyone; the
//! secret must be per installation and kept out of logs. Addresses are `herald_types::Address`
//! values, already validated (no CR/LF), and are percent-encoded before going into a URL.

use crate::encode::percent_encode;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use herald_types::Address;
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// MAC bytes kept in a token.
const TOKEN_BYTES: usize = 16;
/// Length of an encoded token: 16 bytes in unpadded base64.
pub(crate) const TOKEN_CHARS: usize = 22;

/// An HMAC keyed with the list secret, ready to be cloned per member: keying (two SHA-256
/// blocks) is paid once per post, not once per copy.
pub(crate) fn keyed_mac(secret: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length (long ones are hashed), so this cannot fail.
    <HmacSha256 as Mac>::new_from_slice(secret).expect("HMAC-SHA256 accepts keys of any length")
}

fn feed(mac: &mut HmacSha256, list: &Address, member: &Address) {
    for part in [
        list.local().as_bytes(),
        b"@",
        list.domain().as_bytes(),
        b"\n",
        member.local().as_bytes(),
        b"@",
        member.domain().as_bytes(),
    ] {
        mac.update(part);
    }
}

/// The token for `member` on `list`, from a pre-keyed MAC, without allocating.
pub(crate) fn token_with(mac: &HmacSha256, list: &Address, member: &Address) -> [u8; TOKEN_CHARS] {
    let mut mac = mac.clone();
    feed(&mut mac, list, member);
    let tag = mac.finalize().into_bytes();
    let mut out = [0u8; TOKEN_CHARS];
    // 16 bytes always encode to exactly 22 characters.
    let _ = URL_SAFE_NO_PAD.encode_slice(&tag[..TOKEN_BYTES], &mut out);
    out
}

/// The unsubscribe token for `member` on `list`.
pub fn unsubscribe_token(secret: &[u8], list: &Address, member: &Address) -> String {
    let token = token_with(&keyed_mac(secret), list, member);
    String::from_utf8_lossy(&token).into_owned()
}

/// True when `token` is the token for `member` on `list`. Constant time in the token's content.
pub fn verify_unsubscribe_token(
    secret: &[u8],
    list: &Address,
    member: &Address,
    token: &str,
) -> bool {
    if token.len() != TOKEN_CHARS {
        return false;
    }
    let mut tag = [0u8; TOKEN_BYTES + 2];
    // base64 0.22 refuses non-zero trailing bits, so each tag has exactly one valid spelling.
    match URL_SAFE_NO_PAD.decode_slice(token.as_bytes(), &mut tag) {
        Ok(TOKEN_BYTES) => {}
        _ => return false,
    }
    let mut mac = keyed_mac(secret);
    feed(&mut mac, list, member);
    mac.verify_truncated_left(&tag[..TOKEN_BYTES]).is_ok()
}

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
    fn token_verifies_only_for_its_list_and_member() {
        let (list, bob) = (a("dev@l.example"), a("bob@ex.com"));
        let t = unsubscribe_token(b"k", &list, &bob);
        assert_eq!(t.len(), TOKEN_CHARS);
        assert!(verify_unsubscribe_token(b"k", &list, &bob, &t));
        assert!(!verify_unsubscribe_token(b"other", &list, &bob, &t));
        assert!(!verify_unsubscribe_token(b"k", &list, &a("eve@ex.com"), &t));
        assert!(!verify_unsubscribe_token(
            b"k",
            &a("ops@l.example"),
            &bob,
            &t
        ));
        assert!(!verify_unsubscribe_token(b"k", &list, &bob, &t[..21]));
        assert!(!verify_unsubscribe_token(b"k", &list, &bob, ""));
        for i in 0..t.len() {
            let mut altered = t.clone().into_bytes();
            altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(altered).unwrap();
            assert!(
                !verify_unsubscribe_token(b"k", &list, &bob, &altered),
                "position {i}"
            );
        }
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
