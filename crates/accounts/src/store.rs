//! Accounts and their roles: add, change, remove, read; and password sign-in, throttled.
//!
//! SECURITY: sign-in answers the same [`LoginOutcome::Refused`] for an unknown address, an
//! account without a password and a wrong password, after the same argon2 work
//! (`password::verify_dummy`), so neither the answer nor its timing tells whether an account
//! exists. Failures count against the address *and* the client (`throttle`), checked before
//! any hashing, so a locked-out guesser costs the server nothing.

use crate::error::AccountsError;
use crate::principal::Role;
use crate::{key, password, Accounts};
use herald_types::Address;
use rusqlite::{params, OptionalExtension};
use std::net::IpAddr;

/// An account as the CLI and the API show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub address: String,
    pub site_admin: bool,
    pub has_password: bool,
    pub created_ms: u64,
    /// (list address, role), from the `roles` table (a list's own `moderators` setting is
    /// added where roles are resolved, in `principal`).
    pub roles: Vec<(String, Role)>,
}

/// The answer to a password sign-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginOutcome {
    /// Signed in as this address (canonical).
    Ok(String),
    /// Wrong address or password (one answer for both).
    Refused,
    /// Too many failures for the account or the client: try again after this many seconds.
    Throttled { retry_after_secs: u64 },
}

impl Accounts {
    /// Creates an account. A password, when given, is checked and hashed.
    pub fn add(
        &self,
        address: &Address,
        site_admin: bool,
        password: Option<&str>,
        now_ms: u64,
    ) -> Result<Account, AccountsError> {
        let hash = password.map(password::hash).transpose()?;
        let k = key(address);
        let db = self.db();
        let done = db.execute(
            "INSERT OR IGNORE INTO accounts (address, password, site_admin, created_ms)
             VALUES (?1, ?2, ?3, ?4)",
            params![k, hash, site_admin, now_ms as i64],
        )?;
        if done == 0 {
            return Err(AccountsError::AlreadyExists(k));
        }
        drop(db);
        self.get(address)?
            .ok_or_else(|| AccountsError::NoSuchAccount(key(address)))
    }

    /// Sets (or with `None` clears) the password; every session of the account ends, so a
    /// changed password locks out whoever knew the old one.
    pub fn set_password(
        &self,
        address: &Address,
        password: Option<&str>,
    ) -> Result<(), AccountsError> {
        let hash = password.map(password::hash).transpose()?;
        let k = key(address);
        let mut db = self.db();
        let tx = db.transaction()?;
        let n = tx.execute(
            "UPDATE accounts SET password = ?2 WHERE address = ?1",
            params![k, hash],
        )?;
        if n == 0 {
            return Err(AccountsError::NoSuchAccount(k));
        }
        tx.execute("DELETE FROM sessions WHERE address = ?1", [&k])?;
        tx.commit()?;
        Ok(())
    }

    /// Grants or withdraws site administration.
    pub fn set_site_admin(&self, address: &Address, on: bool) -> Result<(), AccountsError> {
        let k = key(address);
        let n = self.db().execute(
            "UPDATE accounts SET site_admin = ?2 WHERE address = ?1",
            params![k, on],
        )?;
        if n == 0 {
            return Err(AccountsError::NoSuchAccount(k));
        }
        Ok(())
    }

    /// Removes an account with its roles, sessions and pending links. False when there was none.
    pub fn remove(&self, address: &Address) -> Result<bool, AccountsError> {
        let k = key(address);
        let mut db = self.db();
        let tx = db.transaction()?;
        tx.execute("DELETE FROM sessions WHERE address = ?1", [&k])?;
        tx.execute("DELETE FROM login_links WHERE address = ?1", [&k])?;
        tx.execute("DELETE FROM roles WHERE address = ?1", [&k])?;
        let n = tx.execute("DELETE FROM accounts WHERE address = ?1", [&k])?;
        tx.commit()?;
        Ok(n > 0)
    }

    pub fn get(&self, address: &Address) -> Result<Option<Account>, AccountsError> {
        self.get_key(&key(address))
    }

    /// The account stored under `k` (canonical text).
    pub(crate) fn get_key(&self, k: &str) -> Result<Option<Account>, AccountsError> {
        let db = self.db();
        let row = db
            .prepare_cached(
                "SELECT address, password IS NOT NULL, site_admin, created_ms
                 FROM accounts WHERE address = ?1",
            )?
            .query_row([k], |r| {
                Ok(Account {
                    address: r.get(0)?,
                    has_password: r.get(1)?,
                    site_admin: r.get(2)?,
                    created_ms: r.get::<_, i64>(3)? as u64,
                    roles: Vec::new(),
                })
            })
            .optional()?;
        let Some(mut a) = row else { return Ok(None) };
        a.roles = roles_of(&db, k)?;
        Ok(Some(a))
    }

