//! The suppression list: addresses Herald must never mail or add again —
//! members who complained (a feedback-loop report), who asked to be erased, or whom an operator
//! entered. Each entry keeps its reason, source and time; its scope is global or one list.
//!
//! Invariants, kept here so no caller can forget them:
//! - every path that adds a member (`add_member*`, `add_members`, CSV import) refuses a
//!   suppressed or banned address with [`DirectoryError::Refused`] (import: the row is rejected
//!   with the reason, the rest goes on);
//! - suppressing an address disables it, in the same transaction, on every list in the scope,
//!   so fan-out (which reads enabled members only) never sends to it, and no per-copy check is
//!   needed on the hot path; re-enabling a suppressed member is refused.
//!
//! Lifting a suppression does not re-enable anyone: the member (if still there) comes back by
//! an administrator's enable or a confirmed subscription.
//!
//! SECURITY: reasons end up in member records and API answers: bounded, no control characters.

use crate::bans::ban_on;
use crate::error::{storage, DirectoryError};
use crate::lists::ensure_list;
use crate::model::{is_forbidden_char, MAX_REASON_CHARS};
pub use crate::refusal::{Refusal, Suppression, SuppressionSource};
use crate::store::Store;
use crate::Directory;
use herald_types::{unix_ms_now, Address, ListId};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

/// Most entries one listing returns.
pub const MAX_SUPPRESSION_LISTING: usize = 10_000;

/// The suppression entry (global first, then the list's) for `address`, on `conn`.
fn suppression_on(
    conn: &Connection,
    list: Option<ListId>,
    address: &Address,
) -> Result<Option<Suppression>, DirectoryError> {
    conn.prepare_cached(
        "SELECT list_id, address, reason, source, at_ms FROM suppressions \
         WHERE address = ?1 AND (list_id IS NULL OR list_id = ?2) \
         ORDER BY list_id IS NOT NULL LIMIT 1",
    )
    .and_then(|mut st| {
        st.query_row(params![address.to_string(), list.map(|l| l.0)], raw_row)
            .optional()
    })
    .map_err(storage("find suppression"))?
    .map(decode)
    .transpose()
    .and_then(|found| match found {
        Some(s) => Ok(Some(s)),
        // An erased person is refused everywhere, as a global suppression would be.
        None => Ok(crate::person::erased_at(conn, address)?
            .map(|at| crate::person::erasure_suppression(address, at))),
    })
}

/// Why `address` may not join `list`, if it may not: suppressed first, then banned.
pub(crate) fn refusal_on(
    store: &Store,
    conn: &Connection,
    list: ListId,
    address: &Address,
) -> Result<Option<Refusal>, DirectoryError> {
    if let Some(s) = suppression_on(conn, Some(list), address)? {
        return Ok(Some(Refusal::Suppressed(s)));
    }
    Ok(ban_on(store, conn, Some(list), address)?.map(Refusal::Banned))
}

/// [`refusal_on`] as the error every add path returns.
pub(crate) fn refuse_on(
    store: &Store,
    conn: &Connection,
    list: ListId,
    address: &Address,
) -> Result<(), DirectoryError> {
    match refusal_on(store, conn, list, address)? {
        Some(why) => Err(DirectoryError::Refused {
            address: address.clone(),
            why: Box::new(why),
        }),
        None => Ok(()),
    }
}

/// Refuses re-enabling a suppressed member (called by `set_member_status`).
pub(crate) fn refuse_enable_on(
    conn: &Connection,
    list: ListId,
    address: &Address,
) -> Result<(), DirectoryError> {
    match suppression_on(conn, Some(list), address)? {
        Some(s) => Err(DirectoryError::Refused {
            address: address.clone(),
            why: Box::new(Refusal::Suppressed(s)),
        }),
        None => Ok(()),
    }
}

pub(crate) type RawRow = (Option<i64>, String, String, String, i64);

fn raw_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

pub(crate) fn decode(
    (list, address, reason, source, at_ms): RawRow,
) -> Result<Suppression, DirectoryError> {
    let corrupt = |reason: String| DirectoryError::Corrupt {
        what: "suppressions",
        reason,
    };
    Ok(Suppression {
        list: list.map(ListId),
        address: Address::parse(&address).map_err(|e| corrupt(format!("{address:?}: {e}")))?,
        reason,
        source: SuppressionSource::parse(&source)
            .ok_or_else(|| corrupt(format!("unknown source {source:?}")))?,
        at_ms: u64::try_from(at_ms).unwrap_or(0),
    })
}

fn check_reason(reason: &str) -> Result<(), DirectoryError> {
    if reason.trim().is_empty() {
        return Err(DirectoryError::invalid("reason", "a reason is required"));
    }
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(DirectoryError::invalid(
            "reason",
            format!("longer than {MAX_REASON_CHARS} characters"),
        ));
    }
    if let Some(c) = reason.chars().find(|&c| is_forbidden_char(c)) {
        return Err(DirectoryError::invalid(
            "reason",
            format!("contains control character {c:?}"),
        ));
    }
    Ok(())
}

