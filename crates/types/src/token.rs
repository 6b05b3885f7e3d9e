//! Every HMAC token Herald signs, in one place: the one-click unsubscribe token in each copy
//! (RFC 8058), the double opt-in confirmation token, and the moderation token of a held post.
//! Stateless: nothing is stored; a token is valid when its MAC under the installation's secret
//! checks out (and, for confirmations and moderation, before its expiry).
//!
//! Formats (kept byte for byte: links already in members' mailboxes must still verify):
//! - unsubscribe: `base64url-no-pad(HMAC-SHA256(secret, list "\n" member)[..16])`, 22
//!   characters; only the canonical encoding is accepted.
//! - confirmation: `base64url(action|expiry|list|address) "." base64url(HMAC(secret,
//!   "herald-confirm\0" payload)[..16])`, bound to one action on one list for one address.
//! - moderation: the same shape with the payload `action|expiry|list|post` under its own MAC
//!   domain (`herald-moderate\0`), so a confirmation token can never pass as a moderation token
//!   or the other way round.
//!
//! Place in the flow: fan-out signs unsubscribe tokens per copy, the API verifies them; the
//! lists stage signs confirmations and moderation tokens, the lists stage and the API verify.
//!
//! Limits: tokens longer than [`MAX_TOKEN_BYTES`] are refused before decoding.
//!
//! SECURITY: tokens arrive in URLs and mail subjects from anyone; only a valid MAC under the
//! server secret makes one act. Every comparison is constant time (hmac's
//! `verify_truncated_left`), and a tag shorter than 16 bytes is refused. The secret must be per
//! installation and kept out of logs.

use crate::{Address, PostId};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// HMAC-SHA256, the MAC of every token.
pub type HmacSha256 = Hmac<Sha256>;

/// MAC bytes kept in a token.
const UNSUBSCRIBE_TOKEN_BYTES: usize = 16;
/// Length of an encoded token: 16 bytes in unpadded base64.
pub const UNSUBSCRIBE_TOKEN_CHARS: usize = 22;

/// An HMAC keyed with the list secret, ready to be cloned per member: keying (two SHA-256
/// blocks) is paid once per post, not once per copy.
pub fn keyed_mac(secret: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length (long ones are hashed), so this cannot fail.
    <HmacSha256 as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC-SHA256 accepts keys of any length"))
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
pub fn unsubscribe_token_with(
    mac: &HmacSha256,
    list: &Address,
    member: &Address,
) -> [u8; UNSUBSCRIBE_TOKEN_CHARS] {
    let mut mac = mac.clone();
    feed(&mut mac, list, member);
    let tag = mac.finalize().into_bytes();
    let mut out = [0u8; UNSUBSCRIBE_TOKEN_CHARS];
    // 16 bytes always encode to exactly 22 characters.
    let _ = URL_SAFE_NO_PAD.encode_slice(&tag[..UNSUBSCRIBE_TOKEN_BYTES], &mut out);
    out
}

/// The unsubscribe token for `member` on `list`.
pub fn unsubscribe_token(secret: &[u8], list: &Address, member: &Address) -> String {
    let token = unsubscribe_token_with(&keyed_mac(secret), list, member);
    String::from_utf8_lossy(&token).into_owned()
}

/// True when `token` is the token for `member` on `list`. Constant time in the token's content.
pub fn verify_unsubscribe_token(
    secret: &[u8],
    list: &Address,
    member: &Address,
    token: &str,
) -> bool {
    if token.len() != UNSUBSCRIBE_TOKEN_CHARS {
        return false;
    }
    let mut tag = [0u8; UNSUBSCRIBE_TOKEN_BYTES + 2];
    // base64 0.22 refuses non-zero trailing bits, so each tag has exactly one valid spelling.
    match URL_SAFE_NO_PAD.decode_slice(token.as_bytes(), &mut tag) {
        Ok(UNSUBSCRIBE_TOKEN_BYTES) => {}
        _ => return false,
    }
    let mut mac = keyed_mac(secret);
    feed(&mut mac, list, member);
    mac.verify_truncated_left(&tag[..UNSUBSCRIBE_TOKEN_BYTES])
        .is_ok()
}

/// Longest token accepted.
pub const MAX_TOKEN_BYTES: usize = 1024;

/// What a confirmation token authorizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Subscribe,
    Unsubscribe,
    /// A member's delivery mode change asked by mail (`set digest …`, `set nomail …`):
    /// confirmed like a subscription, so a forged From cannot silence someone's mail.
    Delivery(crate::DeliveryMode),
}

