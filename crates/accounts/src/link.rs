//! One-time sign-in links (`/login/<token>`), mailed to the address: random 256-bit tokens,
//! stored as their SHA-256, valid `login_link_secs` (15 minutes by default), deleted when used.
//!
//! Who may get one: an account, or an address the caller vouches for (a list's `moderators`
//! setting names it) — `eligible`. The answer to the form is the same either way; only whether
//! a mail goes out differs.
//!
//! SECURITY: the token in the URL is untrusted: anything but 43 base64url characters is no
//! link, before any database work. Redeeming deletes the row in the same statement that reads
//! it (`DELETE … RETURNING`), so two concurrent POSTs of one link cannot both sign in. Asking is
//! throttled per address and per client, whether or not the address has an account (the
//! throttle's answer must not reveal that either).

use crate::error::AccountsError;
use crate::session::parse_id;
use crate::{key, Accounts};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use herald_types::Address;
use rusqlite::{params, OptionalExtension};
use sha2::{Digest, Sha256};
use std::net::IpAddr;

/// What asking for a link came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkRequest {
    /// Mail this token to the address.
    Send(String),
    /// Nobody to send it to (no account, not vouched for): say the same as for `Send`.
    Nobody,
    /// Too many asked for this address or by this client: try again after this many seconds.
    Throttled { retry_after_secs: u64 },
}

fn token_hash(raw: &[u8; 32]) -> Vec<u8> {
    Sha256::digest(raw).to_vec()
}

impl Accounts {
    /// A new sign-in link for `address`, asked for by `client`.
    pub fn request_link(
        &self,
        address: &Address,
        eligible: bool,
        client: IpAddr,
        now_ms: u64,
    ) -> Result<LinkRequest, AccountsError> {
        let k = key(address);
        let throttle = &self.inner.throttles.links;
        if let Err(wait_ms) = throttle.check_both(&k, client, now_ms) {
            return Ok(LinkRequest::Throttled {
                retry_after_secs: wait_ms.div_ceil(1000).max(1),
            });
        }
        throttle.hit_both(&k, client, now_ms);
        if !eligible && self.get_key(&k)?.is_none() {
            return Ok(LinkRequest::Nobody);
        }
        let raw: [u8; 32] = rand::random();
        let expires = now_ms + self.config().login_link_secs * 1000;
        let db = self.db();
        db.execute(
            "DELETE FROM login_links WHERE expires_ms <= ?1",
            [now_ms as i64],
        )?;
        db.execute(
            "INSERT INTO login_links (hash, address, expires_ms) VALUES (?1, ?2, ?3)",
            params![token_hash(&raw), k, expires as i64],
        )?;
        Ok(LinkRequest::Send(URL_SAFE_NO_PAD.encode(raw)))
    }

    /// True when `token` is a live link (the page showing the button; changes nothing).
    pub fn link_is_live(&self, token: &str, now_ms: u64) -> Result<bool, AccountsError> {
        let Some(raw) = parse_id(token) else {
            return Ok(false);
        };
        let found: Option<i64> = self
            .db()
            .prepare_cached("SELECT expires_ms FROM login_links WHERE hash = ?1")?
            .query_row([token_hash(&raw)], |r| r.get(0))
            .optional()?;
        Ok(found.is_some_and(|e| (e as u64) > now_ms))
    }

    /// Uses a link: the address it signs in, once; `None` for a used, expired or unknown one.
    pub fn redeem_link(&self, token: &str, now_ms: u64) -> Result<Option<String>, AccountsError> {
        let Some(raw) = parse_id(token) else {
            return Ok(None);
        };
        let row: Option<(String, i64)> = self
            .db()
            .prepare_cached(
                "DELETE FROM login_links WHERE hash = ?1 RETURNING address, expires_ms",
            )?
            .query_row([token_hash(&raw)], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        Ok(row.and_then(|(address, expires)| ((expires as u64) > now_ms).then_some(address)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{addr, store};

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7));

    fn token(r: LinkRequest) -> String {
        match r {
            LinkRequest::Send(t) => t,
            other => panic!("no link: {other:?}"),
        }
    }

    #[test]
    fn a_link_signs_in_once_and_not_after_expiry() {
        let (a, _dir) = store();
        let ann = addr("ann@x.test");
        a.add(&ann, false, None, 0).expect("add");
        let t = token(a.request_link(&ann, false, CLIENT, 0).expect("ask"));
        assert!(a.link_is_live(&t, 1).expect("live"));
        assert!(a.link_is_live(&t, 2).expect("a GET changes nothing"));
        assert_eq!(
            a.redeem_link(&t, 5).expect("use"),
            Some("ann@x.test".into())
        );
        assert_eq!(a.redeem_link(&t, 6).expect("again"), None, "single use");
        let t2 = token(a.request_link(&ann, false, CLIENT, 0).expect("ask"));
        assert!(!a.link_is_live(&t2, 15 * 60 * 1000).expect("expired"));
        assert_eq!(a.redeem_link(&t2, 15 * 60 * 1000).expect("late"), None);
    }

    #[test]
    fn strangers_get_nothing_and_nobody_is_mail_bombed() {
        let (a, _dir) = store();
        let stranger = addr("who@x.test");
        assert_eq!(
            a.request_link(&stranger, false, CLIENT, 0).expect("ask"),
            LinkRequest::Nobody
        );
        // A list moderator without an account is vouched for by the caller.
        assert!(matches!(
            a.request_link(&addr("mod@x.test"), true, CLIENT, 0)
                .expect("ask"),
            LinkRequest::Send(_)
        ));
        let victim = addr("victim@x.test");
        a.add(&victim, false, None, 0).expect("add");
        let mut sent = 0;
        for i in 0..20u8 {
            let client = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, i));
            if let LinkRequest::Send(_) = a.request_link(&victim, false, client, 10).expect("ask") {
                sent += 1;
            }
        }
        assert_eq!(sent, 3, "three links an hour, whoever asks");
        // The stranger's address is throttled the same way (no enumeration by the 429).
        for _ in 0..2 {
            let _ = a.request_link(&stranger, false, CLIENT, 10);
        }
        assert!(matches!(
            a.request_link(&stranger, false, CLIENT, 10).expect("ask"),
            LinkRequest::Throttled { .. }
        ));
    }

    #[test]
    fn hostile_link_tokens_are_no_link() {
        let (a, _dir) = store();
        for garbage in ["", "x", &"A".repeat(10 * 1024), "../../etc/passwd", "ÿ"] {
            assert!(!a.link_is_live(garbage, 0).expect("no error"));
            assert_eq!(a.redeem_link(garbage, 0).expect("no error"), None);
        }
    }
}
