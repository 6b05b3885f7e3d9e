//! Double opt-in: signed, expiring confirmation tokens, and the mail Herald writes itself
//! (confirmations, help, notices).
//!
//! A token is `base64url(action|expiry|list|address) "." base64url(HMAC-SHA256(secret, same)[..16])`.
//! It is stateless (nothing to store or expire in a table), bound to one action on one list for
//! one address, valid until its expiry, and checked in constant time. Replaying it within its
//! lifetime repeats an idempotent action (subscribing a member twice adds them once).
//!
//! Moderation tokens ([`moderation_token`]) have the same shape with the payload
//! `action|expiry|list|post` and their own MAC domain, so a confirmation token can never pass
//! as a moderation token (or the other way round). They are sent only to the list's
//! moderators, bound to one held post and one action (approve or reject).
//!
//! Limits: tokens longer than [`MAX_TOKEN_BYTES`] are refused before decoding.
//!
//! SECURITY: tokens arrive in URLs and in mail subjects from anyone; only a valid MAC under the
//! server secret makes one act. Text put into generated mail headers is ASCII addresses and
//! tokens (base64url), never free text from the request.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use herald_types::{verp, Address, PostId};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Longest token accepted.
pub const MAX_TOKEN_BYTES: usize = 1024;

/// What a confirmation token authorizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Subscribe,
    Unsubscribe,
}

impl Action {
    fn code(self) -> &'static str {
        match self {
            Action::Subscribe => "s",
            Action::Unsubscribe => "u",
        }
    }

    pub fn verb(self) -> &'static str {
        match self {
            Action::Subscribe => "subscribe",
            Action::Unsubscribe => "unsubscribe",
        }
    }
}

/// A verified token's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmation {
    pub action: Action,
    pub list: Address,
    pub address: Address,
}

/// What a moderation token authorizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moderation {
    Approve,
    Reject,
}

impl Moderation {
    fn code(self) -> &'static str {
        match self {
            Moderation::Approve => "a",
            Moderation::Reject => "r",
        }
    }

    pub fn verb(self) -> &'static str {
        match self {
            Moderation::Approve => "approve",
            Moderation::Reject => "reject",
        }
    }
}

/// A verified moderation token's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModerationGrant {
    pub action: Moderation,
    pub list: Address,
    pub post: PostId,
}

const CONFIRM_DOMAIN: &[u8] = b"herald-confirm\0";
const MODERATE_DOMAIN: &[u8] = b"herald-moderate\0";

fn mac(secret: &[u8], domain: &[u8], payload: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    m.update(domain);
    m.update(payload);
    m
}

fn sign(secret: &[u8], domain: &[u8], payload: &str) -> String {
    let tag = mac(secret, domain, payload.as_bytes())
        .finalize()
        .into_bytes();
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(payload),
        URL_SAFE_NO_PAD.encode(&tag[..16])
    )
}

/// The payload of a token whose MAC checks out (constant time), as text.
fn open(secret: &[u8], domain: &[u8], token: &str) -> Option<String> {
    if token.len() > MAX_TOKEN_BYTES {
        return None;
    }
    let (p64, t64) = token.split_once('.')?;
    let payload = URL_SAFE_NO_PAD.decode(p64).ok()?;
    let tag = URL_SAFE_NO_PAD.decode(t64).ok()?;
    // A tag shorter than ours would let a forger guess fewer bits: require all 16 bytes.
    if tag.len() != 16 {
        return None;
    }
    mac(secret, domain, &payload)
        .verify_truncated_left(&tag)
        .ok()?;
    String::from_utf8(payload).ok()
}

/// Signs `action` on the held post `post` of `list`, valid until `expires_unix_secs`.
pub fn moderation_token(
    secret: &[u8],
    action: Moderation,
    list: &Address,
    post: PostId,
    expires_unix_secs: u64,
) -> String {
    let payload = format!("{}|{expires_unix_secs}|{list}|{post}", action.code());
    sign(secret, MODERATE_DOMAIN, &payload)
}

/// Checks a moderation token: MAC (constant time), expiry, list address and post id.
pub fn verify_moderation(
    secret: &[u8],
    token: &str,
    now_unix_secs: u64,
) -> Option<ModerationGrant> {
    let text = open(secret, MODERATE_DOMAIN, token)?;
    let mut it = text.splitn(4, '|');
    let action = match it.next()? {
        "a" => Moderation::Approve,
        "r" => Moderation::Reject,
        _ => return None,
    };
    let expires: u64 = it.next()?.parse().ok()?;
    if now_unix_secs > expires {
        return None;
    }
    let list = Address::parse(it.next()?).ok()?;
    let post = it.next()?.parse().ok()?;
    Some(ModerationGrant { action, list, post })
}

