//! Lists: create, read, update, delete, and the posting-policy check.
//!
//! Invariants: list addresses are unique case-insensitively; list ids are never reused (see
//! `schema`); deleting a list deletes its members in the same transaction.
//!
//! SECURITY: `display_name` and `subject_prefix` end up in headers of every copy, so they are
//! refused if they contain control characters (CR/LF header injection); the footer ends up in
//! the body and may contain line breaks, but not a bare CR or other control characters.

use crate::error::{storage, DirectoryError};
use crate::model::is_forbidden_char;
use crate::Directory;
use herald_types::{unix_ms_now, Address, List, ListId, ListSettings};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// Longest list display name, in characters.
pub const MAX_LIST_NAME_CHARS: usize = 256;
/// Longest subject prefix, in characters.
pub const MAX_SUBJECT_PREFIX_CHARS: usize = 128;
/// Longest footer, in bytes.
pub const MAX_FOOTER_BYTES: usize = 16 * 1024;
/// Most moderators per list.
pub const MAX_MODERATORS: usize = 1000;

const SELECT_LIST: &str = "SELECT id, address, settings, created_at_ms FROM lists";

/// A list row before its text columns are decoded (decoding errors are ours, not SQLite's).
struct ListRow {
    id: i64,
    address: String,
    settings: String,
    created_at_ms: i64,
}

impl ListRow {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<ListRow> {
        Ok(ListRow {
            id: row.get(0)?,
            address: row.get(1)?,
            settings: row.get(2)?,
            created_at_ms: row.get(3)?,
        })
    }

    fn decode(self) -> Result<List, DirectoryError> {
        decode_list(self.id, self.address, self.settings, self.created_at_ms)
    }
}

/// A list from its stored columns (both backends decode with this).
pub(crate) fn decode_list(
    id: i64,
    address: String,
    settings: String,
    created_at_ms: i64,
) -> Result<List, DirectoryError> {
    let parsed = Address::parse(&address).map_err(|e| DirectoryError::Corrupt {
        what: "lists.address",
        reason: e.to_string(),
    })?;
    let settings = serde_json::from_str(&settings).map_err(|e| DirectoryError::Corrupt {
        what: "lists.settings",
        reason: e.to_string(),
    })?;
    Ok(List {
        id: ListId(id),
        address: parsed,
        settings,
        created_at_ms: u64::try_from(created_at_ms).unwrap_or(0),
    })
}