impl Action {
    fn code(self) -> &'static str {
        match self {
            Action::Subscribe => "s",
            Action::Unsubscribe => "u",
            Action::Delivery(m) => match m {
                crate::DeliveryMode::Regular => "dr",
                crate::DeliveryMode::DigestMime => "dm",
                crate::DeliveryMode::DigestPlain => "dp",
                crate::DeliveryMode::Nomail => "dn",
            },
        }
    }

    fn from_code(code: &str) -> Option<Action> {
        match code {
            "s" => Some(Action::Subscribe),
            "u" => Some(Action::Unsubscribe),
            _ => crate::DeliveryMode::ALL
                .into_iter()
                .map(Action::Delivery)
                .find(|a| a.code() == code),
        }
    }

    pub fn verb(self) -> &'static str {
        match self {
            Action::Subscribe => "subscribe",
            Action::Unsubscribe => "unsubscribe",
            Action::Delivery(m) => match m {
                crate::DeliveryMode::Regular => "set regular delivery for",
                crate::DeliveryMode::DigestMime => "set MIME digest delivery for",
                crate::DeliveryMode::DigestPlain => "set plain digest delivery for",
                crate::DeliveryMode::Nomail => "stop list mail (nomail) for",
            },
        }
    }
}

/// A verified token's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmation {
    pub action: Action,
    pub list: Address,
    pub address: Address,
    /// When the link stops working (Unix seconds, as signed).
    pub expires_unix_secs: u64,
}

impl Confirmation {
    /// The key this link is recorded under once used (a link is spent on use: the store keeps
    /// this key until the link would have expired anyway). Derived from the signed content,
    /// not the token's spelling, so no re-encoding of one link passes as another.
    pub fn spend_key(&self) -> String {
        let payload = format!(
            "{}|{}|{}|{}",
            self.action.code(),
            self.expires_unix_secs,
            self.list,
            self.address
        );
        spend_key(CONFIRM_DOMAIN, payload.as_bytes())
    }
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
    /// When the link stops working (Unix seconds, as signed).
    pub expires_unix_secs: u64,
}

impl ModerationGrant {
    /// The key of the decision on this held post: the same for its approve and its reject
    /// link, so whichever is used first spends both ("already decided").
    pub fn spend_key(&self) -> String {
        spend_key(
            MODERATE_DOMAIN,
            format!("{}|{}", self.list, self.post).as_bytes(),
        )
    }
}

/// A verified public-form token: when its form was served, and the key it is recorded under
/// once a submission used it (one form, one submission).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormGrant {
    pub issued_unix_secs: u64,
    pub spend_key: String,
}

/// Hex SHA-256 of a token kind's MAC domain and its signed payload: what the store keeps of a
/// spent link (never the link itself, which would open the page again if the store leaked).
fn spend_key(domain: &[u8], payload: &[u8]) -> String {
    use sha2::Digest;
    let digest = Sha256::new()
        .chain_update(b"herald-spent\0")
        .chain_update(domain)
        .chain_update(payload)
        .finalize();
    digest.iter().fold(String::with_capacity(64), |mut out, b| {
        use std::fmt::Write;
        let _ = write!(out, "{b:02x}");
        out
    })
}

const CONFIRM_DOMAIN: &[u8] = b"herald-confirm\0";
const MODERATE_DOMAIN: &[u8] = b"herald-moderate\0";
const FORM_DOMAIN: &[u8] = b"herald-form\0";
const MANAGE_DOMAIN: &[u8] = b"herald-manage\0";
const ARCHIVE_DOMAIN: &[u8] = b"herald-archive\0";

/// Signs the link to `address`'s own subscriptions page, valid until `expires_unix_secs`
/// (mailed to the address: following it proves the mailbox, as a confirmation does).
pub fn manage_token(secret: &[u8], address: &Address, expires_unix_secs: u64) -> String {
    sign(
        secret,
        MANAGE_DOMAIN,
        &format!("{expires_unix_secs}|{address}"),
    )
}

