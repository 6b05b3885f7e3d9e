//! Browser sessions: a random 256-bit id in the cookie, only its SHA-256 in `accounts.db`, an
//! idle and an absolute expiry, and a CSRF token derived from the id.
//!
//! The CSRF token is `HMAC-SHA256(key = session id, "herald-csrf")`: a synchronizer token that
//! needs no storage, is bound to the one session (a token from another session, or from before
//! a sign-in rotated the id, does not verify), and reveals nothing about the id.
//!
//! SECURITY: the cookie value is untrusted. [`parse_id`] accepts exactly 43 base64url
//! characters (32 bytes) and nothing else, before any database work: a 10 KB cookie or garbage
//! is "no session". The lookup is by the hash of the id (primary key), so timing says nothing
//! about stored ids; the CSRF token is verified in constant time (`hmac`'s `verify_slice`).

use crate::error::AccountsError;
use crate::principal::Principal;
use crate::Accounts;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rusqlite::{params, OptionalExtension};
use sha2::{Digest, Sha256};
use std::net::IpAddr;

/// Length of a session id in the cookie (32 bytes, base64url without padding).
pub const COOKIE_CHARS: usize = 43;
/// A session's `seen` time is written at most this often (the dashboard polls every second).
const TOUCH_EVERY_MS: u64 = 60_000;

/// A session just opened: the cookie value and its CSRF token.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub cookie: String,
    pub csrf: String,
}

/// Who a session belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionOwner {
    /// An account (canonical address).
    Account(String),
    /// Whoever typed the admin token; the digest ([`token_digest`]) of the token they typed,
    /// so that changing `http.admin_token` ends these sessions.
    Token(Vec<u8>),
}

/// The digest a token session keeps of the admin token.
pub fn token_digest(token: &str) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"herald-admin-token\0");
    h.update(token.as_bytes());
    h.finalize().to_vec()
}

/// A live session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub owner: SessionOwner,
    pub created_ms: u64,
    /// The CSRF token forms and API calls of this session must carry.
    pub csrf: String,
}

