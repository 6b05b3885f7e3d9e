//! Consent records (schema version 3; GDPR article 7: the controller must be able to
//! show that the person consented): when a member's subscription was consented to, through
//! what (a web confirmation, a mail command, an import, an administrator) and by which client
//! (the confirming browser's IP address, the mail command's sender).
//!
//! One row per member (`member_consent`, keyed by member id, deleted with the member by the
//! foreign key's cascade). A confirmation replaces the row (the newest explicit consent is the
//! one that counts); an import only fills a missing one, so re-importing a file never
//! overwrites a member's own confirmation with "import". Members added before version 3 have
//! no row: shown as not recorded, never invented.
//!
//! Limits: `client` is at most [`MAX_CLIENT_CHARS`] characters and free of control characters.
//!
//! SECURITY: the client text comes from the network (a peer address, a mail sender); it is
//! bounded and stripped of controls here, and escaped by whoever renders it.

use crate::error::{storage, DirectoryError};
use crate::lists::ensure_list;
use crate::model::is_forbidden_char;
use crate::Directory;
use herald_types::{Address, ListId};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

/// Longest client text stored, in characters.
pub const MAX_CLIENT_CHARS: usize = 256;

/// Through what a subscription was consented to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsentSource {
    /// The double opt-in link, confirmed in a browser (`POST /confirm/<token>`).
    Web,
    /// A mail command (`confirm <token>` to the list's -request address).
    Mail,
    /// A CSV import by an administrator.
    Import,
    /// Added by an administrator through the API or the CLI.
    Admin,
}

impl ConsentSource {
    /// The stored (and wire) name.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsentSource::Web => "web",
            ConsentSource::Mail => "mail",
            ConsentSource::Import => "import",
            ConsentSource::Admin => "admin",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<ConsentSource> {
        Some(match s {
            "web" => ConsentSource::Web,
            "mail" => ConsentSource::Mail,
            "import" => ConsentSource::Import,
            "admin" => ConsentSource::Admin,
            _ => return None,
        })
    }
}

/// A member's recorded consent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consent {
    /// When it was given (Unix milliseconds).
    pub at_ms: u64,
    pub source: ConsentSource,
    /// Who gave it: the browser's IP address, the mail command's sender; `None` for an import
    /// or an administrator.
    pub client: Option<String>,
}

impl Consent {
    /// Consent given now. The client text is bounded and cleaned (see the module doc).
    pub fn now(source: ConsentSource, client: Option<&str>) -> Consent {
        Consent {
            at_ms: herald_types::unix_ms_now(),
            source,
            client: client.map(|c| {
                c.chars()
                    .filter(|&ch| !is_forbidden_char(ch))
                    .take(MAX_CLIENT_CHARS)
                    .collect()
            }),
        }
    }
}

/// Writes `c` for `member_id` in the caller's transaction; `replace` false keeps an existing
/// row (an import never overwrites a confirmation).
pub(crate) fn record(
    conn: &Connection,
    member_id: i64,
    c: &Consent,
    replace: bool,
) -> Result<(), DirectoryError> {
    let sql = if replace {
        "INSERT OR REPLACE INTO member_consent (member_id, at_ms, source, client) \
         VALUES (?1, ?2, ?3, ?4)"
    } else {
        "INSERT OR IGNORE INTO member_consent (member_id, at_ms, source, client) \
         VALUES (?1, ?2, ?3, ?4)"
    };
    // Milliseconds since 1970 fit i64 for 292 million years.
    let at = i64::try_from(c.at_ms).unwrap_or(i64::MAX);
    conn.prepare_cached(sql)
        .and_then(|mut st| st.execute(params![member_id, at, c.source.as_str(), c.client]))
        .map_err(storage("record consent"))?;
    Ok(())
}

impl Directory {
    /// The consent recorded for a member; `None` when the address is not on the list or none
    /// was recorded (a member added before schema version 3, or through `add_members`).
    pub fn member_consent(
        &self,
        list: ListId,
        address: &Address,
    ) -> Result<Option<Consent>, DirectoryError> {
        let row: Option<(i64, String, Option<String>)> = match self.backend() {
            crate::Backend::Postgres(pg) => pg.member_consent(list, address)?,
            crate::Backend::Sqlite(store) => {
                let conn = store.reader()?;
                ensure_list(&conn, list)?;
                conn.prepare_cached(
                    "SELECT c.at_ms, c.source, c.client FROM member_consent c \
                 JOIN members m ON m.id = c.member_id WHERE m.list_id = ?1 AND m.address = ?2",
                )
                .and_then(|mut st| {
                    st.query_row(params![list.0, address.to_string()], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .optional()
                })
                .map_err(storage("read consent"))?
            }
        };
        row.map(|(at, source, client)| {
            let source = ConsentSource::parse(&source).ok_or_else(|| DirectoryError::Corrupt {
                what: "member_consent.source",
                reason: format!("unknown source {source:?}"),
            })?;
            Ok(Consent {
                at_ms: u64::try_from(at).unwrap_or(0),
                source,
                client,
            })
        })
        .transpose()
    }

    /// Records (replacing) the consent of a member already on the list, e.g. a confirmed
    /// re-subscription. False if the address is not on the list.
    pub fn record_consent(
        &self,
        list: ListId,
        address: &Address,
        consent: &Consent,
    ) -> Result<bool, DirectoryError> {
        let store = sqlite_or!(self, pg => pg.record_consent(list, address, consent));
        let addr = address.to_string();
        store.write(|tx| {
            ensure_list(tx, list)?;
            let id: Option<i64> = tx
                .prepare_cached("SELECT id FROM members WHERE list_id = ?1 AND address = ?2")
                .and_then(|mut st| st.query_row(params![list.0, addr], |r| r.get(0)).optional())
                .map_err(storage("find member"))?;
            match id {
                Some(id) => record(tx, id, consent, true).map(|()| true),
                None => Ok(false),
            }
        })
    }
}