/// The address a subscriptions-page token was signed for, if valid and unexpired.
pub fn verify_manage(secret: &[u8], token: &str, now_unix_secs: u64) -> Option<Address> {
    let text = open(secret, MANAGE_DOMAIN, token)?;
    let (expires, address) = text.split_once('|')?;
    if now_unix_secs > expires.parse::<u64>().ok()? {
        return None;
    }
    Address::parse(address).ok()
}

/// Signs `address`'s key to the archive of `list` (privacy `members`), valid until
/// `expires_unix_secs`: shown on the member's subscriptions page, which a mailed link opened.
pub fn archive_token(
    secret: &[u8],
    list: &Address,
    address: &Address,
    expires_unix_secs: u64,
) -> String {
    sign(
        secret,
        ARCHIVE_DOMAIN,
        &format!("{expires_unix_secs}|{list}|{address}"),
    )
}

/// The member an archive key was signed for, if it is valid for `list` and unexpired.
pub fn verify_archive(
    secret: &[u8],
    list: &Address,
    token: &str,
    now_unix_secs: u64,
) -> Option<Address> {
    let text = open(secret, ARCHIVE_DOMAIN, token)?;
    let mut parts = text.splitn(3, '|');
    let (expires, signed_list, address) = (parts.next()?, parts.next()?, parts.next()?);
    if now_unix_secs > expires.parse::<u64>().ok()? {
        return None;
    }
    (Address::parse(signed_list).ok()? == *list).then_some(())?;
    Address::parse(address).ok()
}

/// Signs a public form for `list` as served at `issued_unix_secs` (the subscribe page's
/// time-token: a bot that posts without fetching the form, or faster than a person can type, is
/// told apart without a CAPTCHA). `nonce` (random per served form) makes every served form's
/// token its own, so that spending one on its submission never spends another visitor's.
pub fn form_token(secret: &[u8], list: &Address, issued_unix_secs: u64, nonce: u64) -> String {
    sign(
        secret,
        FORM_DOMAIN,
        &format!("{issued_unix_secs}|{list}|{nonce:016x}"),
    )
}

/// The form token for `list`, if it is one of ours (MAC in constant time). A token without a
/// nonce (served before forms were bound to one submission) is refused: its form is served
/// again.
pub fn verify_form_token(secret: &[u8], list: &Address, token: &str) -> Option<FormGrant> {
    let text = open(secret, FORM_DOMAIN, token)?;
    let (issued, rest) = text.split_once('|')?;
    // The nonce is hex, so the last `|` ends the list address (whose local part may hold one).
    let (signed_list, nonce) = rest.rsplit_once('|')?;
    (nonce.len() == 16 && nonce.bytes().all(|b| b.is_ascii_hexdigit())).then_some(())?;
    (Address::parse(signed_list).ok()? == *list).then_some(())?;
    Some(FormGrant {
        issued_unix_secs: issued.parse().ok()?,
        spend_key: spend_key(FORM_DOMAIN, text.as_bytes()),
    })
}

fn mac(secret: &[u8], domain: &[u8], payload: &[u8]) -> HmacSha256 {
    let mut m = keyed_mac(secret);
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
    Some(ModerationGrant {
        action,
        list,
        post,
        expires_unix_secs: expires,
    })
}

/// Signs `action` on `list` for `address`, valid until `expires_unix_secs`.
pub fn confirmation_token(
    secret: &[u8],
    action: Action,
    list: &Address,
    address: &Address,
    expires_unix_secs: u64,
) -> String {
    let payload = format!("{}|{expires_unix_secs}|{list}|{address}", action.code());
    sign(secret, CONFIRM_DOMAIN, &payload)
}

/// Checks a confirmation token: MAC (constant time), expiry, and the addresses in it.
pub fn verify_confirmation(secret: &[u8], token: &str, now_unix_secs: u64) -> Option<Confirmation> {
    let text = open(secret, CONFIRM_DOMAIN, token)?;
    let mut it = text.splitn(4, '|');
    let action = Action::from_code(it.next()?)?;
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
        expires_unix_secs: expires,
    })
}