impl Directory {
    /// Creates a list. `AlreadyExists` if the address (any case) is taken; `InvalidInput` for
    /// a postmaster address, which belongs to the server (RFC 5321 §4.5.1) and would never
    /// reach the list.
    pub fn create_list(
        &self,
        address: &Address,
        settings: &ListSettings,
    ) -> Result<List, DirectoryError> {
        if address.is_postmaster() {
            return Err(DirectoryError::InvalidInput {
                field: "address",
                reason: format!("{address} is the server's postmaster address, not a list's"),
            });
        }
        validate_settings(settings)?;
        let json = settings_json(settings)?;
        let created_at_ms = unix_ms_now();
        let store = sqlite_or!(self, pg => {
            let id = pg.create_list(address, &json, created_at_ms as i64)?;
            Ok(List {
                id: ListId(id),
                address: address.clone(),
                settings: settings.clone(),
                created_at_ms,
            })
        });
        let id = store.write(|tx| {
            if list_id_by_address(tx, address)?.is_some() {
                return Err(DirectoryError::AlreadyExists(address.clone()));
            }
            tx.prepare_cached(
                "INSERT INTO lists (address, settings, created_at_ms) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut st| st.execute(params![address.to_string(), json, created_at_ms as i64]))
            .map_err(storage("insert list"))?;
            Ok(tx.last_insert_rowid())
        })?;
        tracing::info!(list = id, address = %address, "list created");
        Ok(List {
            id: ListId(id),
            address: address.clone(),
            settings: settings.clone(),
            created_at_ms,
        })
    }

    /// Replaces a list's settings. `NoSuchList` if it does not exist.
    pub fn update_list(&self, id: ListId, settings: &ListSettings) -> Result<List, DirectoryError> {
        validate_settings(settings)?;
        let json = settings_json(settings)?;
        let store = sqlite_or!(self, pg => pg.update_list(id, &json));
        store.write(|tx| {
            let changed = tx
                .prepare_cached("UPDATE lists SET settings = ?2 WHERE id = ?1")
                .and_then(|mut st| st.execute(params![id.0, json]))
                .map_err(storage("update list"))?;
            if changed == 0 {
                return Err(DirectoryError::no_such_list(id));
            }
            list_by_id_on(tx, id)?.ok_or_else(|| DirectoryError::no_such_list(id))
        })
    }

    /// The list with this posting address (compared case-insensitively).
    pub fn list_by_address(&self, address: &Address) -> Result<Option<List>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.list_by_address(address));
        let conn = store.reader()?;
        let sql = format!("{SELECT_LIST} WHERE address = ?1");
        let row = conn
            .prepare_cached(&sql)
            .and_then(|mut st| {
                st.query_row([address.to_string()], ListRow::from_row)
                    .optional()
            })
            .map_err(storage("read list by address"))?;
        row.map(ListRow::decode).transpose()
    }

    /// The list with this id.
    pub fn list_by_id(&self, id: ListId) -> Result<Option<List>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.list_by_id(id));
        list_by_id_on(&*store.reader()?, id)
    }

    /// True when some list's address is in `domain` (lower-case, as [`Address::domain`] gives
    /// it): Herald accepts `postmaster@<domain>` for every domain it has lists in (RFC 5321
    /// §4.5.1). One suffix comparison per list row; lists are few.
    pub fn has_list_in_domain(&self, domain: &str) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.has_list_in_domain(domain));
        let conn = store.reader()?;
        // A suffix test, not LIKE: nothing in the domain can act as a wildcard. The domain part
        // of a stored address never contains '@', so "ends with @<domain>" is "is in <domain>".
        let suffix = format!("@{}", domain.to_ascii_lowercase());
        conn.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM lists WHERE substr(address, -length(?1)) = ?1)",
        )
        .and_then(|mut st| st.query_row([&suffix], |r| r.get::<_, bool>(0)))
        .map_err(storage("look up lists by domain"))
    }

    /// All lists, oldest first.
    pub fn lists(&self) -> Result<Vec<List>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.lists());
        let conn = store.reader()?;
        let sql = format!("{SELECT_LIST} ORDER BY id");
        let rows = conn
            .prepare_cached(&sql)
            .and_then(|mut st| {
                st.query_map([], ListRow::from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(storage("read lists"))?;
        rows.into_iter().map(ListRow::decode).collect()
    }

    /// Deletes a list and all its members in one transaction. False if there was no such list.
    pub fn delete_list(&self, address: &Address) -> Result<bool, DirectoryError> {
        let deleted = match self.backend() {
            crate::Backend::Postgres(pg) => pg.delete_list(address)?,
            crate::Backend::Sqlite(store) => store.write(|tx| {
                let Some(id) = list_id_by_address(tx, address)? else {
                    return Ok(None);
                };
                // Explicit rather than relying on ON DELETE CASCADE, which needs `foreign_keys` on in
                // whichever connection deletes (a hand-run sqlite3 shell has it off by default).
                let members = tx
                    .execute("DELETE FROM members WHERE list_id = ?1", [id])
                    .map_err(storage("delete list members"))?;
                tx.execute("DELETE FROM list_texts WHERE list_id = ?1", [id])
                    .map_err(storage("delete list texts"))?;
                tx.execute("DELETE FROM lists WHERE id = ?1", [id])
                    .map_err(storage("delete list"))?;
                Ok(Some((id, members as u64)))
            })?,
        };
        if let Some((id, members)) = deleted {
            tracing::info!(list = id, address = %address, members, "list deleted");
        }
        Ok(deleted.is_some())
    }
}

pub(crate) fn list_by_id_on(conn: &Connection, id: ListId) -> Result<Option<List>, DirectoryError> {
    let sql = format!("{SELECT_LIST} WHERE id = ?1");
    let row = conn
        .prepare_cached(&sql)
        .and_then(|mut st| st.query_row([id.0], ListRow::from_row).optional())
        .map_err(storage("read list by id"))?;
    row.map(ListRow::decode).transpose()
}

fn list_id_by_address(conn: &Connection, address: &Address) -> Result<Option<i64>, DirectoryError> {
    conn.prepare_cached("SELECT id FROM lists WHERE address = ?1")
        .and_then(|mut st| st.query_row([address.to_string()], |r| r.get(0)).optional())
        .map_err(storage("find list"))
}

/// `NoSuchList` unless the list exists. Cheap (a primary-key lookup); run before list-scoped
/// operations so callers can tell "no such list" from "no such member".
pub(crate) fn ensure_list(conn: &Connection, id: ListId) -> Result<(), DirectoryError> {
    let found: Option<i64> = conn
        .prepare_cached("SELECT 1 FROM lists WHERE id = ?1")
        .and_then(|mut st| st.query_row([id.0], |r| r.get(0)).optional())
        .map_err(storage("check list"))?;
    found
        .map(|_| ())
        .ok_or_else(|| DirectoryError::no_such_list(id))
}

fn settings_json(settings: &ListSettings) -> Result<String, DirectoryError> {
    serde_json::to_string(settings)
        .map_err(|e| DirectoryError::invalid("settings", format!("cannot serialize: {e}")))
}

/// Refuses settings that would inject into headers or break limits.
pub(crate) fn validate_settings(s: &ListSettings) -> Result<(), DirectoryError> {
    check_header_text(
        "settings.display_name",
        &s.display_name,
        MAX_LIST_NAME_CHARS,
    )?;
    if let Some(prefix) = &s.subject_prefix {
        check_header_text("settings.subject_prefix", prefix, MAX_SUBJECT_PREFIX_CHARS)?;
    }
    if let Some(footer) = &s.footer {
        check_body_text("settings.footer", footer)?;
    }
    if let Some(welcome) = &s.welcome_message {
        check_body_text("settings.welcome_message", welcome)?;
    }
    if !herald_i18n::is_shipped(&s.language) {
        let shipped: Vec<&str> = herald_i18n::LANGUAGES.iter().map(|(c, _)| *c).collect();
        return Err(DirectoryError::invalid(
            "settings.language",
            format!(
                "{:?} is not a language Herald ships ({})",
                s.language,
                shipped.join(", ")
            ),
        ));
    }
    if let Some(pool) = &s.egress_pool {
        // A pool name as `[[delivery.egress_pool]]` allows (it is also a queue key's part).
        if pool.is_empty()
            || pool.len() > 64
            || !pool
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        {
            return Err(DirectoryError::invalid(
                "settings.egress_pool",
                "must be 1 to 64 ASCII letters, digits, '.', '-' or '_'".to_string(),
            ));
        }
    }
    if s.moderators.len() > MAX_MODERATORS {
        return Err(DirectoryError::invalid(
            "settings.moderators",
            format!("more than {MAX_MODERATORS} moderators"),
        ));
    }
    if s.allowed_content_types.len() > MAX_MODERATORS
        || s.allowed_content_types
            .iter()
            .any(|t| t.is_empty() || t.len() > 127 || !t.bytes().all(|b| b.is_ascii_graphic()))
    {
        return Err(DirectoryError::invalid(
            "settings.allowed_content_types",
            format!("at most {MAX_MODERATORS} types like \"text/plain\" or \"image/*\""),
        ));
    }
    Ok(())
}

fn check_header_text(
    field: &'static str,
    text: &str,
    max_chars: usize,
) -> Result<(), DirectoryError> {
    if text.chars().count() > max_chars {
        return Err(DirectoryError::invalid(
            field,
            format!("longer than {max_chars} characters"),
        ));
    }
    if let Some(c) = text.chars().find(|&c| is_forbidden_char(c)) {
        return Err(DirectoryError::invalid(
            field,
            format!("contains control character {c:?}"),
        ));
    }
    Ok(())
}

/// A text that ends up in the body of mail (the footer of every copy, the welcome): bounded,
/// and no control character but line breaks and tabs.
fn check_body_text(field: &'static str, footer: &str) -> Result<(), DirectoryError> {
    if footer.len() > MAX_FOOTER_BYTES {
        return Err(DirectoryError::invalid(
            field,
            format!("longer than {MAX_FOOTER_BYTES} bytes"),
        ));
    }
    let mut chars = footer.chars().peekable();
    while let Some(c) = chars.next() {
        let ok = match c {
            '\n' | '\t' => true,
            // CRLF is a line break; a bare CR is how SMTP smuggling starts.
            '\r' => chars.peek() == Some(&'\n'),
            c => !is_forbidden_char(c),
        };
        if !ok {
            return Err(DirectoryError::invalid(
                field,
                format!("contains control character {c:?}"),
            ));
        }
    }
    Ok(())
}
