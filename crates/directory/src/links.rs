//! Capability links are spent on use (schema version 13). Two records make that hold on every
//! node of a cluster, because both live in the shared store, never in a node's memory:
//!
//! - `spent_links`: the key of every link that has been used (a confirmation, a public form's
//!   time token, a moderation decision), kept until the link would have expired anyway, so
//!   the table holds at most one link lifetime of uses. Claiming is one `INSERT` on the
//!   primary key: of two nodes racing with the same link, exactly one wins.
//! - `departures`: when an address last left a list (an unsubscribe by any path, an
//!   administrator's removal). A subscription link older than that subscribes nobody: the
//!   person left after it was sent, and an old mail must not undo that.
//!
//! Both are written by the one member-removal path (`Directory::remove_member`) and the lists
//! stage; the keys are computed by `herald_types::token` from the signed content of a link, so
//! the store never holds a usable link.
//!
//! Limits: expired keys are deleted by the next claim (an indexed range delete), so the table
//! is bounded by the uses within one link lifetime. A departure row is one per address and
//! list, replaced on each departure, deleted with the list or by an erasure.
//!
//! SECURITY: the keys are SHA-256 digests of verified link content; nothing here parses
//! untrusted text.

use crate::error::{storage, DirectoryError};
use crate::Directory;
use herald_types::{Address, ListId};
use rusqlite::{params, OptionalExtension, Transaction};

/// What kind of link a spent key belongs to (stored for the operator's eye; keys of different
/// kinds never collide, each kind hashes under its own domain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// A double opt-in confirmation (`/confirm/<token>`, `confirm <token>` by mail).
    Confirmation,
    /// A public form's time token (`/subscribe/<list>`, `/manage`).
    Form,
    /// The decision on a held post (its approve and reject links share one key).
    Moderation,
}

impl LinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Confirmation => "confirmation",
            LinkKind::Form => "form",
            LinkKind::Moderation => "moderation",
        }
    }
}

/// Milliseconds as stored (they fit i64 for 292 million years).
fn stored(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Records that `address` left `list` now, in the caller's transaction (the removal's).
pub(crate) fn record_departure(
    tx: &Transaction<'_>,
    list: ListId,
    address: &str,
    now_ms: u64,
) -> Result<(), DirectoryError> {
    tx.prepare_cached(
        "INSERT INTO departures (list_id, address, at_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT (list_id, address) DO UPDATE SET at_ms = MAX(at_ms, excluded.at_ms)",
    )
    .and_then(|mut st| st.execute(params![list.0, address, stored(now_ms)]))
    .map_err(storage("record departure"))?;
    Ok(())
}

impl Directory {
    /// Spends the link with `key` (valid until `expires_at_ms`): true when this call spent
    /// it, false when it was spent before (by this node or another). Keys past their expiry
    /// are forgotten on the way.
    pub fn spend_link(
        &self,
        kind: LinkKind,
        key: &str,
        expires_at_ms: u64,
    ) -> Result<bool, DirectoryError> {
        let now = herald_types::unix_ms_now();
        let store = sqlite_or!(self, pg => pg.spend_link(kind, key, now, expires_at_ms));
        store.write(|tx| {
            tx.prepare_cached("DELETE FROM spent_links WHERE expires_at_ms < ?1")
                .and_then(|mut st| st.execute([stored(now)]))
                .map_err(storage("forget expired links"))?;
            let n = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO spent_links (key, kind, spent_at_ms, expires_at_ms) \
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        key,
                        kind.as_str(),
                        stored(now),
                        stored(expires_at_ms)
                    ])
                })
                .map_err(storage("spend link"))?;
            Ok(n == 1)
        })
    }

    /// Gives a spent link back: the action it was spent for failed for a reason of the
    /// server's (a store error), and the person may try again.
    pub fn unspend_link(&self, key: &str) -> Result<(), DirectoryError> {
        let store = sqlite_or!(self, pg => pg.unspend_link(key));
        store.write(|tx| {
            tx.prepare_cached("DELETE FROM spent_links WHERE key = ?1")
                .and_then(|mut st| st.execute([key]))
                .map_err(storage("unspend link"))?;
            Ok(())
        })
    }

    /// Whether the link with `key` has been used (the confirmation page's GET says so instead
    /// of offering a button that can do nothing).
    pub fn link_spent(&self, key: &str) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.link_spent(key));
        let conn = store.reader()?;
        conn.prepare_cached("SELECT 1 FROM spent_links WHERE key = ?1")
            .and_then(|mut st| st.query_row([key], |_| Ok(())).optional())
            .map(|found| found.is_some())
            .map_err(storage("read spent link"))
    }

    /// When `address` last left `list` (Unix milliseconds), if it ever did since links were
    /// spent on use.
    pub fn last_departure(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<u64>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.last_departure(list, address));
        let conn = store.reader()?;
        let at: Option<i64> = conn
            .prepare_cached("SELECT at_ms FROM departures WHERE list_id = ?1 AND address = ?2")
            .and_then(|mut st| {
                st.query_row(params![list.0, address.to_string()], |r| r.get(0))
                    .optional()
            })
            .map_err(storage("read departure"))?;
        Ok(at.map(|a| u64::try_from(a).unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Directory, LinkKind, NewMember};
    use herald_types::{Address, ListSettings};

    fn a(s: &str) -> Address {
        Address::parse(s).expect("address")
    }

    #[test]
    fn a_link_is_spent_once_and_forgotten_after_its_expiry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = Directory::open(&dir.path().join("d.db")).expect("open");
        let far = herald_types::unix_ms_now() + 3_600_000;
        assert!(!d.link_spent("k1").expect("read"));
        assert!(d
            .spend_link(LinkKind::Confirmation, "k1", far)
            .expect("spend"));
        assert!(!d
            .spend_link(LinkKind::Confirmation, "k1", far)
            .expect("again"));
        assert!(d.link_spent("k1").expect("read"));
        d.unspend_link("k1").expect("unspend");
        assert!(d
            .spend_link(LinkKind::Confirmation, "k1", far)
            .expect("after unspend"));
        // An expired key is dropped by the next claim.
        assert!(d.spend_link(LinkKind::Form, "old", 1).expect("spend"));
        assert!(d.spend_link(LinkKind::Form, "k2", far).expect("spend"));
        assert!(!d.link_spent("old").expect("read"));
    }

    #[test]
    fn removing_a_member_records_the_departure_and_erasure_forgets_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = Directory::open(&dir.path().join("d.db")).expect("open");
        let list = d
            .create_list(&a("dev@l.test"), &ListSettings::default())
            .expect("list");
        let bob = a("bob@x.test");
        assert_eq!(d.last_departure(list.id, &bob).expect("read"), None);
        d.add_member(list.id, &NewMember::new(bob.clone()))
            .expect("add");
        let before = herald_types::unix_ms_now();
        assert!(d.remove_member(list.id, &bob).expect("remove"));
        let at = d.last_departure(list.id, &a("BOB@x.test")).expect("read");
        assert!(at.is_some_and(|t| t >= before), "{at:?}");
        // Removing someone who is not on the list records nothing new.
        assert!(!d.remove_member(list.id, &a("ann@x.test")).expect("remove"));
        assert_eq!(
            d.last_departure(list.id, &a("ann@x.test")).expect("read"),
            None
        );
        d.erase_person(&bob).expect("erase");
        assert_eq!(d.last_departure(list.id, &bob).expect("read"), None);
    }
}
