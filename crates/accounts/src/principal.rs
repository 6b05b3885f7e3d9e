//! Who is asking, and what they may touch: the one authorization decision of the admin side.
//!
//! A [`Principal`] is the admin token, a local client (no token configured), or a signed-in
//! account with its site-administrator flag and its roles per list. [`Principal::may`] answers
//! for a [`Need`], which the HTTP side derives from the route (one table, in
//! `herald_api::access`).
//!
//! Roles: an owner administers a list (settings, members, held posts, bounces); a moderator
//! handles its held posts only. A list's own `moderators` setting (who moderates by mail) makes
//! an address its moderator here too ([`Principal::with_list_moderators`]).

use herald_types::{Address, List};
use std::collections::BTreeMap;

/// A role on one list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Held posts only.
    Moderator,
    /// Everything of the list but its deletion.
    Owner,
}

impl Role {
    pub fn word(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Moderator => "moderator",
        }
    }

    pub fn from_word(w: &str) -> Option<Role> {
        match w {
            "owner" => Some(Role::Owner),
            "moderator" => Some(Role::Moderator),
            _ => None,
        }
    }
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// The `http.admin_token` (the CLI, Prometheus), or a browser session opened with it.
    Token,
    /// A local client with no admin token configured.
    Local,
    /// A signed-in account (canonical address).
    Account(String),
}

impl Actor {
    /// How the audit log names it.
    pub fn name(&self) -> &str {
        match self {
            Actor::Token => "token",
            Actor::Local => "local",
            Actor::Account(a) => a,
        }
    }
}

/// What a route needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Anyone signed in (their own page, sign-out).
    Signed,
    /// A site administrator.
    Site,
    /// An owner of this list (canonical address).
    Owner(String),
    /// A moderator (or owner) of this list.
    Moderator(String),
}

/// An authenticated requester with their rights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub actor: Actor,
    pub site_admin: bool,
    /// Canonical list address → the strongest role held there.
    pub roles: BTreeMap<String, Role>,
}

impl Principal {
    /// The admin token or a local client: everything.
    pub fn full(actor: Actor) -> Principal {
        Principal {
            actor,
            site_admin: true,
            roles: BTreeMap::new(),
        }
    }

    /// An account with its stored roles.
    pub fn account(address: String, site_admin: bool, roles: &[(String, Role)]) -> Principal {
        let mut p = Principal {
            actor: Actor::Account(address),
            site_admin,
            roles: BTreeMap::new(),
        };
        for (list, role) in roles {
            p.grant(list, *role);
        }
        p
    }

    fn grant(&mut self, list: &str, role: Role) {
        let e = self.roles.entry(list.to_string()).or_insert(role);
        *e = (*e).max(role);
    }

    /// Adds moderator rights on every list whose `moderators` setting names this account's
    /// address, by [`List::is_moderator`]: the rule moderation by mail and posting rights use.
    pub fn with_list_moderators<'a>(
        mut self,
        lists: impl IntoIterator<Item = &'a List>,
    ) -> Principal {
        let Actor::Account(me) = &self.actor else {
            return self;
        };
        // The account's canonical text was an `Address` once; one that no longer parses
        // moderates nothing.
        let Ok(me) = Address::parse(me) else {
            return self;
        };
        for list in lists {
            if list.is_moderator(&me) {
                self.grant(&crate::key(&list.address), Role::Moderator);
            }
        }
        self
    }

    /// The role held on `list` (canonical), if any.
    pub fn role(&self, list: &str) -> Option<Role> {
        self.roles.get(list).copied()
    }

    pub fn may(&self, need: &Need) -> bool {
        if self.site_admin {
            return true;
        }
        match need {
            Need::Signed => true,
            Need::Site => false,
            Need::Owner(list) => self.role(list) == Some(Role::Owner),
            Need::Moderator(list) => self.role(list).is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_moderators_and_everyone_else() {
        let owner = Principal::account(
            "o@x.test".into(),
            false,
            &[("dev@l.test".into(), Role::Owner)],
        );
        let ops_list = herald_types::List {
            id: herald_types::ListId(1),
            address: Address::parse("Ops@L.test").expect("list"),
            settings: herald_types::ListSettings {
                moderators: vec![Address::parse("M@x.test").expect("moderator")],
                ..Default::default()
            },
            created_at_ms: 0,
        };
        let lists = [&ops_list];
        let moderator =
            Principal::account("m@x.test".into(), false, &[]).with_list_moderators(lists);
        let nobody = Principal::account("n@x.test".into(), false, &[]).with_list_moderators(lists);
        let admin = Principal::account("a@x.test".into(), true, &[]);
        let dev = || "dev@l.test".to_string();
        let ops = || "ops@l.test".to_string();
        assert!(owner.may(&Need::Owner(dev())) && owner.may(&Need::Moderator(dev())));
        assert!(!owner.may(&Need::Owner(ops())) && !owner.may(&Need::Site));
        assert!(moderator.may(&Need::Moderator(ops())));
        assert!(!moderator.may(&Need::Owner(ops())) && !moderator.may(&Need::Moderator(dev())));
        assert!(nobody.may(&Need::Signed) && !nobody.may(&Need::Moderator(ops())));
        for n in [Need::Site, Need::Owner(dev()), Need::Moderator(ops())] {
            assert!(admin.may(&n) && Principal::full(Actor::Token).may(&n));
        }
        // A stored moderator role and an owner role elsewhere: the strongest per list wins.
        let both = Principal::account(
            "b@x.test".into(),
            false,
            &[
                ("dev@l.test".into(), Role::Moderator),
                ("dev@l.test".into(), Role::Owner),
            ],
        );
        assert_eq!(both.role("dev@l.test"), Some(Role::Owner));
    }
}
