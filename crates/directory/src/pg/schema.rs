//! The PostgreSQL schema and its migrations, applied at start by one node at a time.
//!
//! The DDL is kept in this one place ([`SCHEMA_SQL`]) and mirrors the SQLite migrations step
//! for step with the same version numbers (`crate::schema`): migration `i` takes version `i`
//! to `i + 1`, and [`crate::SCHEMA_VERSION`] is their count on both backends. The version lives
//! in `directory_schema`, written in the same transaction as the step.
//!
//! Several nodes may start at once on a fresh database: [`migrate`] holds a session-level
//! `pg_advisory_lock` while it reads the version and applies what is missing, so the second
//! node waits, then finds the schema current and applies nothing.
//!
//! Dialect differences, each kept equivalent to SQLite's behaviour:
//! - `COLLATE NOCASE` (ASCII case folding) is a stored generated column `address_key =
//!   lower(address COLLATE "C")` with the uniqueness on it: under the "C" collation `lower()`
//!   folds ASCII letters only, whatever the database's locale, as NOCASE does;
//! - `AUTOINCREMENT` is an identity column: a sequence never hands out an id twice;
//! - SQLite's 0/1 integers for flags are BOOLEAN; times are BIGINT milliseconds;
//! - the erasure key is 32 bytes from `gen_random_uuid()` (PostgreSQL's strong random source;
//!   two UUIDs carry 244 random bits), as SQLite's `randomblob(32)`.

use super::pg;
use crate::error::DirectoryError;
use crate::SCHEMA_VERSION;
use postgres::Client;

/// Advisory lock key held while migrating ("HRLD" "MIG1").
const MIGRATION_LOCK: i64 = 0x4852_4c44_4d49_4731;