#[cfg(test)]
mod delivery_token_tests {
    use super::*;
    use crate::DeliveryMode;

    /// Every delivery mode survives the token, the signature covers it (a `dm` token cannot be
    /// turned into `dn`), and unknown codes are refused.
    #[test]
    fn delivery_actions_round_trip_and_cannot_be_swapped() {
        let (list, bob) = (
            Address::parse("dev@l.example").expect("a"),
            Address::parse("bob@ex.com").expect("a"),
        );
        for m in DeliveryMode::ALL {
            let t = confirmation_token(b"k", Action::Delivery(m), &list, &bob, 100);
            let c = verify_confirmation(b"k", &t, 50).expect("valid");
            assert_eq!(c.action, Action::Delivery(m));
            assert!(verify_confirmation(b"k", &t, 101).is_none(), "expired");
        }
        let t = confirmation_token(
            b"k",
            Action::Delivery(DeliveryMode::DigestMime),
            &list,
            &bob,
            100,
        );
        let (p64, tag) = t.split_once('.').expect("dot");
        let payload = String::from_utf8(URL_SAFE_NO_PAD.decode(p64).expect("b64")).expect("utf8");
        let forged = format!(
            "{}.{tag}",
            URL_SAFE_NO_PAD.encode(payload.replacen("dm|", "dn|", 1))
        );
        assert!(verify_confirmation(b"k", &forged, 50).is_none());
        for code in ["d", "dx", "D", "dm ", ""] {
            assert_eq!(Action::from_code(code), None, "{code:?}");
        }
    }
}

#[cfg(test)]
mod unsubscribe_tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s).expect("address")
    }

    #[test]
    fn token_verifies_only_for_its_list_and_member() {
        let (list, bob) = (a("dev@l.example"), a("bob@ex.com"));
        let t = unsubscribe_token(b"k", &list, &bob);
        assert_eq!(t.len(), UNSUBSCRIBE_TOKEN_CHARS);
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
            let altered = String::from_utf8(altered).expect("utf-8");
            assert!(
                !verify_unsubscribe_token(b"k", &list, &bob, &altered),
                "position {i}"
            );
        }
    }
}

#[cfg(test)]
mod confirmation_tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s).expect("address")
    }

    #[test]
    fn tokens_verify_expire_and_refuse_tampering() {
        let (list, who) = (a("dev@l.test"), a("bob@x.test"));
        let t = confirmation_token(b"secret", Action::Subscribe, &list, &who, 1000);
        let c = verify_confirmation(b"secret", &t, 999).expect("valid");
        assert_eq!(
            (c.action, c.list, c.address),
            (Action::Subscribe, list.clone(), who.clone())
        );
        assert!(
            verify_confirmation(b"secret", &t, 1001).is_none(),
            "expired"
        );
        assert!(
            verify_confirmation(b"other", &t, 999).is_none(),
            "wrong secret"
        );
        let forged = confirmation_token(b"secret", Action::Unsubscribe, &list, &who, 1000);
        let (p, _) = forged.split_once('.').expect("dot");
        let (_, tag) = t.split_once('.').expect("dot");
        assert!(
            verify_confirmation(b"secret", &format!("{p}.{tag}"), 999).is_none(),
            "swapped payload"
        );
        assert!(verify_confirmation(b"secret", "garbage", 0).is_none());
        assert!(verify_confirmation(b"secret", &"x".repeat(5000), 0).is_none());
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
        let c = confirmation_token(b"secret", Action::Subscribe, &list, &a("bob@x.test"), 1000);
        assert!(
            verify_moderation(b"secret", &c, 999).is_none(),
            "other domain"
        );
        assert!(
            verify_confirmation(b"secret", &t, 999).is_none(),
            "other domain"
        );
    }
}