    /// Every account, by address.
    pub fn list(&self) -> Result<Vec<Account>, AccountsError> {
        let keys: Vec<String> = {
            let db = self.db();
            let mut st = db.prepare("SELECT address FROM accounts ORDER BY address")?;
            let rows = st.query_map([], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(a) = self.get_key(&k)? {
                out.push(a);
            }
        }
        Ok(out)
    }

    /// Gives `address` `role` on `list` (replacing its role there), or with `None` takes it
    /// away. The account must exist.
    pub fn set_role(
        &self,
        address: &Address,
        list: &Address,
        role: Option<Role>,
    ) -> Result<(), AccountsError> {
        let (k, l) = (key(address), key(list));
        let db = self.db();
        let exists: bool = db
            .prepare_cached("SELECT 1 FROM accounts WHERE address = ?1")?
            .exists([&k])?;
        if !exists {
            return Err(AccountsError::NoSuchAccount(k));
        }
        match role {
            Some(r) => db.execute(
                "INSERT INTO roles (address, list, role) VALUES (?1, ?2, ?3)
                 ON CONFLICT (address, list) DO UPDATE SET role = excluded.role",
                params![k, l, r.word()],
            )?,
            None => db.execute(
                "DELETE FROM roles WHERE address = ?1 AND list = ?2",
                params![k, l],
            )?,
        };
        Ok(())
    }

    /// Removes every role on `list` (the list was deleted). Returns how many.
    pub fn remove_list_roles(&self, list: &Address) -> Result<u64, AccountsError> {
        let n = self
            .db()
            .execute("DELETE FROM roles WHERE list = ?1", [key(list)])?;
        Ok(n as u64)
    }

    /// Password sign-in by `client` for the address typed (`address`, unparsed: a malformed
    /// one is refused like an unknown one).
    pub fn login(
        &self,
        address: &str,
        password: &str,
        client: IpAddr,
        now_ms: u64,
    ) -> Result<LoginOutcome, AccountsError> {
        let k = Address::parse(address.trim())
            .map(|a| key(&a))
            // Bounded: the throttle keys by it, and an unparsable input is no one's account.
            .unwrap_or_else(|_| address.chars().take(64).collect::<String>().to_lowercase());
        let throttle = &self.inner.throttles.logins;
        if let Err(wait_ms) = throttle.check_both(&k, client, now_ms) {
            return Ok(LoginOutcome::Throttled {
                retry_after_secs: wait_ms.div_ceil(1000).max(1),
            });
        }
        let stored: Option<Option<String>> = self
            .db()
            .prepare_cached("SELECT password FROM accounts WHERE address = ?1")?
            .query_row([&k], |r| r.get(0))
            .optional()?;
        let ok = match stored.flatten() {
            Some(hash) => password::verify(&hash, password),
            None => {
                password::verify_dummy(password);
                false
            }
        };
        if ok {
            throttle.clear_key(&k);
            Ok(LoginOutcome::Ok(k))
        } else {
            throttle.hit_both(&k, client, now_ms);
            Ok(LoginOutcome::Refused)
        }
    }
}

/// The throttle key of the admin token typed into the dashboard's form.
const TOKEN_KEY: &str = "(admin token)";

impl Accounts {
    /// Whether `client` may try the admin token in the sign-in form now: the failed-login
    /// throttle applies to it as to a password (`Err(seconds to wait)`).
    pub fn token_login_allowed(&self, client: IpAddr, now_ms: u64) -> Result<(), u64> {
        self.inner
            .throttles
            .logins
            .check_both(TOKEN_KEY, client, now_ms)
            .map_err(|ms| ms.div_ceil(1000).max(1))
    }