/// One SQL batch per version step, the same steps as SQLite's. Append only.
pub(crate) const SCHEMA_SQL: &[&str] = &[
    // 0 -> 1: lists and members.
    r#"CREATE TABLE lists (
        id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        address       TEXT NOT NULL,
        address_key   TEXT GENERATED ALWAYS AS (lower(address COLLATE "C")) STORED UNIQUE,
        settings      TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL
    );
    CREATE TABLE members (
        id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        list_id         BIGINT NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
        address         TEXT NOT NULL,
        address_key     TEXT GENERATED ALWAYS AS (lower(address COLLATE "C")) STORED,
        display_name    TEXT,
        disabled_reason TEXT,
        fields          TEXT NOT NULL DEFAULT '{}',
        UNIQUE (list_id, address_key)
    );
    CREATE INDEX members_by_list ON members(list_id, id);
    CREATE INDEX members_by_address ON members(address_key);"#,
    // 1 -> 2: bounce history and scores, member preferences.
    r#"CREATE TABLE bounce_events (
        id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        list_id     BIGINT NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
        address     TEXT NOT NULL,
        address_key TEXT GENERATED ALWAYS AS (lower(address COLLATE "C")) STORED,
        at_ms       BIGINT NOT NULL,
        kind        TEXT NOT NULL,
        status      TEXT,
        diagnostic  TEXT NOT NULL DEFAULT '',
        source      TEXT NOT NULL,
        post_id     BIGINT,
        counted     BOOLEAN NOT NULL,
        score       DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX bounce_events_by_address ON bounce_events(list_id, address_key, id);
    CREATE INDEX bounce_events_by_list ON bounce_events(list_id, id);
    CREATE TABLE bounce_scores (
        list_id         BIGINT NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
        address         TEXT NOT NULL,
        address_key     TEXT GENERATED ALWAYS AS (lower(address COLLATE "C")) STORED,
        score           DOUBLE PRECISION NOT NULL,
        last_counted_ms BIGINT NOT NULL,
        PRIMARY KEY (list_id, address_key)
    );
    CREATE TABLE member_prefs (
        member_id         BIGINT PRIMARY KEY REFERENCES members(id) ON DELETE CASCADE,
        skip_if_addressed BOOLEAN NOT NULL DEFAULT FALSE
    );"#,
    // 2 -> 3: consent records.
    r#"CREATE TABLE member_consent (
        member_id BIGINT PRIMARY KEY REFERENCES members(id) ON DELETE CASCADE,
        at_ms     BIGINT NOT NULL,
        source    TEXT NOT NULL,
        client    TEXT
    );"#,
    // 3 -> 4: per-member delivery mode.
    r#"ALTER TABLE members ADD COLUMN delivery TEXT NOT NULL DEFAULT 'regular'
        CHECK (delivery IN ('regular', 'digest-mime', 'digest-plain', 'nomail'));"#,
    // 4 -> 5: bans and the suppression list (NULL list_id: global; folded to 0 for uniqueness).
    r#"CREATE TABLE bans (
        id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        list_id       BIGINT REFERENCES lists(id) ON DELETE CASCADE,
        pattern       TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL
    );
    CREATE UNIQUE INDEX bans_by_scope ON bans(COALESCE(list_id, 0), pattern);
    CREATE TABLE suppressions (
        id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        list_id     BIGINT REFERENCES lists(id) ON DELETE CASCADE,
        address     TEXT NOT NULL,
        address_key TEXT GENERATED ALWAYS AS (lower(address COLLATE "C")) STORED,
        reason      TEXT NOT NULL,
        source      TEXT NOT NULL,
        at_ms       BIGINT NOT NULL
    );
    CREATE UNIQUE INDEX suppressions_by_address ON suppressions(address_key, COALESCE(list_id, 0));"#,
    // 5 -> 6: erasure: the database's own key and the hashes of erased addresses.
    r#"CREATE TABLE directory_keys (
        name  TEXT PRIMARY KEY,
        value BYTEA NOT NULL
    );
    INSERT INTO directory_keys (name, value)
        VALUES ('erasure', uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()));
    CREATE TABLE erased (
        hash  TEXT PRIMARY KEY,
        at_ms BIGINT NOT NULL
    );"#,
    // 6 -> 7: per-member moderation (see `moderation`).
    r#"ALTER TABLE members ADD COLUMN moderated BOOLEAN NOT NULL DEFAULT FALSE;"#,
    // 7 -> 8: cluster nodes (see `crate::nodes`).
    r#"CREATE TABLE nodes (
        node_id         TEXT PRIMARY KEY,
        address         TEXT NOT NULL,
        version         TEXT NOT NULL,
        schema_version  BIGINT NOT NULL,
        started_at_ms   BIGINT NOT NULL,
        heartbeat_at_ms BIGINT NOT NULL,
        state           TEXT NOT NULL CHECK (state IN ('running', 'left'))
    );"#,
    // 8 -> 9: member search by address or display name prefix (see
    // `crate::search`): both under the "C" collation, so a prefix is a byte range whatever the
    // database's locale, with ASCII folded by `lower()` as SQLite's NOCASE does.
    r#"CREATE INDEX members_by_address_prefix ON members(list_id, address_key COLLATE "C");
    CREATE INDEX members_by_name ON members(list_id, lower(display_name COLLATE "C"), id);"#,
    // 9 -> 10: a member's language and a list's own wording (see
    // `crate::texts`).
    r#"ALTER TABLE members ADD COLUMN language TEXT;
    CREATE TABLE list_texts (
        list_id       BIGINT NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
        message_id    TEXT NOT NULL,
        language      TEXT NOT NULL,
        text          TEXT NOT NULL,
        updated_at_ms BIGINT NOT NULL,
        PRIMARY KEY (list_id, message_id, language)
    );"#,
    // 10 -> 11: shared fan-out (see `crate::shards`): a post stored once with
    // its body, and its fan-out cut into shards of member-id ranges that nodes lease.
    // `origin_node`/`origin_post` make publishing idempotent (a node republishes what its spool
    // recovered). `done` is the shard's finished members as a roaring bitmap; `bad` shards are
    // set aside with the reason (never claimed again).
    r#"CREATE TABLE cluster_posts (
        post_id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        origin_node    TEXT NOT NULL,
        origin_post    BIGINT NOT NULL,
        list_id        BIGINT NOT NULL,
        meta           TEXT NOT NULL,
        body           BYTEA NOT NULL,
        body_sha256    BYTEA NOT NULL,
        accepted_at_ms BIGINT NOT NULL,
        UNIQUE (origin_node, origin_post)
    );
    CREATE TABLE shards (
        post_id         BIGINT NOT NULL REFERENCES cluster_posts(post_id) ON DELETE CASCADE,
        shard_no        INTEGER NOT NULL,
        lo_member_id    BIGINT NOT NULL,
        hi_member_id    BIGINT NOT NULL,
        state           TEXT NOT NULL DEFAULT 'open'
                        CHECK (state IN ('open', 'leased', 'done', 'bad')),
        owner_node      TEXT,
        lease_until_ms  BIGINT,
        leased_at_ms    BIGINT,
        done            BYTEA,
        copies_done     BIGINT NOT NULL DEFAULT 0,
        claims          INTEGER NOT NULL DEFAULT 0,
        reclaimed_count INTEGER NOT NULL DEFAULT 0,
        error           TEXT,
        PRIMARY KEY (post_id, shard_no)
    );
    CREATE INDEX shards_claimable ON shards(post_id, shard_no) WHERE state IN ('open', 'leased');
    CREATE INDEX shards_by_owner ON shards(owner_node) WHERE state = 'leased';"#,
    // 11 -> 12: shared knowledge (see `crate::knowledge`): a provider's
    // cluster-wide rate as last lowered (no CHECK on the rate: readers judge every value, a
    // row written by a broken node is ignored by name, not an error for every writer), the
    // nodes sending to each provider now with their pace (their share is the rate divided
    // among them; the sum of their paces is what the cluster sends now), and
    // hosts a node marked down (until when, on the store's clock) so the others skip them,
    // and the Message-IDs list posts carried at any node (a retry sent to another node is
    // acknowledged, not fanned out again).
    r#"CREATE TABLE provider_budgets (
        provider      TEXT PRIMARY KEY,
        rate_per_sec  DOUBLE PRECISION NOT NULL,
        lowered_at_ms BIGINT NOT NULL,
        lowered_by    TEXT NOT NULL
    );
    CREATE TABLE provider_senders (
        provider     TEXT NOT NULL,
        node_id      TEXT NOT NULL,
        seen_at_ms   BIGINT NOT NULL,
        rate_per_sec DOUBLE PRECISION,
        accepted_per_sec DOUBLE PRECISION NOT NULL DEFAULT 0,
        PRIMARY KEY (provider, node_id)
    );
    CREATE TABLE down_hosts (
        mx_host       TEXT NOT NULL,
        address       TEXT NOT NULL,
        down_until_ms BIGINT NOT NULL,
        reason        TEXT NOT NULL,
        marked_by     TEXT NOT NULL,
        PRIMARY KEY (mx_host, address)
    );
    CREATE INDEX down_hosts_by_time ON down_hosts(down_until_ms);
    CREATE TABLE cluster_dedup (
        list_id     BIGINT NOT NULL,
        message_id  TEXT NOT NULL,
        origin_node TEXT NOT NULL,
        origin_post BIGINT NOT NULL,
        at_ms       BIGINT NOT NULL,
        PRIMARY KEY (list_id, message_id)
    );
    CREATE INDEX cluster_dedup_by_time ON cluster_dedup(at_ms);"#,
    // 12 -> 13: capability links are spent on use (see `crate::links`): shared by every node,
    // so a link used at one node is spent at all of them.
    r#"CREATE TABLE spent_links (
        key           TEXT PRIMARY KEY,
        kind          TEXT NOT NULL,
        spent_at_ms   BIGINT NOT NULL,
        expires_at_ms BIGINT NOT NULL
    );
    CREATE INDEX spent_links_by_expiry ON spent_links(expires_at_ms);
    CREATE TABLE departures (
        list_id     BIGINT NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
        address     TEXT NOT NULL,
        address_key TEXT GENERATED ALWAYS AS (lower(address COLLATE "C")) STORED,
        at_ms       BIGINT NOT NULL,
        PRIMARY KEY (list_id, address_key)
    );"#,
];