/// What [`Directory::suppress`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suppressed {
    /// The entry in force: the new one, or the earlier one when the address was already
    /// suppressed in this scope (the first reason and time are kept).
    pub entry: Suppression,
    /// False when the address was already suppressed in this scope.
    pub new: bool,
    /// Members disabled by this call (enabled ones in the scope).
    pub disabled: u64,
}

impl Directory {
    /// Puts `address` on the suppression list of `list` (`None`: every list) and disables it
    /// wherever it is an enabled member in that scope, in one transaction. Idempotent.
    pub fn suppress(
        &self,
        list: Option<ListId>,
        address: &Address,
        reason: &str,
        source: SuppressionSource,
    ) -> Result<Suppressed, DirectoryError> {
        check_reason(reason)?;
        let disabled_reason: String = format!("suppressed ({}): {reason}", source.as_str())
            .chars()
            .take(MAX_REASON_CHARS)
            .collect();
        let store = sqlite_or!(self, pg => {
            let (entry, new, disabled) =
                pg.suppress(list, address, reason, source, &disabled_reason)?;
            Ok(Suppressed { entry, new, disabled })
        });
        let addr = address.to_string();
        store.write(|tx| {
            if let Some(l) = list {
                ensure_list(tx, l)?;
            }
            let existing = tx
                .prepare_cached(
                    "SELECT list_id, address, reason, source, at_ms FROM suppressions \
                     WHERE address = ?1 AND COALESCE(list_id, 0) = ?2",
                )
                .and_then(|mut st| {
                    st.query_row(params![addr, list.map_or(0, |l| l.0)], raw_row)
                        .optional()
                })
                .map_err(storage("find suppression"))?;
            let (entry, new) = match existing {
                Some(row) => (decode(row)?, false),
                None => {
                    let now = unix_ms_now();
                    tx.prepare_cached(
                        "INSERT INTO suppressions (list_id, address, reason, source, at_ms) \
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .and_then(|mut st| {
                        st.execute(params![
                            list.map(|l| l.0),
                            addr,
                            reason,
                            source.as_str(),
                            i64::try_from(now).unwrap_or(i64::MAX)
                        ])
                    })
                    .map_err(storage("insert suppression"))?;
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
            let disabled = tx
                .prepare_cached(
                    "UPDATE members SET disabled_reason = ?3 WHERE address = ?1 \
                     AND disabled_reason IS NULL AND (?2 IS NULL OR list_id = ?2)",
                )
                .and_then(|mut st| st.execute(params![addr, list.map(|l| l.0), disabled_reason]))
                .map_err(storage("disable suppressed members"))?;
            Ok(Suppressed {
                entry,
                new,
                disabled: disabled as u64,
            })
        })
    }

    /// Takes `address` off the suppression list of one scope. False if it was not on it.
    /// Nobody is re-enabled (see the module doc).
    pub fn unsuppress(
        &self,
        list: Option<ListId>,
        address: &Address,
    ) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.unsuppress(list, address));
        store.write(|tx| {
            let n = tx
                .prepare_cached(
                    "DELETE FROM suppressions WHERE address = ?1 AND COALESCE(list_id, 0) = ?2",
                )
                .and_then(|mut st| {
                    st.execute(params![address.to_string(), list.map_or(0, |l| l.0)])
                })
                .map_err(storage("delete suppression"))?;
            Ok(n > 0)
        })
    }

    /// Up to `limit` (≤ [`MAX_SUPPRESSION_LISTING`]) entries of one scope (`None`: global),
    /// newest first.
    pub fn suppressions(
        &self,
        list: Option<ListId>,
        limit: usize,
    ) -> Result<Vec<Suppression>, DirectoryError> {
        let limit = limit.min(MAX_SUPPRESSION_LISTING) as i64;
        let store = sqlite_or!(self, pg => pg.suppressions(list, limit));
        let conn = store.reader()?;
        let mut st = conn
            .prepare_cached(
                "SELECT list_id, address, reason, source, at_ms FROM suppressions \
                 WHERE COALESCE(list_id, 0) = ?1 ORDER BY id DESC LIMIT ?2",
            )
            .map_err(storage("read suppressions"))?;
        let rows = st
            .query_map(params![list.map_or(0, |l| l.0), limit], raw_row)
            .map_err(storage("read suppressions"))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(decode(row.map_err(storage("read suppressions"))?)?);
        }
        Ok(out)
    }

    /// The suppression in force for `address` on `list` (global first), if any. `list: None`
    /// checks the global list only.
    pub fn suppression_for(
        &self,
        list: Option<ListId>,
        address: &Address,
    ) -> Result<Option<Suppression>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.suppression_for(list, address));
        suppression_on(&*store.reader()?, list, address)
    }

    /// Why `address` may not be added to `list` (suppressed or banned), or `None` if it may.
    /// The lists stage asks before it sends a confirmation, so a banned or suppressed address
    /// gets no mail from a subscribe request.
    pub fn refusal(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<Refusal>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.refusal_of(list, address));
        let conn = store.reader()?;
        refusal_on(store, &conn, list, address)
    }
}
