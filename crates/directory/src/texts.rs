//! Languages and a list's own wording: a member's preferred language (the
//! `language` column of `members`; `NULL` means the list's `language` setting), and the texts
//! an owner wrote to replace catalogue messages for one list and language (`list_texts`).
//! Both are what the lists stage, the digest stage and the public pages write with
//! (`herald_i18n::Words`).
//!
//! Invariants: a stored language is a shipped one (`herald_i18n::is_shipped`); a stored text
//! passed `herald_i18n::overrides::check` for its message and language when it was written
//! (and is checked again when loaded, so a text an older rule let through is skipped, never
//! sent broken). A list's texts go with the list (deleted with it).
//!
//! SECURITY: owners' texts are bounded and checked by `herald_i18n` before they are stored;
//! every value is a bound parameter.

use crate::error::{storage, DirectoryError};
use crate::lists::ensure_list;
use crate::Directory;
use herald_i18n::{Override, Overrides};
use herald_types::{Address, ListId};
use rusqlite::{params, OptionalExtension};

/// One stored override text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListText {
    pub message_id: String,
    pub language: String,
    pub text: String,
    pub updated_at_ms: u64,
}

fn check_language(language: &str) -> Result<(), DirectoryError> {
    if herald_i18n::is_shipped(language) {
        Ok(())
    } else {
        Err(DirectoryError::InvalidInput {
            field: "language",
            reason: format!(
                "{:?} is not a language Herald ships (one of {})",
                language.chars().take(20).collect::<String>(),
                herald_i18n::CODES.join(", ")
            ),
        })
    }
}

impl Directory {
    /// A member's preferred language: `Some(None)` when they have none (the list's is used),
    /// `None` when the address is not on the list.
    pub fn member_language(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<Option<String>>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.member_language(list, address));
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        conn.prepare_cached("SELECT language FROM members WHERE list_id = ?1 AND address = ?2")
            .and_then(|mut st| {
                st.query_row(params![list.0, address.to_string()], |r| r.get(0))
                    .optional()
            })
            .map_err(storage("read member language"))
    }

    /// Sets (`Some`, a shipped language) or clears (`None`: the list's) a member's language.
    /// False if the address is not on the list.
    pub fn set_member_language(
        &self,
        list: ListId,
        address: &Address,
        language: Option<&str>,
    ) -> Result<bool, DirectoryError> {
        if let Some(l) = language {
            check_language(l)?;
        }
        let store = sqlite_or!(self, pg => pg.set_member_language(list, address, language));
        store.write(|tx| {
            ensure_list(tx, list)?;
            let n = tx
                .prepare_cached(
                    "UPDATE members SET language = ?3 WHERE list_id = ?1 AND address = ?2",
                )
                .and_then(|mut st| st.execute(params![list.0, address.to_string(), language]))
                .map_err(storage("set member language"))?;
            Ok(n > 0)
        })
    }

    /// The language to write to `address` about `list`: the member's own, else the list's
    /// `language` setting (also for an address that is not a member, e.g. a confirmation).
    pub fn language_for(
        &self,
        list: &herald_types::List,
        address: &Address,
    ) -> Result<String, DirectoryError> {
        Ok(self
            .member_language(list.id, address)?
            .flatten()
            .filter(|l| herald_i18n::is_shipped(l))
            .unwrap_or_else(|| list.settings.language.clone()))
    }

    /// The list's override texts, by message and language.
    pub fn list_texts(&self, list: ListId) -> Result<Vec<ListText>, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.list_texts(list));
        let conn = store.reader()?;
        ensure_list(&conn, list)?;
        conn.prepare_cached(
            "SELECT message_id, language, text, updated_at_ms FROM list_texts \
             WHERE list_id = ?1 ORDER BY message_id, language",
        )
        .and_then(|mut st| {
            st.query_map([list.0], |r| {
                Ok(ListText {
                    message_id: r.get(0)?,
                    language: r.get(1)?,
                    text: r.get(2)?,
                    updated_at_ms: r.get::<_, i64>(3)?.max(0) as u64,
                })
            })?
            .collect()
        })
        .map_err(storage("read list texts"))
    }

    /// The list's texts ready to write with (see `herald_i18n::Overrides::new`).
    pub fn overrides(&self, list: ListId) -> Result<Overrides, DirectoryError> {
        Ok(Overrides::new(self.list_texts(list)?.into_iter().map(
            |t| Override {
                id: t.message_id,
                language: t.language,
                text: t.text,
            },
        )))
    }

    /// Stores the list's wording of `message_id` in `language`, replacing an earlier one.
    /// Refused (`InvalidInput` naming `text`, `message` or `language`) unless it passes
    /// `herald_i18n::overrides::check`.
    pub fn set_list_text(
        &self,
        list: ListId,
        message_id: &str,
        language: &str,
        text: &str,
    ) -> Result<(), DirectoryError> {
        check_language(language)?;
        herald_i18n::overrides::check(message_id, language, text).map_err(|e| {
            let field = match e {
                herald_i18n::TextError::UnknownMessage(_) => "message",
                herald_i18n::TextError::UnknownLanguage(_) => "language",
                _ => "text",
            };
            DirectoryError::InvalidInput {
                field,
                reason: e.to_string(),
            }
        })?;
        let now = herald_types::unix_ms_now();
        let store = sqlite_or!(self, pg => pg.set_list_text(list, message_id, language, text, now));
        store.write(|tx| {
            // No count limit is needed: the key is a known message in a shipped language, so a
            // list holds at most (messages × languages) texts of at most 8 KiB each.
            ensure_list(tx, list)?;
            tx.prepare_cached(
                "INSERT INTO list_texts (list_id, message_id, language, text, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT (list_id, message_id, language) \
                 DO UPDATE SET text = excluded.text, updated_at_ms = excluded.updated_at_ms",
            )
            .and_then(|mut st| st.execute(params![list.0, message_id, language, text, now as i64]))
            .map_err(storage("store list text"))?;
            Ok(())
        })
    }

    /// Removes the list's wording of `message_id` in `language` (the shipped text is used
    /// again). False if there was none.
    pub fn remove_list_text(
        &self,
        list: ListId,
        message_id: &str,
        language: &str,
    ) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.remove_list_text(list, message_id, language));
        store.write(|tx| {
            ensure_list(tx, list)?;
            let n = tx
                .execute(
                    "DELETE FROM list_texts WHERE list_id = ?1 AND message_id = ?2 \
                     AND language = ?3",
                    params![list.0, message_id, language],
                )
                .map_err(storage("remove list text"))?;
            Ok(n > 0)
        })
    }
}
