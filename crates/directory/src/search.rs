//! Finding members for the web administration pages: a page of a list's
//! members whose address or display name starts with a prefix, in address or name order, with
//! keyset paging (`after` = the last member of the previous page). Each page is one index
//! range scan — `members(list_id, address)` (the UNIQUE index) or `members_by_name` (migration
//! 8) — so a page costs the same on a list of ten members or of a million: no COUNT, no OFFSET.
//!
//! Case: prefixes compare with ASCII case folded (SQLite `NOCASE`; PostgreSQL `lower()` under
//! the "C" collation), as addresses are compared everywhere else in the directory.
//!
//! SECURITY: the prefix is untrusted text from a query string: bounded to
//! [`MAX_SEARCH_PREFIX_CHARS`], control characters refused, and bound as a parameter (never
//! spliced into SQL). `LIKE` is not used, so `%` and `_` are ordinary characters.

use crate::error::{storage, DirectoryError};
use crate::lists::ensure_list;
use crate::members::MemberRow;
use crate::model::is_forbidden_char;
use crate::Directory;
use herald_types::{DeliveryMode, ListId, Member, MemberId};
use rusqlite::{params, OptionalExtension};

/// Longest search prefix (an address is at most 254 octets; a name at most a few hundred).
pub const MAX_SEARCH_PREFIX_CHARS: usize = 256;
/// Most members one search page returns.
pub const MAX_SEARCH_PAGE: usize = 1000;

/// Which column a search prefix is matched against (and the page's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchBy {
    #[default]
    Address,
    Name,
}

/// One member of a search page, with what the members page shows beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundMember {
    pub member: Member,
    pub delivery: DeliveryMode,
    /// The member's own language (`None`: the list's).
    pub language: Option<String>,
}

/// The first character above every other: a prefix's range ends just below `prefix + MAX`.
const TOP: char = char::MAX;

/// Checks and folds a search prefix; the folded prefix and its range's exclusive upper bound.
pub(crate) fn prefix_range(prefix: &str) -> Result<(String, String), DirectoryError> {
    if prefix.chars().count() > MAX_SEARCH_PREFIX_CHARS {
        return Err(DirectoryError::invalid(
            "q",
            format!("a search is at most {MAX_SEARCH_PREFIX_CHARS} characters"),
        ));
    }
    if let Some(c) = prefix.chars().find(|&c| is_forbidden_char(c)) {
        return Err(DirectoryError::invalid(
            "q",
            format!("the search contains control character {c:?}"),
        ));
    }
    let low = prefix.to_ascii_lowercase();
    let mut high = low.clone();
    high.push(TOP);
    Ok((low, high))
}

const FOUND_COLUMNS: &str =
    "id, list_id, address, display_name, disabled_reason, fields, delivery, language";

impl Directory {
    /// Up to `limit` (≤ [`MAX_SEARCH_PAGE`]) members of `list` whose address (or display name,
    /// per `by`) starts with `prefix`, ASCII case folded, in that column's order, after member
    /// `after` (the last of the previous page; `None` from the start). An empty prefix pages
    /// through every member in that order. A page shorter than `limit` is the last.
    pub fn search_members(
        &self,
        list: ListId,
        by: SearchBy,
        prefix: &str,
        after: Option<MemberId>,
        limit: usize,
    ) -> Result<Vec<FoundMember>, DirectoryError> {
        let (low, high) = prefix_range(prefix)?;
        let limit = limit.clamp(1, MAX_SEARCH_PAGE);
        let store = sqlite_or!(self, pg => pg.search_members(list, by, &low, &high, after, limit));
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        // The keyset: the previous page's last member, looked up by its primary key. A member
        // removed since is no longer found, and the page starts from the prefix again.
        let last: Option<(String, Option<String>)> = match after {
            Some(id) => conn
                .prepare_cached(
                    "SELECT address, display_name FROM members WHERE id = ?1 AND list_id = ?2",
                )
                .and_then(|mut st| {
                    st.query_row(params![id.0, list.0], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                })
                .map_err(storage("read the search keyset"))?,
            None => None,
        };
        let n = limit as i64;
        let mut rows = Vec::new();
        let mut push = |r: &rusqlite::Row<'_>| -> rusqlite::Result<()> {
            rows.push((
                MemberRow::from_row(r)?,
                r.get::<_, String>(6)?,
                r.get::<_, Option<String>>(7)?,
            ));
            Ok(())
        };
        match (by, last) {
            (SearchBy::Address, None) => run(
                &conn,
                &format!(
                    "SELECT {FOUND_COLUMNS} FROM members WHERE list_id = ?1 \
                     AND address >= ?2 AND address < ?3 ORDER BY address LIMIT ?4"
                ),
                params![list.0, low, high, n],
                &mut push,
            )?,
            (SearchBy::Address, Some((address, _))) => run(
                &conn,
                &format!(
                    "SELECT {FOUND_COLUMNS} FROM members WHERE list_id = ?1 \
                     AND address > ?2 AND address < ?3 ORDER BY address LIMIT ?4"
                ),
                // The last address is at or above the prefix, or the page would not hold it.
                params![list.0, address.max(low), high, n],
                &mut push,
            )?,
            (SearchBy::Name, None) => run(
                &conn,
                &format!(
                    "SELECT {FOUND_COLUMNS} FROM members WHERE list_id = ?1 \
                     AND display_name COLLATE NOCASE >= ?2 AND display_name COLLATE NOCASE < ?3 \
                     ORDER BY display_name COLLATE NOCASE, id LIMIT ?4"
                ),
                params![list.0, low, high, n],
                &mut push,
            )?,
            (SearchBy::Name, Some((_, name))) => run(
                &conn,
                &format!(
                    "SELECT {FOUND_COLUMNS} FROM members WHERE list_id = ?1 \
                     AND (display_name COLLATE NOCASE, id) > (?2, ?5) \
                     AND display_name COLLATE NOCASE < ?3 \
                     ORDER BY display_name COLLATE NOCASE, id LIMIT ?4"
                ),
                // A member without a name is never on a name page: from the prefix again.
                params![
                    list.0,
                    name.unwrap_or_else(|| low.clone()),
                    high,
                    n,
                    after.map_or(0, |a| a.0)
                ],
                &mut push,
            )?,
        }
        rows.into_iter()
            .map(|(row, word, language)| found(row, &word, language))
            .collect()
    }
}

