//! Who a session is and which archives it may read.
//!
//! - Anonymous (`LOGIN anonymous <anything>` or `AUTHENTICATE ANONYMOUS`, RFC 4505): lists
//!   whose archive privacy is `public`.
//! - A member (`LOGIN <address> <IMAP password>`): public lists and the `members` lists the
//!   address is on when it logs in. Members have no passwords in Herald; the IMAP password is
//!   an HMAC of the address under the installation secret (`herald_types::token::
//!   imap_password`), shown on the member's own `/manage/<token>` page.
//! - The administrator (`LOGIN admin <http.admin_token>`): every list but those whose privacy
//!   is `none` (nothing is archived for them).
//!
//! SECURITY: user names and passwords come from the network. The admin token is compared in
//! constant time (SHA-256 of both, then a folded XOR, as the HTTP API does); member passwords
//! by hmac's constant-time check. A failed login says only "login failed", whichever part was
//! wrong, so it cannot be used to learn who is a member.

use herald_archive::Privacy;
use herald_directory::Directory;
use herald_types::Address;
use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// Who a logged-in session is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    Anonymous,
    Administrator,
    /// A member, with the lists (lower-case addresses) it was on at login.
    Member {
        address: Address,
        lists: HashSet<String>,
    },
}

impl Who {
    /// Whether this user may read the archive of `list` with privacy `privacy`.
    pub fn may_read(&self, list: &str, privacy: Privacy) -> bool {
        match (privacy, self) {
            (Privacy::None, _) => false,
            (Privacy::Public, _) => true,
            (Privacy::Members, Who::Member { lists, .. }) => lists.contains(list),
            (Privacy::Members | Privacy::Private, Who::Administrator) => true,
            (Privacy::Members | Privacy::Private, _) => false,
        }
    }

    /// For the log: never the password, only the kind (and a member's address).
    pub fn describe(&self) -> String {
        match self {
            Who::Anonymous => "anonymous".into(),
            Who::Administrator => "admin".into(),
            Who::Member { address, .. } => address.to_string(),
        }
    }
}

/// Checks credentials against the admin token, the secret and the directory.
#[derive(Clone)]
pub struct Authenticator {
    pub secret: Vec<u8>,
    /// `http.admin_token` (or `HERALD_ADMIN_TOKEN`); `None`: nobody logs in as `admin`.
    pub admin_token: Option<String>,
    pub directory: Directory,
}

/// The user names that mean "anonymous" (RFC 4505 §1 uses `anonymous` for LOGIN-only clients).
pub const ANONYMOUS_USER: &str = "anonymous";
/// The user name of the administrator.
pub const ADMIN_USER: &str = "admin";

impl Authenticator {
    /// The user `user` with password `password`, if they check out. Blocking (reads the
    /// directory): call it off the async threads.
    pub fn login(&self, user: &str, password: &str) -> Option<Who> {
        if user.eq_ignore_ascii_case(ANONYMOUS_USER) {
            return Some(Who::Anonymous);
        }
        if user.eq_ignore_ascii_case(ADMIN_USER) {
            let token = self.admin_token.as_deref()?;
            return constant_time_eq(token, password).then_some(Who::Administrator);
        }
        let address = Address::parse(user).ok()?;
        if !herald_types::token::verify_imap_password(&self.secret, &address, password) {
            return None;
        }
        let person = match self.directory.person(&address) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "IMAP login: directory lookup failed");
                return None;
            }
        };
        let lists = person
            .memberships
            .into_iter()
            .map(|m| m.list.to_lowercase())
            .collect();
        Some(Who::Member { address, lists })
    }
}

fn constant_time_eq(expected: &str, given: &str) -> bool {
    let (a, b) = (
        Sha256::digest(expected.as_bytes()),
        Sha256::digest(given.as_bytes()),
    );
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privacy_decides_per_kind_of_user() {
        let member = Who::Member {
            address: Address::parse("ann@x.test").unwrap(),
            lists: ["dev@l.test".to_string()].into_iter().collect(),
        };
        for (who, public, members_own, members_other, private, none) in [
            (Who::Anonymous, true, false, false, false, false),
            (member.clone(), true, true, false, false, false),
            (Who::Administrator, true, true, true, true, false),
        ] {
            assert_eq!(who.may_read("dev@l.test", Privacy::Public), public);
            assert_eq!(who.may_read("dev@l.test", Privacy::Members), members_own);
            assert_eq!(who.may_read("ops@l.test", Privacy::Members), members_other);
            assert_eq!(who.may_read("dev@l.test", Privacy::Private), private);
            assert_eq!(who.may_read("dev@l.test", Privacy::None), none);
        }
        assert!(constant_time_eq("abc", "abc"));
        assert!(!constant_time_eq("abc", "abd"));
    }
}
