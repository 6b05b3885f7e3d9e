//! A member's language and a list's own wording on PostgreSQL: the SQL of `crate::texts`.

use super::{col, key, ms, unms, PgStore};
use crate::error::DirectoryError;
use crate::texts::ListText;
use herald_types::{Address, ListId};

impl PgStore {
    pub(crate) fn member_language(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<Option<String>>, DirectoryError> {
        let k = key(&address.to_string());
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            db.opt(
                "read member language",
                "SELECT language FROM members WHERE list_id = $1 AND address_key = $2",
                &[&list.0, &k],
            )?
            .map(|r| col(&r, 0))
            .transpose()
        })
    }

    pub(crate) fn set_member_language(
        &self,
        list: ListId,
        address: &Address,
        language: Option<&str>,
    ) -> Result<bool, DirectoryError> {
        let k = key(&address.to_string());
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            Ok(db.exec(
                "set member language",
                "UPDATE members SET language = $3 WHERE list_id = $1 AND address_key = $2",
                &[&list.0, &k, &language],
            )? > 0)
        })
    }

    pub(crate) fn list_texts(&self, list: ListId) -> Result<Vec<ListText>, DirectoryError> {
        self.read(|db| {
            super::lists::ensure_list(db, list)?;
            db.all(
                "read list texts",
                "SELECT message_id, language, text, updated_at_ms FROM list_texts \
                 WHERE list_id = $1 ORDER BY message_id, language",
                &[&list.0],
            )?
            .iter()
            .map(|r| {
                Ok(ListText {
                    message_id: col(r, 0)?,
                    language: col(r, 1)?,
                    text: col(r, 2)?,
                    updated_at_ms: unms(col(r, 3)?),
                })
            })
            .collect()
        })
    }

    pub(crate) fn set_list_text(
        &self,
        list: ListId,
        message_id: &str,
        language: &str,
        text: &str,
        now: u64,
    ) -> Result<(), DirectoryError> {
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            db.exec(
                "store list text",
                "INSERT INTO list_texts (list_id, message_id, language, text, updated_at_ms) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (list_id, message_id, language) \
                 DO UPDATE SET text = excluded.text, updated_at_ms = excluded.updated_at_ms",
                &[&list.0, &message_id, &language, &text, &ms(now)],
            )?;
            Ok(())
        })
    }

    pub(crate) fn remove_list_text(
        &self,
        list: ListId,
        message_id: &str,
        language: &str,
    ) -> Result<bool, DirectoryError> {
        self.write(|db| {
            super::lists::ensure_list(db, list)?;
            Ok(db.exec(
                "remove list text",
                "DELETE FROM list_texts WHERE list_id = $1 AND message_id = $2 \
                 AND language = $3",
                &[&list.0, &message_id, &language],
            )? > 0)
        })
    }
}
