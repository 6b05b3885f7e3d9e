//! Bans: addresses and patterns that may neither post to a list nor subscribe to it, global or
//! per list, as Mailman's ban list has them.
//!
//! A pattern is one of:
//! - an exact address, `eve@example.com` (compared case-insensitively);
//! - a domain, `@example.com` (that domain exactly, case-insensitively; a subdomain is another
//!   domain — ban it too, or use a regex);
//! - a regular expression starting with `^`, matched against the whole address as Herald
//!   spells it (`local@domain`, domain lower-cased, IDN domains in their ASCII `xn--` form),
//!   case-insensitively.
//!
//! IDN: a domain or address pattern written with a Unicode domain (`@bücher.example`) is stored
//! in its ASCII form (`@xn--bcher-kva.example`), the only form an [`Address`] can have, so it
//! matches. A regex is matched as written: write its domain in the `xn--` form.
//!
//! Checks happen at RCPT (envelope sender of a post or request), at the end of DATA (the `From:`
//! of a post: `herald-enqueue`) and on every path that adds a member (`members`, `import`).
//! Compiled bans are cached in the [`Store`]: a check costs one small query that names the
//! current set of rows (`MAX(id), COUNT(*)`: rows are only inserted and deleted, ids never
//! reused, so any change alters the pair), even when another process (the CLI) changed them.
//!
//! Limits: a pattern is at most [`MAX_BAN_PATTERN_CHARS`] characters; a regex compiles within
//! [`REGEX_SIZE_LIMIT`] bytes (the `regex` crate refuses larger programs instead of growing) and
//! runs in time linear in the address (no backtracking: `^(a+)+$` is as cheap as `^a+$`); at most
//! [`MAX_BANS`] bans in all.
//!
//! SECURITY: patterns come from administrators (API, CLI) but are checked against addresses
//! from anyone; the regex engine's linear-time guarantee and size limit are what keep a careless
//! pattern from becoming a denial of service on the RCPT path.

use crate::error::{storage, DirectoryError};
use crate::lists::ensure_list;
use crate::patterns::{parse, BanSet};
pub use crate::patterns::{MAX_BAN_PATTERN_CHARS, REGEX_SIZE_LIMIT};
pub use crate::refusal::Ban;
use crate::store::Store;
use crate::Directory;
use herald_types::{unix_ms_now, Address, ListId};
use rusqlite::{params, Connection, OptionalExtension};
use std::sync::{Arc, PoisonError};

/// Most bans stored (all scopes): each one is checked on every post's RCPT.
pub const MAX_BANS: usize = 10_000;

/// Checks that `pattern` is acceptable and returns its stored form (for the API's answers).
pub fn normalize_ban_pattern(pattern: &str) -> Result<String, DirectoryError> {
    parse(pattern).map(|(text, _)| text)
}

/// The current compiled set, rebuilt when the rows changed since the cached one.
pub(crate) fn ban_set(store: &Store, conn: &Connection) -> Result<Arc<BanSet>, DirectoryError> {
    let generation: (i64, i64) = conn
        .prepare_cached("SELECT COALESCE(MAX(id), 0), COUNT(*) FROM bans")
        .and_then(|mut st| st.query_row([], |r| Ok((r.get(0)?, r.get(1)?))))
        .map_err(storage("read ban generation"))?;
    cached_set(&store.bans, generation, || load(conn))
}

/// The cached set if it was built from `generation` (MAX(id), COUNT(*): ban rows are only
/// inserted and deleted), else the set `load` reads, compiled and cached. Both backends.
pub(crate) fn cached_set(
    cache: &crate::patterns::BanCache,
    generation: (i64, i64),
    load: impl FnOnce() -> Result<Vec<Ban>, DirectoryError>,
) -> Result<Arc<BanSet>, DirectoryError> {
    // std Mutex: no await under it; compiling a few thousand patterns is milliseconds, once per
    // change.
    let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((g, set)) = cache.as_ref() {
        if *g == generation {
            return Ok(set.clone());
        }
    }
    let set = Arc::new(compile(load()?));
    *cache = Some((generation, set.clone()));
    Ok(set)
}

fn load(conn: &Connection) -> Result<Vec<Ban>, DirectoryError> {
    let mut st = conn
        .prepare_cached("SELECT id, list_id, pattern, created_at_ms FROM bans ORDER BY id")
        .map_err(storage("read bans"))?;
    let rows = st.query_map([], ban_row).map_err(storage("read bans"))?;
    rows.collect::<Result<_, _>>().map_err(storage("read bans"))
}

fn compile(bans: Vec<Ban>) -> BanSet {
    let mut set = BanSet::default();
    for ban in bans {
        match parse(&ban.pattern) {
            Ok((_, m)) => set.bans.push((ban, m)),
            // Stored by an older Herald with laxer limits, or edited by hand: one unusable
            // pattern must not make every RCPT fail, so it is skipped, loudly.
            Err(e) => tracing::warn!(ban = ban.id, pattern = %ban.pattern, error = %e,
                "stored ban pattern is not usable; ignored"),
        }
    }
    set
}

