//! Member search on PostgreSQL: the SQL of `crate::search` (checks and decoding stay there).
//! Both orders compare under the "C" collation against the indexes of migration 8
//! (`members_by_address_prefix`, `members_by_name`), so a prefix is a byte range and a page one
//! index range scan whatever the database's locale.

use super::members::member_row;
use super::{col, PgStore};
use crate::error::DirectoryError;
use crate::members::MEMBER_COLUMNS;
use crate::search::{found, FoundMember, SearchBy};
use herald_types::{ListId, MemberId};

impl PgStore {
    /// `low`/`high`: the folded prefix and its exclusive upper bound (`search::prefix_range`).
    pub(crate) fn search_members(
        &self,
        list: ListId,
        by: SearchBy,
        low: &str,
        high: &str,
        after: Option<MemberId>,
        limit: usize,
    ) -> Result<Vec<FoundMember>, DirectoryError> {
        // `limit` is clamped to MAX_SEARCH_PAGE by the caller.
        let n = limit as i64;
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            let last = match after {
                Some(id) => db.opt(
                    "read the search keyset",
                    "SELECT address_key, lower(display_name COLLATE \"C\") \
                     FROM members WHERE id = $1 AND list_id = $2",
                    &[&id.0, &list.0],
                )?,
                None => None,
            };
            let last: Option<(String, Option<String>)> = match last {
                Some(r) => Some((col(&r, 0)?, col(&r, 1)?)),
                None => None,
            };
            let cols = format!("{MEMBER_COLUMNS}, delivery, language");
            let addr = "address_key COLLATE \"C\"";
            let name = "lower(display_name COLLATE \"C\")";
            let rows = match (by, last) {
                (SearchBy::Address, None) => db.all(
                    "search members",
                    &format!(
                        "SELECT {cols} FROM members WHERE list_id = $1 \
                         AND {addr} >= $2 AND {addr} < $3 ORDER BY {addr} LIMIT $4"
                    ),
                    &[&list.0, &low, &high, &n],
                )?,
                (SearchBy::Address, Some((key, _))) => {
                    let from = key.max(low.to_string());
                    db.all(
                        "search members",
                        &format!(
                            "SELECT {cols} FROM members WHERE list_id = $1 \
                             AND {addr} > $2 AND {addr} < $3 ORDER BY {addr} LIMIT $4"
                        ),
                        &[&list.0, &from, &high, &n],
                    )?
                }
                (SearchBy::Name, None) => db.all(
                    "search members",
                    &format!(
                        "SELECT {cols} FROM members WHERE list_id = $1 \
                         AND {name} >= $2 AND {name} < $3 ORDER BY {name}, id LIMIT $4"
                    ),
                    &[&list.0, &low, &high, &n],
                )?,
                (SearchBy::Name, Some((_, last_name))) => {
                    let from = last_name.unwrap_or_else(|| low.to_string());
                    let id = after.map_or(0, |a| a.0);
                    db.all(
                        "search members",
                        &format!(
                            "SELECT {cols} FROM members WHERE list_id = $1 \
                             AND ({name}, id) > ($2, $5) AND {name} < $3 \
                             ORDER BY {name}, id LIMIT $4"
                        ),
                        &[&list.0, &from, &high, &n, &id],
                    )?
                }
            };
            rows.iter()
                .map(|r| found(member_row(r)?, &col::<String>(r, 6)?, col(r, 7)?))
                .collect()
        })
    }
}