fn run<P: rusqlite::Params>(
    conn: &rusqlite::Connection,
    sql: &str,
    p: P,
    push: &mut dyn FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<()>,
) -> Result<(), DirectoryError> {
    let mut st = conn
        .prepare_cached(sql)
        .map_err(storage("prepare member search"))?;
    let mut rows = st.query(p).map_err(storage("search members"))?;
    while let Some(r) = rows.next().map_err(storage("search members"))? {
        push(r).map_err(storage("search members"))?;
    }
    Ok(())
}

/// A stored row, its delivery word and language, decoded (both backends).
pub(crate) fn found(
    row: MemberRow,
    delivery: &str,
    language: Option<String>,
) -> Result<FoundMember, DirectoryError> {
    Ok(FoundMember {
        language,
        member: row.decode()?,
        delivery: DeliveryMode::parse(delivery).ok_or_else(|| DirectoryError::Corrupt {
            what: "members.delivery",
            reason: format!("unknown delivery mode {delivery:?}"),
        })?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_types::{Address, ListSettings};

    #[test]
    fn hostile_prefixes_are_refused_and_wildcards_are_plain() {
        assert!(prefix_range(&"a".repeat(MAX_SEARCH_PREFIX_CHARS + 1)).is_err());
        for bad in ["a\r\nb", "\0", "x\u{7f}"] {
            assert!(prefix_range(bad).is_err(), "{bad:?}");
        }
        let (low, high) = prefix_range("AnN%_").expect("range");
        assert_eq!(low, "ann%_");
        assert!(high.starts_with("ann%_") && high.ends_with(char::MAX));
    }

    /// Both searches are index range scans, never a sort or a table scan: what keeps a page of
    /// a million-member list as cheap as one of ten.
    #[test]
    fn search_queries_use_an_index_and_never_sort() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = Directory::open(&tmp.path().join("d.db")).expect("open");
        let list = d
            .create_list(
                &Address::parse("l@x.example").expect("a"),
                &ListSettings::default(),
            )
            .expect("list");
        let crate::Backend::Sqlite(store) = d.backend() else {
            unreachable!("opened on SQLite")
        };
        let conn = store.reader().expect("reader");
        let queries = [
            "address >= ?2 AND address < ?3 ORDER BY address LIMIT ?4",
            "address > ?2 AND address < ?3 ORDER BY address LIMIT ?4",
            "display_name COLLATE NOCASE >= ?2 AND display_name COLLATE NOCASE < ?3 \
             ORDER BY display_name COLLATE NOCASE, id LIMIT ?4",
            "(display_name COLLATE NOCASE, id) > (?2, ?5) AND display_name COLLATE NOCASE < ?3 \
             ORDER BY display_name COLLATE NOCASE, id LIMIT ?4",
        ];
        for q in queries {
            let sql = format!(
                "EXPLAIN QUERY PLAN SELECT {FOUND_COLUMNS} FROM members WHERE list_id = ?1 AND {q}"
            );
            let mut st = conn.prepare(&sql).expect("prepare");
            let n = st.parameter_count();
            let args: Vec<rusqlite::types::Value> = (0..n)
                .map(|i| match i {
                    0 | 3 | 4 => rusqlite::types::Value::Integer(list.id.0),
                    _ => rusqlite::types::Value::Text("a".into()),
                })
                .collect();
            let plan: Vec<String> = st
                .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
                .expect("plan")
                .collect::<Result<_, _>>()
                .expect("rows");
            let plan = plan.join(" | ");
            assert!(plan.contains("USING INDEX"), "{q}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{q} sorts: {plan}");
        }
    }
}
