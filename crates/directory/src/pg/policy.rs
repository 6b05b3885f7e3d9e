//! Bans, the suppression list and erasure hashes on PostgreSQL: the SQL of `crate::bans`,
//! `crate::suppression` and the erasure part of `crate::person`. Pattern parsing, the ban
//! matcher and its cache are shared with the SQLite side.
//!
//! [`refusals`] checks a whole batch of addresses in three queries (bans generation,
//! suppressions, erasure hashes) however long the batch: the bulk add paths must not pay a
//! round trip per member.

use super::{col, key, ms, unms, Db, PgStore};
use crate::error::DirectoryError;
use crate::patterns::BanSet;
use crate::refusal::{Ban, Refusal, Suppression, SuppressionSource};
use herald_types::{Address, ListId};
use postgres::{GenericClient, Row};
use std::collections::HashMap;
use std::sync::Arc;

fn ban_row(r: &Row) -> Result<Ban, DirectoryError> {
    Ok(Ban {
        id: col(r, 0)?,
        list: col::<Option<i64>>(r, 1)?.map(ListId),
        pattern: col(r, 2)?,
        created_at_ms: unms(col(r, 3)?),
    })
}

/// The compiled bans, rebuilt when the rows changed (see `crate::bans::cached_set`).
fn ban_set<C: GenericClient>(
    store: &PgStore,
    db: &mut Db<'_, C>,
) -> Result<Arc<BanSet>, DirectoryError> {
    let g = db.one(
        "read ban generation",
        "SELECT COALESCE(MAX(id), 0)::BIGINT, COUNT(*) FROM bans",
        &[],
    )?;
    let generation = (col(&g, 0)?, col(&g, 1)?);
    crate::bans::cached_set(&store.bans, generation, || {
        db.all(
            "read bans",
            "SELECT id, list_id, pattern, created_at_ms FROM bans ORDER BY id",
            &[],
        )?
        .iter()
        .map(ban_row)
        .collect()
    })
}

/// The database's erasure key (migration 6), read once per store: it never changes.
pub(crate) fn erasure_key<C: GenericClient>(
    store: &PgStore,
    db: &mut Db<'_, C>,
) -> Result<Vec<u8>, DirectoryError> {
    if let Some(k) = store.erasure_key.get() {
        return Ok(k.clone());
    }
    let r = db.one(
        "read erasure key",
        "SELECT value FROM directory_keys WHERE name = 'erasure'",
        &[],
    )?;
    let k: Vec<u8> = col(&r, 0)?;
    Ok(store.erasure_key.get_or_init(|| k).clone())
}

pub(crate) fn erased_at<C: GenericClient>(
    store: &PgStore,
    db: &mut Db<'_, C>,
    address: &Address,
) -> Result<Option<u64>, DirectoryError> {
    let hash = herald_types::token::erasure_hash(&erasure_key(store, db)?, address);
    db.opt(
        "find erasure",
        "SELECT at_ms FROM erased WHERE hash = $1",
        &[&hash],
    )?
    .map(|r| col::<i64>(&r, 0).map(unms))
    .transpose()
}

const SUPPRESSION_COLUMNS: &str = "list_id, address, reason, source, at_ms";

fn suppression(r: &Row) -> Result<Suppression, DirectoryError> {
    crate::suppression::decode((col(r, 0)?, col(r, 1)?, col(r, 2)?, col(r, 3)?, col(r, 4)?))
}

/// The suppression in force for `address` on `list` (global first), or its erasure.
pub(crate) fn suppression_on<C: GenericClient>(
    store: &PgStore,
    db: &mut Db<'_, C>,
    list: Option<ListId>,
    address: &Address,
) -> Result<Option<Suppression>, DirectoryError> {
    let k = key(&address.to_string());
    let sql = format!(
        "SELECT {SUPPRESSION_COLUMNS} FROM suppressions \
         WHERE address_key = $1 AND (list_id IS NULL OR list_id = $2) \
         ORDER BY list_id IS NOT NULL LIMIT 1"
    );
    if let Some(r) = db.opt("find suppression", &sql, &[&k, &list.map(|l| l.0)])? {
        return suppression(&r).map(Some);
    }
    Ok(erased_at(store, db, address)?.map(|at| crate::person::erasure_suppression(address, at)))
}

/// Why `address` may not join `list`, if it may not: suppressed first, then banned.
pub(crate) fn refusal<C: GenericClient>(
    store: &PgStore,
    db: &mut Db<'_, C>,
    list: ListId,
    address: &Address,
) -> Result<Option<Refusal>, DirectoryError> {
    Ok(refusals(store, db, list, &[address])?.pop().flatten())
}

