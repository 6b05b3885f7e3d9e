//! Schema and migrations.
//!
//! The schema version lives in SQLite's `PRAGMA user_version` (a header field, written in the same
//! transaction as the migration, so a crash leaves either the old or the new schema, never half).
//! [`MIGRATIONS`]`[i]` takes the schema from version `i` to `i + 1`; [`SCHEMA_VERSION`] is their
//! count. Migrations are append-only: never edit one that has shipped.
//!
//! Invariants the schema enforces:
//! - `AUTOINCREMENT` on both tables: a deleted row's id is never reused. Member ids only grow, so
//!   "members of list L with id <= N" is a stable snapshot (the spool's recovery relies on it), and
//!   a post spooled for a deleted list can never be fanned out to a new list that took its id.
//! - Addresses are unique per list, compared with `COLLATE NOCASE`. Mail systems in practice
//!   treat local parts case-insensitively; two members differing only in case would receive
//!   every post twice. NOCASE folds ASCII only: domains are ASCII (IDNs are stored as
//!   A-labels, `herald_types::Address`), and a UTF-8 local part (stored in NFC, so NFC and NFD
//!   spellings are one row) compares its non-ASCII letters exactly — Unicode case folding of
//!   local parts is the receiving host's business (RFC 6531 §3.2).
//! - `members(list_id, id)` is the fan-out index: `members_page` is a range scan on it.
//!
//! Storage choices: list settings are one JSON column (`ListSettings` is `#[serde(default)]`, so a
//! new setting needs no migration, and nothing queries by a setting). Member custom fields are a
//! JSON object. A member is enabled iff `disabled_reason IS NULL`.

use crate::error::{storage, DirectoryError};
use rusqlite::{Connection, TransactionBehavior};

