//! Lists on PostgreSQL: the SQL of `crate::lists` (validation stays there, shared).

use super::{col, key, Db, PgStore};
use crate::error::DirectoryError;
use herald_types::{Address, List, ListId};
use postgres::{GenericClient, Row};

const SELECT_LIST: &str = "SELECT id, address, settings, created_at_ms FROM lists";

fn decode(row: &Row) -> Result<List, DirectoryError> {
    crate::lists::decode_list(
        col(row, 0)?,
        col::<String>(row, 1)?,
        col::<String>(row, 2)?,
        col(row, 3)?,
    )
}

impl PgStore {
    /// Inserts a list; `AlreadyExists` if the address is taken. Returns the new id.
    pub(crate) fn create_list(
        &self,
        address: &Address,
        json: &str,
        created_at_ms: i64,
    ) -> Result<i64, DirectoryError> {
        let addr = address.to_string();
        self.write(|db| {
            if list_id_by_address(db, address)?.is_some() {
                return Err(DirectoryError::AlreadyExists(address.clone()));
            }
            let row = db.one(
                "insert list",
                "INSERT INTO lists (address, settings, created_at_ms) VALUES ($1, $2, $3) \
                 RETURNING id",
                &[&addr, &json, &created_at_ms],
            )?;
            col(&row, 0)
        })
    }

    pub(crate) fn update_list(&self, id: ListId, json: &str) -> Result<List, DirectoryError> {
        self.write(|db| {
            let changed = db.exec(
                "update list",
                "UPDATE lists SET settings = $2 WHERE id = $1",
                &[&id.0, &json],
            )?;
            if changed == 0 {
                return Err(DirectoryError::no_such_list(id));
            }
            list_by_id_on(db, id)?.ok_or_else(|| DirectoryError::no_such_list(id))
        })
    }

    pub(crate) fn list_by_address(
        &self,
        address: &Address,
    ) -> Result<Option<List>, DirectoryError> {
        let k = key(&address.to_string());
        self.read(|db| {
            let sql = format!("{SELECT_LIST} WHERE address_key = $1");
            db.opt("read list by address", &sql, &[&k])?
                .map(|r| decode(&r))
                .transpose()
        })
    }

    pub(crate) fn list_by_id(&self, id: ListId) -> Result<Option<List>, DirectoryError> {
        self.read(|db| list_by_id_on(db, id))
    }

    pub(crate) fn has_list_in_domain(&self, domain: &str) -> Result<bool, DirectoryError> {
        // A suffix test on the folded address, as the SQLite side: nothing in the domain can act
        // as a wildcard.
        let suffix = format!("@{}", domain.to_ascii_lowercase());
        self.read(|db| {
            let row = db.one(
                "look up lists by domain",
                "SELECT EXISTS (SELECT 1 FROM lists WHERE right(address_key, char_length($1)) = $1)",
                &[&suffix],
            )?;
            col(&row, 0)
        })
    }

    pub(crate) fn lists(&self) -> Result<Vec<List>, DirectoryError> {
        self.read(|db| {
            let sql = format!("{SELECT_LIST} ORDER BY id");
            db.all("read lists", &sql, &[])?
                .iter()
                .map(decode)
                .collect()
        })
    }

    /// Deletes a list and its members; `(id, members deleted)` or `None` if there was none.
    pub(crate) fn delete_list(
        &self,
        address: &Address,
    ) -> Result<Option<(i64, u64)>, DirectoryError> {
        self.write(|db| {
            let Some(id) = list_id_by_address(db, address)? else {
                return Ok(None);
            };
            let members = db.exec(
                "delete list members",
                "DELETE FROM members WHERE list_id = $1",
                &[&id],
            )?;
            db.exec("delete list", "DELETE FROM lists WHERE id = $1", &[&id])?;
            Ok(Some((id, members)))
        })
    }
}

pub(crate) fn list_by_id_on<C: GenericClient>(
    db: &mut Db<'_, C>,
    id: ListId,
) -> Result<Option<List>, DirectoryError> {
    let sql = format!("{SELECT_LIST} WHERE id = $1");
    db.opt("read list by id", &sql, &[&id.0])?
        .map(|r| decode(&r))
        .transpose()
}

fn list_id_by_address<C: GenericClient>(
    db: &mut Db<'_, C>,
    address: &Address,
) -> Result<Option<i64>, DirectoryError> {
    let k = key(&address.to_string());
    db.opt(
        "find list",
        "SELECT id FROM lists WHERE address_key = $1",
        &[&k],
    )?
    .map(|r| col(&r, 0))
    .transpose()
}

/// `NoSuchList` unless the list exists (as `crate::lists::ensure_list`).
pub(crate) fn ensure_list<C: GenericClient>(
    db: &mut Db<'_, C>,
    id: ListId,
) -> Result<(), DirectoryError> {
    db.opt("check list", "SELECT 1 FROM lists WHERE id = $1", &[&id.0])?
        .map(|_| ())
        .ok_or_else(|| DirectoryError::no_such_list(id))
}