/// [`refusal`] for every address of a batch, in order, in three queries.
pub(crate) fn refusals<C: GenericClient>(
    store: &PgStore,
    db: &mut Db<'_, C>,
    list: ListId,
    addresses: &[&Address],
) -> Result<Vec<Option<Refusal>>, DirectoryError> {
    if addresses.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<String> = addresses.iter().map(|a| key(&a.to_string())).collect();
    let sql = format!(
        "SELECT {SUPPRESSION_COLUMNS}, address_key FROM suppressions \
         WHERE address_key = ANY($1) AND (list_id IS NULL OR list_id = $2) \
         ORDER BY list_id IS NOT NULL DESC"
    );
    // Ordered list scope first, global last, so the global entry wins the map (as SQLite's
    // ORDER BY ... LIMIT 1 prefers it).
    let mut suppressed: HashMap<String, Suppression> = HashMap::new();
    for r in db.all("find suppressions", &sql, &[&keys, &list.0])? {
        suppressed.insert(col(&r, 5)?, suppression(&r)?);
    }
    let ekey = erasure_key(store, db)?;
    let hashes: Vec<String> = addresses
        .iter()
        .map(|a| herald_types::token::erasure_hash(&ekey, a))
        .collect();
    let mut erased: HashMap<String, u64> = HashMap::new();
    for r in db.all(
        "find erasures",
        "SELECT hash, at_ms FROM erased WHERE hash = ANY($1)",
        &[&hashes],
    )? {
        erased.insert(col(&r, 0)?, unms(col(&r, 1)?));
    }
    let bans = ban_set(store, db)?;
    Ok(addresses
        .iter()
        .zip(keys.iter().zip(&hashes))
        .map(|(a, (k, h))| {
            if let Some(s) = suppressed.get(k) {
                return Some(Refusal::Suppressed(s.clone()));
            }
            if let Some(at) = erased.get(h) {
                return Some(Refusal::Suppressed(crate::person::erasure_suppression(
                    a, *at,
                )));
            }
            bans.find(Some(list), a).cloned().map(Refusal::Banned)
        })
        .collect())
}