/// One SQL batch per version step. Append only.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: lists and members.
    "CREATE TABLE lists (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        address       TEXT NOT NULL COLLATE NOCASE UNIQUE,
        settings      TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL
    );
    CREATE TABLE members (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        list_id         INTEGER NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
        address         TEXT NOT NULL COLLATE NOCASE,
        display_name    TEXT,
        disabled_reason TEXT,
        fields          TEXT NOT NULL DEFAULT '{}',
        UNIQUE (list_id, address)
    );
    CREATE INDEX members_by_list ON members(list_id, id);",
    // 1 -> 2: bounce history and scores, member preferences. Bounce rows are keyed by
    // address, not member id, so list-reputation events (no member) can use the empty address.
    // (Since schema version 3, removing a member deletes their rows here too, in the same
    // transaction: a removed person's bounce history is theirs and goes with them.)
    "CREATE TABLE bounce_events (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        list_id    INTEGER NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
        address    TEXT NOT NULL COLLATE NOCASE,
        at_ms      INTEGER NOT NULL,
        kind       TEXT NOT NULL,
        status     TEXT,
        diagnostic TEXT NOT NULL DEFAULT '',
        source     TEXT NOT NULL,
        post_id    INTEGER,
        counted    INTEGER NOT NULL,
        score      REAL NOT NULL
    );
    CREATE INDEX bounce_events_by_address ON bounce_events(list_id, address, id);
    CREATE INDEX bounce_events_by_list ON bounce_events(list_id, id);
    CREATE TABLE bounce_scores (
        list_id         INTEGER NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
        address         TEXT NOT NULL COLLATE NOCASE,
        score           REAL NOT NULL,
        last_counted_ms INTEGER NOT NULL,
        PRIMARY KEY (list_id, address)
    );
    CREATE TABLE member_prefs (
        member_id         INTEGER PRIMARY KEY REFERENCES members(id) ON DELETE CASCADE,
        skip_if_addressed INTEGER NOT NULL DEFAULT 0
    );",
    // 2 -> 3: consent records (see `consent`). Members from before have no row.
    "CREATE TABLE member_consent (
        member_id INTEGER PRIMARY KEY REFERENCES members(id) ON DELETE CASCADE,
        at_ms     INTEGER NOT NULL,
        source    TEXT NOT NULL,
        client    TEXT
    );",
    // 3 -> 4: per-member delivery mode. Every existing member keeps getting
    // single posts. Checked against the four words so a bad write cannot make a member
    // silently receive nothing.
    "ALTER TABLE members ADD COLUMN delivery TEXT NOT NULL DEFAULT 'regular'
        CHECK (delivery IN ('regular', 'digest-mime', 'digest-plain', 'nomail'));",
    // 4 -> 5: bans and the suppression list (see `bans` and `suppression`).
    // `list_id` NULL is the global scope; the unique indexes fold NULL to 0 because SQLite
    // treats NULLs as distinct in a UNIQUE constraint. Ban rows are never updated, only
    // inserted and deleted, so (MAX(id), COUNT(*)) names the set (the compiled-ban cache).
    "CREATE TABLE bans (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        list_id       INTEGER REFERENCES lists(id) ON DELETE CASCADE,
        pattern       TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX bans_by_scope ON bans(COALESCE(list_id, 0), pattern);
    CREATE TABLE suppressions (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        list_id  INTEGER REFERENCES lists(id) ON DELETE CASCADE,
        address  TEXT NOT NULL COLLATE NOCASE,
        reason   TEXT NOT NULL,
        source   TEXT NOT NULL,
        at_ms    INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX suppressions_by_address ON suppressions(address, COALESCE(list_id, 0));",
    // 5 -> 6: erasure (GDPR art. 17, see `person`): an erased address is kept
    // only as an HMAC under a key of this database's own, so that no import or subscription
    // brings it back while the address itself is gone.
    "CREATE TABLE directory_keys (
        name  TEXT PRIMARY KEY,
        value BLOB NOT NULL
    );
    INSERT INTO directory_keys (name, value) VALUES ('erasure', randomblob(32));
    CREATE TABLE erased (
        hash  TEXT PRIMARY KEY,
        at_ms INTEGER NOT NULL
    );",
    // 6 -> 7: per-member moderation (Mailman's moderation flag, see `moderation`).
    // Every existing member keeps posting as before.
    "ALTER TABLE members ADD COLUMN moderated INTEGER NOT NULL DEFAULT 0
        CHECK (moderated IN (0, 1));",
    // 7 -> 8: cluster nodes (see `nodes` and the `herald-cluster` crate): one
    // row per node that ever joined, kept after it leaves so `herald status` can say so.
    // Self-contained (one new table, nothing else touched) so it can be renumbered at a merge.
    "CREATE TABLE nodes (
        node_id         TEXT PRIMARY KEY,
        address         TEXT NOT NULL,
        version         TEXT NOT NULL,
        schema_version  INTEGER NOT NULL,
        started_at_ms   INTEGER NOT NULL,
        heartbeat_at_ms INTEGER NOT NULL,
        state           TEXT NOT NULL CHECK (state IN ('running', 'left'))
    );",
    // 8 -> 9: the web administration's member search by display name (see
    // `search`): a prefix range on the name in NOCASE order, then id, so a page of a large list
    // is one index range scan. (Search by address uses the UNIQUE (list_id, address) index.)
    "CREATE INDEX members_by_name ON members(list_id, display_name COLLATE NOCASE, id);",
    // 9 -> 10: languages and a list's own wording (see `texts`): a member's
    // preferred language (NULL: the list's), and the owner's override of a catalogue message
    // per list and language.
    "ALTER TABLE members ADD COLUMN language TEXT;
    CREATE TABLE list_texts (
        list_id       INTEGER NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
        message_id    TEXT NOT NULL,
        language      TEXT NOT NULL,
        text          TEXT NOT NULL,
        updated_at_ms INTEGER NOT NULL,
        PRIMARY KEY (list_id, message_id, language)
    );",
    // 10 -> 11: shared fan-out (see `shards`) is PostgreSQL only: its tables
    // exist only in a store several nodes share (`pg/schema.rs`). The step is here so both
    // backends count the same versions.
    "-- shared fan-out tables: PostgreSQL only",
    // 11 -> 12: shared knowledge between nodes (see `knowledge`) is
    // PostgreSQL only too: provider budgets, who sends to them, hosts marked down.
    "-- shared knowledge tables: PostgreSQL only",
    // 12 -> 13: capability links are spent on use (see `links`): the keys of used links until
    // they would have expired anyway, and when each address last left each list (a
    // subscription link older than that subscribes nobody). Self-contained (two new tables,
    // nothing else touched) so it can be renumbered at a merge.
    "CREATE TABLE spent_links (
        key           TEXT PRIMARY KEY,
        kind          TEXT NOT NULL,
        spent_at_ms   INTEGER NOT NULL,
        expires_at_ms INTEGER NOT NULL
    );
    CREATE INDEX spent_links_by_expiry ON spent_links(expires_at_ms);
    CREATE TABLE departures (
        list_id INTEGER NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
        address TEXT NOT NULL COLLATE NOCASE,
        at_ms   INTEGER NOT NULL,
        PRIMARY KEY (list_id, address)
    );",
];

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