/// Brings the database up to [`SCHEMA_VERSION`] under [`MIGRATION_LOCK`], or refuses one
/// written by a newer Herald, or (per `guard`) one that nodes of another version still use.
pub(crate) fn migrate(client: &mut Client, guard: &MigrationGuard) -> Result<(), DirectoryError> {
    migrate_up_to(client, guard, SCHEMA_VERSION)
}

/// [`migrate`], stopping at schema `target` (at most [`SCHEMA_VERSION`]).
fn migrate_up_to(
    client: &mut Client,
    guard: &MigrationGuard,
    target: i64,
) -> Result<(), DirectoryError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .map_err(pg("take the migration lock"))?;
    let out = migrate_locked(client, guard, target);
    // Released explicitly: the connection goes back to the pool and lives on. (If this fails
    // the connection is broken, and the server drops the session lock with it.)
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .map_err(pg("release the migration lock"));
    out.and(unlock.map(|_| ()))
}

fn migrate_locked(
    client: &mut Client,
    guard: &MigrationGuard,
    target: i64,
) -> Result<(), DirectoryError> {
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS directory_schema (version BIGINT NOT NULL)")
        .map_err(pg("create the schema version table"))?;
    let found: Option<i64> = client
        .query_opt("SELECT version FROM directory_schema", &[])
        .map_err(pg("read schema version"))?
        .map(|r| super::col(&r, 0))
        .transpose()?;
    let found = found.unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(DirectoryError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let start = usize::try_from(found).map_err(|_| DirectoryError::Corrupt {
        what: "schema version",
        reason: format!("negative version {found}"),
    })?;
    if found > 0 && found < target {
        refuse_under_live_nodes(client, guard, found, target)?;
    }
    let steps = usize::try_from(target).unwrap_or(0);
    for (from, sql) in SCHEMA_SQL.iter().enumerate().take(steps).skip(start) {
        let to = from as i64 + 1;
        let mut tx = client.transaction().map_err(pg("begin migration"))?;
        tx.batch_execute(sql).map_err(pg("apply migration"))?;
        tx.execute("DELETE FROM directory_schema", &[])
            .map_err(pg("record schema version"))?;
        tx.execute("INSERT INTO directory_schema (version) VALUES ($1)", &[&to])
            .map_err(pg("record schema version"))?;
        tx.commit().map_err(pg("commit migration"))?;
        tracing::info!(from, to, "directory schema migrated (postgresql)");
    }
    // Beside the versioned steps, not one of them: SQLite has no counterpart (one node, its
    // own secret file), and an older node never reads it, so it needs no version of its own.
    // Created under the migration lock; its one row is the first node's (`cluster_secret`).
    client
        .batch_execute(CLUSTER_SECRET_SQL)
        .map_err(pg("create the cluster secret table"))?;
    Ok(())
}

/// The cluster's one link secret (the HMAC key of every token a node mints), so a link from
/// one node works on every other: one row, written once by the first node to start.
const CLUSTER_SECRET_SQL: &str = "CREATE TABLE IF NOT EXISTS cluster_secret (
    one           BOOLEAN PRIMARY KEY CHECK (one),
    secret        BYTEA NOT NULL,
    created_at_ms BIGINT NOT NULL
)";