impl PgStore {
    pub(crate) fn refusal_of(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<Refusal>, DirectoryError> {
        self.read(|db| refusal(self, db, list, address))
    }

    pub(crate) fn suppression_for(
        &self,
        list: Option<ListId>,
        address: &Address,
    ) -> Result<Option<Suppression>, DirectoryError> {
        self.read(|db| suppression_on(self, db, list, address))
    }

    pub(crate) fn ban_for(
        &self,
        list: Option<ListId>,
        address: &Address,
    ) -> Result<Option<Ban>, DirectoryError> {
        self.read(|db| Ok(ban_set(self, db)?.find(list, address).cloned()))
    }

    /// `Directory::suppress`'s transaction: (entry, new, members disabled).
    pub(crate) fn suppress(
        &self,
        list: Option<ListId>,
        address: &Address,
        reason: &str,
        source: SuppressionSource,
        disabled_reason: &str,
    ) -> Result<(Suppression, bool, u64), DirectoryError> {
        let addr = address.to_string();
        let k = key(&addr);
        self.write(|db| {
            if let Some(l) = list {
                super::lists::ensure_list(db, l)?;
            }
            let sql = format!(
                "SELECT {SUPPRESSION_COLUMNS} FROM suppressions \
                 WHERE address_key = $1 AND COALESCE(list_id, 0) = $2"
            );
            let existing = db.opt("find suppression", &sql, &[&k, &list.map_or(0, |l| l.0)])?;
            let (entry, new) = match existing {
                Some(r) => (suppression(&r)?, false),
                None => {
                    let now = herald_types::unix_ms_now();
                    db.exec(
                        "insert suppression",
                        "INSERT INTO suppressions (list_id, address, reason, source, at_ms) \
                         VALUES ($1, $2, $3, $4, $5)",
                        &[
                            &list.map(|l| l.0),
                            &addr,
                            &reason,
                            &source.as_str(),
                            &ms(now),
                        ],
                    )?;
                    let entry = Suppression {
                        list,
                        address: address.clone(),
                        reason: reason.to_string(),
                        source,
                        at_ms: now,
                    };
                    (entry, true)
                }
            };
            let disabled = db.exec(
                "disable suppressed members",
                "UPDATE members SET disabled_reason = $3 WHERE address_key = $1 \
                 AND disabled_reason IS NULL AND ($2::BIGINT IS NULL OR list_id = $2)",
                &[&k, &list.map(|l| l.0), &disabled_reason],
            )?;
            Ok((entry, new, disabled))
        })
    }

    pub(crate) fn unsuppress(
        &self,
        list: Option<ListId>,
        address: &Address,
    ) -> Result<bool, DirectoryError> {
        let k = key(&address.to_string());
        self.write(|db| {
            Ok(db.exec(
                "delete suppression",
                "DELETE FROM suppressions WHERE address_key = $1 AND COALESCE(list_id, 0) = $2",
                &[&k, &list.map_or(0, |l| l.0)],
            )? > 0)
        })
    }

    pub(crate) fn suppressions(
        &self,
        list: Option<ListId>,
        limit: i64,
    ) -> Result<Vec<Suppression>, DirectoryError> {
        let sql = format!(
            "SELECT {SUPPRESSION_COLUMNS} FROM suppressions \
             WHERE COALESCE(list_id, 0) = $1 ORDER BY id DESC LIMIT $2"
        );
        self.read(|db| {
            db.all(
                "read suppressions",
                &sql,
                &[&list.map_or(0, |l| l.0), &limit],
            )?
            .iter()
            .map(suppression)
            .collect()
        })
    }

    /// Sets the date of an imported suppression entry.
    pub(crate) fn date_suppression(
        &self,
        list: Option<ListId>,
        address: &Address,
        at: i64,
    ) -> Result<(), DirectoryError> {
        let k = key(&address.to_string());
        self.write(|db| {
            db.exec(
                "date imported suppression",
                "UPDATE suppressions SET at_ms = $3 WHERE address_key = $1 AND COALESCE(list_id, 0) = $2",
                &[&k, &list.map_or(0, |l| l.0), &at],
            )?;
            Ok(())
        })
    }

    pub(crate) fn add_ban(&self, list: Option<ListId>, text: &str) -> Result<Ban, DirectoryError> {
        self.write(|db| {
            if let Some(l) = list {
                super::lists::ensure_list(db, l)?;
            }
            if let Some(b) = find_row(db, list, text)? {
                return Ok(b);
            }
            let count: i64 = col(&db.one("count bans", "SELECT COUNT(*) FROM bans", &[])?, 0)?;
            if usize::try_from(count).unwrap_or(usize::MAX) >= crate::MAX_BANS {
                return Err(DirectoryError::invalid(
                    "pattern",
                    format!("at most {} bans; remove some or use a regex", crate::MAX_BANS),
                ));
            }
            let now = ms(herald_types::unix_ms_now());
            let r = db.one(
                "insert ban",
                "INSERT INTO bans (list_id, pattern, created_at_ms) VALUES ($1, $2, $3) RETURNING id",
                &[&list.map(|l| l.0), &text, &now],
            )?;
            Ok(Ban {
                id: col(&r, 0)?,
                list,
                pattern: text.to_string(),
                created_at_ms: unms(now),
            })
        })
    }

    pub(crate) fn remove_ban(
        &self,
        list: Option<ListId>,
        text: &str,
    ) -> Result<bool, DirectoryError> {
        self.write(|db| {
            Ok(db.exec(
                "delete ban",
                "DELETE FROM bans WHERE COALESCE(list_id, 0) = $1 AND pattern = $2",
                &[&list.map_or(0, |l| l.0), &text],
            )? > 0)
        })
    }

    pub(crate) fn bans(&self, list: Option<ListId>) -> Result<Vec<Ban>, DirectoryError> {
        self.read(|db| {
            db.all(
                "read bans",
                "SELECT id, list_id, pattern, created_at_ms FROM bans \
                 WHERE COALESCE(list_id, 0) = $1 ORDER BY id",
                &[&list.map_or(0, |l| l.0)],
            )?
            .iter()
            .map(ban_row)
            .collect()
        })
    }
}

fn find_row<C: GenericClient>(
    db: &mut Db<'_, C>,
    list: Option<ListId>,
    text: &str,
) -> Result<Option<Ban>, DirectoryError> {
    db.opt(
        "find ban",
        "SELECT id, list_id, pattern, created_at_ms FROM bans \
         WHERE COALESCE(list_id, 0) = $1 AND pattern = $2",
        &[&list.map_or(0, |l| l.0), &text],
    )?
    .map(|r| ban_row(&r))
    .transpose()
}