fn user_version(conn: &Connection) -> Result<i64, DirectoryError> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(storage("read schema version"))
}

/// Brings the database up to [`SCHEMA_VERSION`], or refuses one written by a newer Herald.
///
/// The version is read again inside an IMMEDIATE transaction, so two processes opening a fresh
/// database at once cannot both apply the same migration.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), DirectoryError> {
    check_not_newer(user_version(conn)?)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(storage("begin migration"))?;
    let found = user_version(&tx)?;
    check_not_newer(found)?;
    let start = usize::try_from(found).map_err(|_| DirectoryError::Corrupt {
        what: "schema version",
        reason: format!("negative user_version {found}"),
    })?;
    for (from, sql) in MIGRATIONS.iter().enumerate().skip(start) {
        tx.execute_batch(sql).map_err(storage("apply migration"))?;
        let to = from as i64 + 1;
        tx.pragma_update(None, "user_version", to)
            .map_err(storage("record schema version"))?;
        tracing::info!(from, to, "directory schema migrated");
    }
    tx.commit().map_err(storage("commit migration"))
}

fn check_not_newer(found: i64) -> Result<(), DirectoryError> {
    if found > SCHEMA_VERSION {
        return Err(DirectoryError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConsentSource, Directory};
    use herald_types::Address;

    /// A database written by a version-2 Herald (lists, members, bounce history) opens, is
    /// upgraded to the current version in place, keeps its data, and its old members show no
    /// consent (not recorded, never invented) while new ones get theirs.
    #[test]
    fn a_version_2_database_is_upgraded_with_its_members_kept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("old.db");
        {
            let conn = Connection::open(&path).expect("open");
            for sql in &MIGRATIONS[..2] {
                conn.execute_batch(sql).expect("old schema");
            }
            conn.pragma_update(None, "user_version", 2)
                .expect("version");
            conn.execute_batch(
                "INSERT INTO lists (address, settings, created_at_ms) VALUES ('dev@l.test', '{}', 1);
                 INSERT INTO members (list_id, address) VALUES (1, 'old@x.test');
                 INSERT INTO bounce_events (list_id, address, at_ms, kind, source, counted, score)
                     VALUES (1, 'old@x.test', 5, 'hard', 'dsn', 1, 1.0);",
            )
            .expect("old rows");
        }
        let d = Directory::open(&path).expect("upgrade");
        let list = d
            .list_by_address(&Address::parse("dev@l.test").expect("a"))
            .expect("read")
            .expect("list kept");
        let old = Address::parse("old@x.test").expect("a");
        assert!(
            d.member(list.id, &old).expect("read").is_some(),
            "member kept"
        );
        assert_eq!(
            d.bounce_events(Some(list.id), Some(&old), None, 10)
                .expect("h")
                .len(),
            1
        );
        assert_eq!(d.member_consent(list.id, &old).expect("consent"), None);
        let new = Address::parse("new@x.test").expect("a");
        let c = crate::Consent::now(ConsentSource::Web, Some("127.0.0.2"));
        d.add_member_consented(list.id, &crate::NewMember::new(new.clone()), &c)
            .expect("add");
        assert_eq!(d.member_consent(list.id, &new).expect("consent"), Some(c));
        drop(d);
        let conn = Connection::open(&path).expect("reopen");
        assert_eq!(user_version(&conn).expect("version"), SCHEMA_VERSION);
        assert_eq!(SCHEMA_VERSION, 13);
        // PostgreSQL mirrors every step with the same numbers (`pg/schema.rs`).
        assert_eq!(crate::pg::SCHEMA_SQL.len() as i64, SCHEMA_VERSION);
        // Migration 6: the erasure key exists, one of its own per database.
        let key: Vec<u8> = conn
            .query_row(
                "SELECT value FROM directory_keys WHERE name = 'erasure'",
                [],
                |r| r.get(0),
            )
            .expect("erasure key");
        assert_eq!(key.len(), 32);
        // Migration 4: the member from before keeps getting single posts.
        let d = Directory::open(&path).expect("reopen directory");
        assert_eq!(
            d.delivery(list.id, &old).expect("delivery"),
            Some(herald_types::DeliveryMode::Regular)
        );
        // The CHECK refuses a word that is not a mode, whoever writes it.
        let bad = conn.execute(
            "UPDATE members SET delivery = 'digest' WHERE address = 'old@x.test'",
            [],
        );
        assert!(bad.is_err(), "unknown delivery word stored");
    }
}
