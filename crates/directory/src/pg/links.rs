//! Spent links and departures on PostgreSQL: the SQL of `crate::links`. Shared by every node,
//! so a link spent at one node is refused at all of them; the claim is one `INSERT … ON
//! CONFLICT DO NOTHING` on the primary key, which PostgreSQL makes atomic across sessions.

use super::{col, key, ms, unms, Db, PgStore};
use crate::error::DirectoryError;
use crate::links::LinkKind;
use herald_types::{Address, ListId};
use postgres::GenericClient;

/// Records that `address` left `list` at `now_ms`, in the caller's transaction.
pub(crate) fn record_departure<C: GenericClient>(
    db: &mut Db<'_, C>,
    list: ListId,
    address: &Address,
    now_ms: u64,
) -> Result<(), DirectoryError> {
    db.exec(
        "record departure",
        "INSERT INTO departures (list_id, address, at_ms) VALUES ($1, $2, $3) \
         ON CONFLICT (list_id, address_key) \
         DO UPDATE SET at_ms = GREATEST(departures.at_ms, excluded.at_ms)",
        &[&list.0, &address.to_string(), &ms(now_ms)],
    )?;
    Ok(())
}

impl PgStore {
    pub(crate) fn spend_link(
        &self,
        kind: LinkKind,
        link: &str,
        now_ms: u64,
        expires_at_ms: u64,
    ) -> Result<bool, DirectoryError> {
        // No directory write lock: one row on its own key, atomic by itself.
        self.unlocked_write(|db| {
            db.exec(
                "forget expired links",
                "DELETE FROM spent_links WHERE expires_at_ms < $1",
                &[&ms(now_ms)],
            )?;
            let n = db.exec(
                "spend link",
                "INSERT INTO spent_links (key, kind, spent_at_ms, expires_at_ms) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING",
                &[&link, &kind.as_str(), &ms(now_ms), &ms(expires_at_ms)],
            )?;
            Ok(n == 1)
        })
    }

    pub(crate) fn unspend_link(&self, link: &str) -> Result<(), DirectoryError> {
        self.unlocked_write(|db| {
            db.exec(
                "unspend link",
                "DELETE FROM spent_links WHERE key = $1",
                &[&link],
            )?;
            Ok(())
        })
    }

    pub(crate) fn link_spent(&self, link: &str) -> Result<bool, DirectoryError> {
        self.read(|db| {
            Ok(db
                .opt(
                    "read spent link",
                    "SELECT 1 FROM spent_links WHERE key = $1",
                    &[&link],
                )?
                .is_some())
        })
    }

    pub(crate) fn last_departure(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<u64>, DirectoryError> {
        let k = key(&address.to_string());
        self.read(|db| {
            db.opt(
                "read departure",
                "SELECT at_ms FROM departures WHERE list_id = $1 AND address_key = $2",
                &[&list.0, &k],
            )?
            .map(|r| col(&r, 0).map(unms))
            .transpose()
        })
    }
}