    /// Counts a wrong admin token typed by `client`.
    pub fn token_login_failed(&self, client: IpAddr, now_ms: u64) {
        self.inner
            .throttles
            .logins
            .by_client
            .hit(&crate::throttle::client_key(client), now_ms);
    }
}

fn roles_of(db: &rusqlite::Connection, k: &str) -> Result<Vec<(String, Role)>, AccountsError> {
    let mut st =
        db.prepare_cached("SELECT list, role FROM roles WHERE address = ?1 ORDER BY list")?;
    let rows = st.query_map([k], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (list, word) = row?;
        // The CHECK constraint keeps other words out; one that got in anyway grants nothing.
        if let Some(role) = Role::from_word(&word) {
            out.push((list, role));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{addr, store};

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));

    #[test]
    fn accounts_roles_and_password_sign_in() {
        let (a, _dir) = store();
        let ann = addr("Ann@Example.test");
        a.add(&ann, false, Some("long enough pw"), 1).expect("add");
        assert!(matches!(
            a.add(&addr("ann@example.test"), false, None, 1),
            Err(AccountsError::AlreadyExists(_))
        ));
        a.set_role(&ann, &addr("dev@lists.test"), Some(Role::Owner))
            .expect("role");
        a.set_role(&ann, &addr("ops@lists.test"), Some(Role::Moderator))
            .expect("role");
        a.set_role(&ann, &addr("ops@lists.test"), Some(Role::Owner))
            .expect("replace");
        let got = a.get(&ann).expect("get").expect("there");
        assert_eq!(got.address, "ann@example.test");
        assert_eq!(got.roles.len(), 2);
        assert!(got.roles.iter().all(|(_, r)| *r == Role::Owner));
        assert_eq!(
            a.login("ANN@example.test", "long enough pw", CLIENT, 10)
                .expect("login"),
            LoginOutcome::Ok("ann@example.test".into())
        );
        assert_eq!(
            a.login("ann@example.test", "wrong", CLIENT, 10)
                .expect("login"),
            LoginOutcome::Refused
        );
        assert_eq!(
            a.login("nobody@example.test", "long enough pw", CLIENT, 10)
                .expect("login"),
            LoginOutcome::Refused,
            "unknown addresses get the same answer"
        );
        assert!(matches!(
            a.set_role(
                &addr("nobody@x.test"),
                &addr("dev@lists.test"),
                Some(Role::Owner)
            ),
            Err(AccountsError::NoSuchAccount(_))
        ));
        a.set_role(&ann, &addr("dev@lists.test"), None)
            .expect("none");
        assert_eq!(a.get(&ann).expect("get").expect("there").roles.len(), 1);
        assert_eq!(
            a.remove_list_roles(&addr("OPS@lists.test")).expect("drop"),
            1
        );
        assert!(a.get(&ann).expect("get").expect("there").roles.is_empty());
        assert!(a.remove(&ann).expect("rm"));
        assert!(!a.remove(&ann).expect("rm again"));
        assert!(a.list().expect("list").is_empty());
    }

    #[test]
    fn six_failures_throttle_the_account_and_the_client() {
        let (a, _dir) = store();
        let bob = addr("bob@example.test");
        a.add(&bob, false, Some("the right one"), 1).expect("add");
        for _ in 0..5 {
            assert_eq!(
                a.login("bob@example.test", "wrong", CLIENT, 1000)
                    .expect("x"),
                LoginOutcome::Refused
            );
        }
        // Even the right password waits now: the guesser learns nothing.
        assert!(matches!(
            a.login("bob@example.test", "the right one", CLIENT, 2000).expect("x"),
            LoginOutcome::Throttled { retry_after_secs } if retry_after_secs > 800
        ));
        // Another client is throttled by the account's count too.
        let other: IpAddr = "198.51.100.9".parse().expect("ip");
        assert!(matches!(
            a.login("bob@example.test", "the right one", other, 2000)
                .expect("x"),
            LoginOutcome::Throttled { .. }
        ));
        // The first client cannot move on to another account either.
        assert!(matches!(
            a.login("carol@example.test", "x", CLIENT, 2000).expect("x"),
            LoginOutcome::Throttled { .. }
        ));
        // After the window, the right password works and clears the account's count.
        let later = 1000 + 15 * 60 * 1000 + 1;
        assert_eq!(
            a.login("bob@example.test", "the right one", other, later)
                .expect("x"),
            LoginOutcome::Ok("bob@example.test".into())
        );
    }

    #[test]
    fn hostile_sign_in_input_is_refused_cheaply() {
        let (a, _dir) = store();
        let huge = "p".repeat(1 << 20);
        let long_addr = format!("{}@example.test", "a".repeat(10_000));
        let started = std::time::Instant::now();
        assert_eq!(
            a.login(&long_addr, &huge, CLIENT, 1).expect("x"),
            LoginOutcome::Refused
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert!(a
            .add(&addr("x@example.test"), false, Some(&huge), 1)
            .is_err());
        // Unicode addresses are accounts like any other.
        let u = addr("jörg@bücher.example");
        a.add(&u, false, Some("ein langes Passwort"), 1)
            .expect("add");
        assert!(matches!(
            a.login("jörg@bücher.example", "ein langes Passwort", CLIENT, 2)
                .expect("x"),
            LoginOutcome::Ok(_)
        ));
    }
}