#[cfg(test)]
mod golden {
    //! The formats, pinned by values computed independently (Python's `hmac` and `base64`):
    //! a change here breaks every link already sent.
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s).expect("address")
    }

    #[test]
    fn token_formats_are_byte_for_byte_those_already_sent() {
        let (list, bob) = (a("dev@l.test"), a("bob@x.test"));
        assert_eq!(
            unsubscribe_token(b"secret", &list, &bob),
            "Wbb31CCZbwWYxtixTP_AJw"
        );
        assert_eq!(
            confirmation_token(b"secret", Action::Subscribe, &list, &bob, 1000),
            "c3wxMDAwfGRldkBsLnRlc3R8Ym9iQHgudGVzdA.L0OC85TK3_XrU6vf8tEOwA"
        );
        assert_eq!(
            moderation_token(b"secret", Moderation::Approve, &list, PostId(0xAB), 1000),
            "YXwxMDAwfGRldkBsLnRlc3R8MDAwMDAwMDAwMDAwMDBBQg.vujD27WBs9MMTJWPptTB7g"
        );
    }
}

/// What an erased address is kept as (GDPR art. 17, the directory's `erased` table):
/// `base64url-no-pad(HMAC-SHA256(key, "herald-erasure\0" address))` with the address in lower
/// case, under a key the directory keeps for this alone — so the address can be recognised when
/// it comes back (an import, a subscription) but not read back.
pub fn erasure_hash(key: &[u8], address: &Address) -> String {
    let mut mac = keyed_mac(key);
    mac.update(b"herald-erasure\0");
    mac.update(address.to_string().to_lowercase().as_bytes());
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod erasure_tests {
    use super::*;

    #[test]
    fn erasure_hash_ignores_case_and_depends_on_the_key() {
        let a = Address::parse("Alice@Example.org").unwrap();
        let b = Address::parse("alice@example.ORG").unwrap();
        assert_eq!(erasure_hash(b"k1", &a), erasure_hash(b"k1", &b));
        assert_ne!(erasure_hash(b"k1", &a), erasure_hash(b"k2", &a));
        assert!(!erasure_hash(b"k1", &a).contains("alice"));
    }
}

#[cfg(test)]
mod form_token_tests {
    use super::*;

    #[test]
    fn form_tokens_are_bound_to_the_list_and_the_secret() {
        let list = Address::parse("dev@l.test").unwrap();
        let other = Address::parse("ann@l.test").unwrap();
        let t = form_token(b"s", &list, 1000, 7);
        let issued =
            |l: &Address, t: &str| verify_form_token(b"s", l, t).map(|g| g.issued_unix_secs);
        assert_eq!(issued(&list, &t), Some(1000));
        assert_eq!(issued(&other, &t), None);
        assert_eq!(verify_form_token(b"x", &list, &t), None);
        assert_eq!(issued(&list, "garbage"), None);
        assert_eq!(issued(&list, &"A".repeat(10_000)), None);
        // A confirmation token is not a form token.
        let c = confirmation_token(b"s", Action::Subscribe, &list, &list, 2000);
        assert_eq!(issued(&list, &c), None);
        // A token from before the nonce is refused (its form is served again).
        assert_eq!(
            issued(&list, &sign(b"s", FORM_DOMAIN, "1000|dev@l.test")),
            None
        );
    }

    /// Two forms served in the same second are two tokens with two spend keys; one form's key
    /// is the same however often it is verified.
    #[test]
    fn every_served_form_has_its_own_spend_key() {
        let list = Address::parse("dev@l.test").unwrap();
        let (a, b) = (
            form_token(b"s", &list, 1000, 1),
            form_token(b"s", &list, 1000, 2),
        );
        let key = |t: &str| verify_form_token(b"s", &list, t).expect("valid").spend_key;
        assert_ne!(key(&a), key(&b));
        assert_eq!(key(&a), key(&a));
        assert_eq!(key(&a).len(), 64);
    }
}

#[cfg(test)]
mod manage_token_tests {
    use super::*;

    #[test]
    fn manage_tokens_expire_and_belong_to_their_domain() {
        let a = Address::parse("m@d.test").unwrap();
        let t = manage_token(b"s", &a, 100);
        assert_eq!(verify_manage(b"s", &t, 100), Some(a.clone()));
        assert_eq!(verify_manage(b"s", &t, 101), None);
        assert_eq!(verify_manage(b"x", &t, 50), None);
        let list = Address::parse("l@d.test").unwrap();
        let c = confirmation_token(b"s", Action::Subscribe, &list, &a, 100);
        assert_eq!(verify_manage(b"s", &c, 50), None);
        assert_eq!(verify_manage(b"s", "", 50), None);
    }
}

#[cfg(test)]
mod archive_token_tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s).expect("address")
    }

    #[test]
    fn an_archive_key_opens_its_list_only_until_it_expires() {
        let (list, other, bob) = (a("dev@l.test"), a("ops@l.test"), a("bob@x.test"));
        let t = archive_token(b"k", &list, &bob, 100);
        assert_eq!(verify_archive(b"k", &list, &t, 100), Some(bob.clone()));
        assert_eq!(verify_archive(b"k", &list, &t, 101), None, "expired");
        assert_eq!(verify_archive(b"k", &other, &t, 50), None, "another list");
        assert_eq!(verify_archive(b"x", &list, &t, 50), None, "another key");
        // A manage token is not an archive key (domain separation).
        let m = manage_token(b"k", &bob, 100);
        assert_eq!(verify_archive(b"k", &list, &m, 50), None);
        for junk in ["", ".", "a.b", &"A".repeat(10_000), "x|y|z"] {
            assert_eq!(verify_archive(b"k", &list, junk, 50), None, "{junk:.20}");
        }
    }
}