/// The 32 bytes of a well-formed cookie value, or `None`.
pub fn parse_id(value: &str) -> Option<[u8; 32]> {
    if value.len() != COOKIE_CHARS {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(value).ok()?;
    bytes.try_into().ok()
}

fn mac(id: &[u8; 32]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length; 32 bytes cannot be refused.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(id)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    m.update(b"herald-csrf");
    m
}

/// The CSRF token of the session whose cookie value is `id`.
pub fn csrf_token(id: &[u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(mac(id).finalize().into_bytes())
}

/// True when `given` is the CSRF token of the session `cookie` (constant time).
pub fn csrf_matches(cookie: &str, given: &str) -> bool {
    let Some(id) = parse_id(cookie) else {
        return false;
    };
    // 32 bytes encode to 43 characters; anything longer is not a token (and is not decoded).
    if given.len() != COOKIE_CHARS {
        return false;
    }
    let Ok(raw) = URL_SAFE_NO_PAD.decode(given) else {
        return false;
    };
    mac(&id).verify_slice(&raw).is_ok()
}

fn id_hash(id: &[u8; 32]) -> Vec<u8> {
    Sha256::digest(id).to_vec()
}

impl Accounts {
    /// Opens a session for `owner`. Always a new id: a sign-in never reuses the id the browser
    /// had (no session fixation); the caller ends the old one.
    pub fn start_session(
        &self,
        owner: &SessionOwner,
        client: Option<IpAddr>,
        now_ms: u64,
    ) -> Result<NewSession, AccountsError> {
        let id: [u8; 32] = rand::random();
        let (address, token) = match owner {
            SessionOwner::Account(a) => (Some(a.as_str()), None),
            SessionOwner::Token(d) => (None, Some(d.as_slice())),
        };
        let cfg = self.config();
        let db = self.db();
        // Housekeeping at the one place sessions are born: expired ones go.
        db.execute(
            "DELETE FROM sessions WHERE seen_ms < ?1 OR created_ms < ?2",
            params![
                now_ms.saturating_sub(cfg.session_idle_secs * 1000) as i64,
                now_ms.saturating_sub(cfg.session_max_secs * 1000) as i64
            ],
        )?;
        db.execute(
            "INSERT INTO sessions (id_hash, address, token_hash, created_ms, seen_ms, client)
             VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
            params![
                id_hash(&id),
                address,
                token,
                now_ms as i64,
                client.map(|c| c.to_canonical().to_string())
            ],
        )?;
        Ok(NewSession {
            cookie: URL_SAFE_NO_PAD.encode(id),
            csrf: csrf_token(&id),
        })
    }

    /// The live session behind a cookie value, or `None` (malformed, unknown, expired —
    /// an expired one is deleted).
    pub fn session(&self, cookie: &str, now_ms: u64) -> Result<Option<Session>, AccountsError> {
        let Some(id) = parse_id(cookie) else {
            return Ok(None);
        };
        let hash = id_hash(&id);
        let cfg = self.config();
        let db = self.db();
        type Row = (Option<String>, Option<Vec<u8>>, i64, i64);
        let row: Option<Row> = db
            .prepare_cached(
                "SELECT address, token_hash, created_ms, seen_ms FROM sessions WHERE id_hash = ?1",
            )?
            .query_row([&hash], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        let Some((address, token, created, seen)) = row else {
            return Ok(None);
        };
        let owner = match (address, token) {
            (Some(a), _) => SessionOwner::Account(a),
            (None, Some(t)) => SessionOwner::Token(t),
            // Neither: not a row this code writes; no session.
            (None, None) => return Ok(None),
        };
        let (created, seen) = (created as u64, seen as u64);
        let idle = now_ms.saturating_sub(seen) >= cfg.session_idle_secs * 1000;
        let old = now_ms.saturating_sub(created) >= cfg.session_max_secs * 1000;
        if idle || old {
            db.execute("DELETE FROM sessions WHERE id_hash = ?1", [&hash])?;
            return Ok(None);
        }
        if now_ms.saturating_sub(seen) >= TOUCH_EVERY_MS {
            db.execute(
                "UPDATE sessions SET seen_ms = ?2 WHERE id_hash = ?1",
                params![hash, now_ms as i64],
            )?;
        }
        Ok(Some(Session {
            owner,
            created_ms: created,
            csrf: csrf_token(&id),
        }))
    }

    /// Ends the session behind a cookie value (sign-out); nothing when there is none.
    pub fn end_session(&self, cookie: &str) -> Result<(), AccountsError> {
        if let Some(id) = parse_id(cookie) {
            self.db()
                .execute("DELETE FROM sessions WHERE id_hash = ?1", [id_hash(&id)])?;
        }
        Ok(())
    }

    /// The principal of an account session with its stored roles; `None` when the account
    /// was removed meanwhile (its sessions go with it, but a request may be in flight). The
    /// list `moderators` settings are added by the caller, which knows the directory.
    pub fn principal(&self, address: &str) -> Result<Option<Principal>, AccountsError> {
        Ok(self
            .get_key(address)?
            .map(|a| Principal::account(a.address, a.site_admin, &a.roles)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{addr, store};

    #[test]
    fn sessions_expire_idle_and_absolute_and_rotate() {
        let (a, _dir) = store();
        a.add(&addr("ann@x.test"), false, None, 0).expect("add");
        let ann = SessionOwner::Account("ann@x.test".into());
        let s = a.start_session(&ann, None, 0).expect("start");
        assert_eq!(s.cookie.len(), COOKIE_CHARS);
        let live = a.session(&s.cookie, 1000).expect("get").expect("live");
        assert_eq!(live.owner, ann);
        assert_eq!(live.csrf, s.csrf);
        assert!(csrf_matches(&s.cookie, &s.csrf));
        // Used every 30 minutes it lives until the absolute limit (12 h), not beyond.
        let mut t = 0;
        while t < 12 * 3600 * 1000 - 1800 * 1000 {
            t += 1800 * 1000;
            assert!(a.session(&s.cookie, t).expect("get").is_some(), "at {t}");
        }
        assert!(a
            .session(&s.cookie, 12 * 3600 * 1000)
            .expect("get")
            .is_none());
        // Idle for an hour: gone.
        let s2 = a
            .start_session(&SessionOwner::Token(token_digest("t")), None, 0)
            .expect("start");
        assert!(a.session(&s2.cookie, 3600 * 1000).expect("get").is_none());
        // A new sign-in is a new id, and the other's CSRF token does not fit it.
        let s3 = a.start_session(&ann, None, 0).expect("start");
        let s4 = a.start_session(&ann, None, 0).expect("start");
        assert_ne!(s3.cookie, s4.cookie);
        assert!(!csrf_matches(&s4.cookie, &s3.csrf));
        a.end_session(&s4.cookie).expect("end");
        assert!(a.session(&s4.cookie, 1).expect("get").is_none());
    }

    #[test]
    fn hostile_cookies_and_tokens_are_no_session() {
        let (a, _dir) = store();
        let s = a
            .start_session(&SessionOwner::Token(token_digest("t")), None, 0)
            .expect("start");
        let huge = "A".repeat(10 * 1024);
        let mut flipped = s.cookie.clone().into_bytes();
        flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).expect("ascii");
        for garbage in [
            "",
            huge.as_str(),
            "not base64 at all!!!!!!!!!!!!!!!!!!!!!!!!!!",
            "ÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿ",
            flipped.as_str(),
        ] {
            assert!(
                a.session(garbage, 1).expect("no error").is_none(),
                "{garbage:.40}"
            );
            assert!(!csrf_matches(&s.cookie, garbage));
            assert!(!csrf_matches(garbage, &s.csrf));
        }
        assert!(
            a.session(&s.csrf, 1).expect("no error").is_none(),
            "a CSRF token is no id"
        );
        // A token with a bad signature: right length, wrong bytes.
        let mut bad = s.csrf.clone().into_bytes();
        bad[10] = if bad[10] == b'x' { b'y' } else { b'x' };
        assert!(!csrf_matches(
            &s.cookie,
            &String::from_utf8(bad).expect("ascii")
        ));
        assert!(csrf_matches(&s.cookie, &s.csrf));
    }
}