/// What a node must not do when it opens a shared store: migrate the schema under
/// nodes that are alive at another schema version. Those nodes run an older Herald (a newer
/// one would have migrated the store already); the new schema could break the SQL they run,
/// so the migration waits until they have left (a graceful stop) or died (no heartbeat for
/// `live_window`).
#[derive(Debug, Clone)]
pub struct MigrationGuard {
    /// This node's id: its own row (a previous life, killed moments ago) is not a reason to
    /// wait. None: every row counts (`herald import`, tools).
    pub node_id: Option<String>,
    /// A running node's row whose heartbeat is younger than this is alive (`[cluster]
    /// heartbeat_interval_secs × dead_after_intervals`, the same rule as `herald status`).
    pub live_window: std::time::Duration,
}

impl Default for MigrationGuard {
    /// The default cluster settings' window: 5 s heartbeats, dead after 3 missed.
    fn default() -> Self {
        MigrationGuard {
            node_id: None,
            live_window: std::time::Duration::from_secs(15),
        }
    }
}

/// Names listed in a refusal at most (the node table holds up to `MAX_NODES`).
const MAX_NAMED: i64 = 20;

/// Refuses to migrate from `found` to `target` while nodes at another version than `target`
/// are alive (store clock), naming them. The node table exists from migration 8 on; before,
/// no node can be running.
fn refuse_under_live_nodes(
    client: &mut Client,
    guard: &MigrationGuard,
    found: i64,
    target: i64,
) -> Result<(), DirectoryError> {
    let has_nodes: bool = super::col(
        &client
            .query_one("SELECT to_regclass('nodes') IS NOT NULL", &[])
            .map_err(pg("look for the node table"))?,
        0,
    )?;
    if !has_nodes {
        return Ok(());
    }
    let window = i64::try_from(guard.live_window.as_millis()).unwrap_or(i64::MAX);
    let me = guard.node_id.clone().unwrap_or_default();
    let now = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";
    let rows = client
        .query(
            &format!(
                "SELECT node_id, version, schema_version, address, {now} - heartbeat_at_ms
                 FROM nodes
                 WHERE state = 'running' AND schema_version <> $1 AND node_id <> $2
                   AND heartbeat_at_ms >= {now} - $3
                 ORDER BY node_id LIMIT $4"
            ),
            &[&target, &me, &window, &MAX_NAMED],
        )
        .map_err(pg("read the live nodes"))?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut nodes = Vec::with_capacity(rows.len());
    for r in &rows {
        let (id, version, schema, address, age): (String, String, i64, String, i64) = (
            super::col(r, 0)?,
            super::col(r, 1)?,
            super::col(r, 2)?,
            super::col(r, 3)?,
            super::col(r, 4)?,
        );
        nodes.push(format!(
            "{id} (Herald {version}, schema {schema}, at {address}, heartbeat {:.1} s ago)",
            age.max(0) as f64 / 1000.0
        ));
    }
    Err(DirectoryError::LiveNodesAtOtherSchema {
        store: found,
        binary: target,
        nodes: nodes.join(", "),
        window_secs: guard.live_window.as_secs_f64(),
    })
}

/// Test support: creates the directory schema in the PostgreSQL database at `url` only up to
/// version `target` (below [`SCHEMA_VERSION`]), as an older Herald would have left it — so a
/// test can start this binary against a store of the previous version. Not for production.
#[doc(hidden)]
pub fn migrate_postgres_up_to(url: &str, target: i64) -> Result<(), DirectoryError> {
    let mut client =
        super::connect(&super::parse_url(url)?).map_err(|source| DirectoryError::PgOpen {
            what: "connect",
            source,
        })?;
    migrate_up_to(
        &mut client,
        &MigrationGuard::default(),
        target.min(SCHEMA_VERSION),
    )
}