/// MAC domain of the IMAP archive password.
const IMAP_DOMAIN: &[u8] = b"herald-imap\0";

/// The password `address` reads the members-only archives of its lists with over IMAP
/// (`herald-imap`): `base64url-no-pad(HMAC-SHA256(secret, "herald-imap\0" address)[..16])`, 22
/// characters, shown on the address's own subscriptions page (`/manage/<token>`). Members
/// have no passwords in Herald; this one is derived, so nothing is stored, and it stops
/// opening a list's archive as soon as the address leaves the list (membership is checked at
/// each login). Changing the installation secret changes every such password. The address is
/// taken in lower case, so a member may type it in any case.
pub fn imap_password(secret: &[u8], address: &Address) -> String {
    let tag = mac(
        secret,
        IMAP_DOMAIN,
        address.to_string().to_lowercase().as_bytes(),
    )
    .finalize()
    .into_bytes();
    URL_SAFE_NO_PAD.encode(&tag[..UNSUBSCRIBE_TOKEN_BYTES])
}

/// True when `password` is `address`'s IMAP password (constant time in its content).
pub fn verify_imap_password(secret: &[u8], address: &Address, password: &str) -> bool {
    if password.len() != UNSUBSCRIBE_TOKEN_CHARS {
        return false;
    }
    let mut tag = [0u8; UNSUBSCRIBE_TOKEN_BYTES + 2];
    match URL_SAFE_NO_PAD.decode_slice(password.as_bytes(), &mut tag) {
        Ok(UNSUBSCRIBE_TOKEN_BYTES) => {}
        _ => return false,
    }
    mac(
        secret,
        IMAP_DOMAIN,
        address.to_string().to_lowercase().as_bytes(),
    )
    .verify_truncated_left(&tag[..UNSUBSCRIBE_TOKEN_BYTES])
    .is_ok()
}

#[cfg(test)]
mod imap_password_tests {
    use super::*;

    /// The password verifies for its address under its secret only; garbage of any length is
    /// refused without panicking.
    #[test]
    fn imap_password_is_bound_to_address_and_secret() {
        let ann = Address::parse("ann@l.test").unwrap();
        let bob = Address::parse("bob@l.test").unwrap();
        let p = imap_password(b"s", &ann);
        assert_eq!(p.len(), UNSUBSCRIBE_TOKEN_CHARS);
        assert!(verify_imap_password(b"s", &ann, &p));
        let shouting = Address::parse("ANN@L.TEST").unwrap();
        assert!(verify_imap_password(b"s", &shouting, &p));
        assert!(!verify_imap_password(b"s", &bob, &p));
        assert!(!verify_imap_password(b"t", &ann, &p));
        for bad in ["", "x", &"A".repeat(22), &"é".repeat(11), &"A".repeat(5000)] {
            assert!(!verify_imap_password(b"s", &ann, bad));
        }
        // Not an unsubscribe token of the same bytes (own MAC domain).
        assert_ne!(p, unsubscribe_token(b"s", &ann, &ann));
    }
}