fn ban_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Ban> {
    Ok(Ban {
        id: r.get(0)?,
        list: r.get::<_, Option<i64>>(1)?.map(ListId),
        pattern: r.get(2)?,
        created_at_ms: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
    })
}

/// The ban (global or of `list`) that matches `address`, on the caller's connection.
pub(crate) fn ban_on(
    store: &Store,
    conn: &Connection,
    list: Option<ListId>,
    address: &Address,
) -> Result<Option<Ban>, DirectoryError> {
    Ok(ban_set(store, conn)?.find(list, address).cloned())
}

impl Directory {
    /// Bans `pattern` on `list` (`None`: globally). Idempotent: banning the same pattern again
    /// returns the existing ban. Members already on the list stay (as in Mailman): a ban stops
    /// posts and new subscriptions; remove or suppress a member to stop their mail.
    pub fn add_ban(&self, list: Option<ListId>, pattern: &str) -> Result<Ban, DirectoryError> {
        let (text, _) = parse(pattern)?;
        let store = sqlite_or!(self, pg => pg.add_ban(list, &text));
        store.write(|tx| {
            if let Some(l) = list {
                ensure_list(tx, l)?;
            }
            if let Some(b) = find_row(tx, list, &text)? {
                return Ok(b);
            }
            let count: i64 = tx
                .query_row("SELECT COUNT(*) FROM bans", [], |r| r.get(0))
                .map_err(storage("count bans"))?;
            if usize::try_from(count).unwrap_or(usize::MAX) >= MAX_BANS {
                return Err(DirectoryError::invalid(
                    "pattern",
                    format!("at most {MAX_BANS} bans; remove some or use a regex"),
                ));
            }
            let now = i64::try_from(unix_ms_now()).unwrap_or(i64::MAX);
            tx.prepare_cached(
                "INSERT INTO bans (list_id, pattern, created_at_ms) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut st| st.execute(params![list.map(|l| l.0), text, now]))
            .map_err(storage("insert ban"))?;
            Ok(Ban {
                id: tx.last_insert_rowid(),
                list,
                pattern: text.clone(),
                created_at_ms: u64::try_from(now).unwrap_or(0),
            })
        })
    }

    /// Lifts a ban (the pattern as given or as stored). False if there was none.
    pub fn remove_ban(&self, list: Option<ListId>, pattern: &str) -> Result<bool, DirectoryError> {
        // A pattern stored by an older rule set may not parse any more: fall back to the text.
        let text = parse(pattern).map_or_else(|_| pattern.trim().to_string(), |(t, _)| t);
        let store = sqlite_or!(self, pg => pg.remove_ban(list, &text));
        store.write(|tx| {
            let n = tx
                .prepare_cached("DELETE FROM bans WHERE COALESCE(list_id, 0) = ?1 AND pattern = ?2")
                .and_then(|mut st| st.execute(params![list.map_or(0, |l| l.0), text]))
                .map_err(storage("delete ban"))?;
            Ok(n > 0)
        })
    }

    /// The bans of one scope (`None`: the global ones), oldest first.
    pub fn bans(&self, list: Option<ListId>) -> Result<Vec<Ban>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.bans(list));
        let conn = store.reader()?;
        let mut st = conn
            .prepare_cached(
                "SELECT id, list_id, pattern, created_at_ms FROM bans \
                 WHERE COALESCE(list_id, 0) = ?1 ORDER BY id",
            )
            .map_err(storage("read bans"))?;
        let rows = st
            .query_map([list.map_or(0, |l| l.0)], ban_row)
            .map_err(storage("read bans"))?;
        rows.collect::<Result<_, _>>().map_err(storage("read bans"))
    }

    /// The ban that stops `address` on `list` (global bans first, then the list's), if any.
    /// `list: None` checks the global bans only.
    pub fn ban_for(
        &self,
        list: Option<ListId>,
        address: &Address,
    ) -> Result<Option<Ban>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.ban_for(list, address));
        let conn = store.reader()?;
        ban_on(store, &conn, list, address)
    }
}

fn find_row(
    conn: &Connection,
    list: Option<ListId>,
    text: &str,
) -> Result<Option<Ban>, DirectoryError> {
    conn.prepare_cached(
        "SELECT id, list_id, pattern, created_at_ms FROM bans \
         WHERE COALESCE(list_id, 0) = ?1 AND pattern = ?2",
    )
    .and_then(|mut st| {
        st.query_row(params![list.map_or(0, |l| l.0), text], ban_row)
            .optional()
    })
    .map_err(storage("find ban"))
}