/// Signs `action` on `list` for `address`, valid until `expires_unix_secs`.
pub fn token(
    secret: &[u8],
    action: Action,
    list: &Address,
    address: &Address,
    expires_unix_secs: u64,
) -> String {
    let payload = format!("{}|{expires_unix_secs}|{list}|{address}", action.code());
    sign(secret, CONFIRM_DOMAIN, &payload)
}

/// Checks a token: MAC (constant time), expiry, and the addresses in it.
pub fn verify(secret: &[u8], token: &str, now_unix_secs: u64) -> Option<Confirmation> {
    let text = open(secret, CONFIRM_DOMAIN, token)?;
    let mut it = text.splitn(4, '|');
    let action = match it.next()? {
        "s" => Action::Subscribe,
        "u" => Action::Unsubscribe,
        _ => return None,
    };
    let expires: u64 = it.next()?.parse().ok()?;
    if now_unix_secs > expires {
        return None;
    }
    let list = Address::parse(it.next()?).ok()?;
    let address = Address::parse(it.next()?).ok()?;
    Some(Confirmation {
        action,
        list,
        address,
    })
}

/// A plain-text message from `<list>-request` to `to`, marked as automatic (RFC 3834) so that
/// vacation responders do not answer it.
pub fn compose(hostname: &str, list: &Address, to: &Address, subject: &str, text: &str) -> Bytes {
    let now = herald_types::unix_ms_now() / 1000;
    let date = mail_parser::DateTime::from_timestamp(now as i64).to_rfc822();
    let request = verp::request_address(list);
    let nonce: u64 = rand::random();
    let mut m = String::with_capacity(text.len() + 512);
    m.push_str(&format!("From: <{request}>\r\n"));
    m.push_str(&format!("To: <{to}>\r\n"));
    m.push_str(&format!("Reply-To: <{request}>\r\n"));
    m.push_str(&format!("Subject: {subject}\r\n"));
    m.push_str(&format!("Date: {date}\r\n"));
    m.push_str(&format!("Message-ID: <herald.{nonce:016x}@{hostname}>\r\n"));
    m.push_str("Auto-Submitted: auto-replied\r\nPrecedence: list\r\n");
    m.push_str("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n");
    m.push_str("Content-Transfer-Encoding: 8bit\r\n\r\n");
    for line in text.lines() {
        m.push_str(line);
        m.push_str("\r\n");
    }
    Bytes::from(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s).expect("address")
    }

    #[test]
    fn tokens_verify_expire_and_refuse_tampering() {
        let (list, who) = (a("dev@l.test"), a("bob@x.test"));
        let t = token(b"secret", Action::Subscribe, &list, &who, 1000);
        let c = verify(b"secret", &t, 999).expect("valid");
        assert_eq!(
            (c.action, c.list, c.address),
            (Action::Subscribe, list.clone(), who.clone())
        );
        assert!(verify(b"secret", &t, 1001).is_none(), "expired");
        assert!(verify(b"other", &t, 999).is_none(), "wrong secret");
        let forged = token(b"secret", Action::Unsubscribe, &list, &who, 1000);
        let (p, _) = forged.split_once('.').expect("dot");
        let (_, tag) = t.split_once('.').expect("dot");
        assert!(
            verify(b"secret", &format!("{p}.{tag}"), 999).is_none(),
            "swapped payload"
        );
        assert!(verify(b"secret", "garbage", 0).is_none());
        assert!(verify(b"secret", &"x".repeat(5000), 0).is_none());
    }

    #[test]
    fn moderation_tokens_are_bound_to_post_action_and_domain() {
        let list = a("dev@l.test");
        let t = moderation_token(b"secret", Moderation::Approve, &list, PostId(0xAB), 1000);
        let g = verify_moderation(b"secret", &t, 999).expect("valid");
        assert_eq!(
            (g.action, g.list.clone(), g.post),
            (Moderation::Approve, list.clone(), PostId(0xAB))
        );
        assert!(verify_moderation(b"secret", &t, 1001).is_none(), "expired");
        assert!(
            verify_moderation(b"other", &t, 999).is_none(),
            "wrong secret"
        );
        // Another post's payload under this tag, a truncated tag, a confirmation token.
        let other = moderation_token(b"secret", Moderation::Approve, &list, PostId(0xAC), 1000);
        let (p, _) = other.split_once('.').expect("dot");
        let (_, tag) = t.split_once('.').expect("dot");
        assert!(verify_moderation(b"secret", &format!("{p}.{tag}"), 999).is_none());
        assert!(verify_moderation(b"secret", &format!("{p}.{}", &tag[..4]), 999).is_none());
        let c = token(b"secret", Action::Subscribe, &list, &a("bob@x.test"), 1000);
        assert!(
            verify_moderation(b"secret", &c, 999).is_none(),
            "other domain"
        );
        assert!(verify(b"secret", &t, 999).is_none(), "other domain");
    }
}
