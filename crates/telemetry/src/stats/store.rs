//! The SQLite side of the statistics store: schema, the batched upsert of one flush, and the
//! connections. Post ids are stored as the i64 with the same bits as the u64 id.

use super::aggregate::Pending;
use super::StatsError;
use herald_store::{open_versioned, Synchronous, Versioned};
use rusqlite::{params, Connection, OpenFlags};
use std::path::Path;

/// The statistics schema version (SQLite `user_version`). 1 is the schema below; Herald 0.1.0
/// wrote the same tables without a version (0), read as 1.
pub(crate) const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS minute_totals (
    minute INTEGER NOT NULL, outcome INTEGER NOT NULL,
    copies INTEGER NOT NULL, xdelay_ms INTEGER NOT NULL,
    PRIMARY KEY (minute, outcome)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS hour_domains (
    hour INTEGER NOT NULL, domain TEXT NOT NULL, outcome INTEGER NOT NULL,
    copies INTEGER NOT NULL,
    PRIMARY KEY (hour, outcome, domain)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS post_domains (
    post INTEGER NOT NULL, domain TEXT NOT NULL, outcome INTEGER NOT NULL, reason INTEGER NOT NULL,
    copies INTEGER NOT NULL, xdelay_ms INTEGER NOT NULL, xdelay_max_ms INTEGER NOT NULL,
    last_ms INTEGER NOT NULL,
    PRIMARY KEY (post, domain, outcome, reason)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS post_curve (
    post INTEGER NOT NULL, second INTEGER NOT NULL,
    delivered INTEGER NOT NULL, failed INTEGER NOT NULL,
    PRIMARY KEY (post, second)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS posts (
    post INTEGER PRIMARY KEY, list TEXT, accepted_at_ms INTEGER, size INTEGER,
    recipients INTEGER, completed_at_ms INTEGER);
CREATE INDEX IF NOT EXISTS posts_accepted ON posts (accepted_at_ms);
";

pub(crate) fn open_writer(path: &Path) -> Result<Connection, StatsError> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let spec = Versioned::schema("statistics database", SCHEMA_VERSION, SCHEMA)
        .remedy("move it away (it holds statistics only)")
        // Statistics want speed, not durability: see the module docs.
        .synchronous(Synchronous::Off)
        .busy_timeout(std::time::Duration::from_secs(10));
    Ok(open_versioned(path, &spec)?)
}

pub(crate) fn open_reader(path: &Path) -> Result<Connection, StatsError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(conn)
}

fn id(post: u64) -> i64 {
    post as i64
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Deletes the roll-ups older than `cutoff_ms` in one transaction: minutes and hours by their
/// own time, a post's rows (domains, curve, facts) once it was accepted before the cutoff.
/// Returns the rows deleted.
pub(crate) fn prune(conn: &Connection, cutoff_ms: u64) -> Result<usize, StatsError> {
    let minute = int(cutoff_ms / 60_000);
    let hour = int(cutoff_ms / 3_600_000);
    let cutoff = int(cutoff_ms);
    let old_posts = "SELECT post FROM posts WHERE accepted_at_ms < ?1";
    let tx = conn.unchecked_transaction()?;
    let mut rows = tx.execute("DELETE FROM minute_totals WHERE minute < ?1", [minute])?;
    rows += tx.execute("DELETE FROM hour_domains WHERE hour < ?1", [hour])?;
    rows += tx.execute(
        &format!("DELETE FROM post_domains WHERE post IN ({old_posts})"),
        [cutoff],
    )?;
    rows += tx.execute(
        &format!("DELETE FROM post_curve WHERE post IN ({old_posts})"),
        [cutoff],
    )?;
    rows += tx.execute("DELETE FROM posts WHERE accepted_at_ms < ?1", [cutoff])?;
    tx.commit()?;
    Ok(rows)
}

/// Writes one flush in one transaction.
pub(crate) fn write(conn: &mut Connection, p: &Pending) -> Result<(), StatsError> {
    let tx = conn.transaction()?;
    {
        let mut st = tx.prepare_cached(
            "INSERT INTO minute_totals VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO UPDATE SET
             copies = copies + excluded.copies, xdelay_ms = xdelay_ms + excluded.xdelay_ms",
        )?;
        for ((minute, outcome), s) in &p.minutes {
            st.execute(params![minute, outcome, int(s.copies), int(s.xdelay_ms)])?;
        }
        let mut hours = tx.prepare_cached(
            "INSERT INTO hour_domains VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO UPDATE SET
             copies = copies + excluded.copies",
        )?;
        let mut posts = tx.prepare_cached(
            "INSERT INTO post_domains VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO UPDATE SET
             copies = copies + excluded.copies, xdelay_ms = xdelay_ms + excluded.xdelay_ms,
             xdelay_max_ms = max(xdelay_max_ms, excluded.xdelay_max_ms),
             last_ms = max(last_ms, excluded.last_ms)",
        )?;
        for (domain, cells) in &p.domains {
            let domain: &str = domain;
            for ((hour, outcome), n) in &cells.hours {
                hours.execute(params![hour, domain, outcome, int(*n)])?;
            }
            for ((post, outcome, reason), s) in &cells.posts {
                posts.execute(params![
                    id(*post),
                    domain,
                    outcome,
                    int(*reason),
                    int(s.copies),
                    int(s.xdelay_ms),
                    int(s.xdelay_max_ms),
                    int(s.last_ms)
                ])?;
            }
        }
        let mut curve = tx.prepare_cached(
            "INSERT INTO post_curve VALUES (?1, ?2, ?3, ?4) ON CONFLICT DO UPDATE SET
             delivered = delivered + excluded.delivered, failed = failed + excluded.failed",
        )?;
        for ((post, second), [d, f]) in &p.curve {
            curve.execute(params![id(*post), second, int(*d), int(*f)])?;
        }
        let mut facts = tx.prepare_cached(
            "INSERT INTO posts VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO UPDATE SET
             list = coalesce(excluded.list, list),
             accepted_at_ms = coalesce(excluded.accepted_at_ms, accepted_at_ms),
             size = coalesce(excluded.size, size),
             recipients = coalesce(excluded.recipients, recipients),
             completed_at_ms = coalesce(excluded.completed_at_ms, completed_at_ms)",
        )?;
        for (post, f) in &p.posts {
            facts.execute(params![
                id(*post),
                f.list,
                f.accepted_at_ms.map(int),
                f.size.map(int),
                f.recipients.map(int),
                f.completed_at_ms.map(int)
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prune_deletes_what_is_older_than_the_cutoff_and_keeps_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = open_writer(&dir.path().join("stats.db")).expect("open");
        let day = 86_400_000u64;
        let (old, new) = (10 * day, 40 * day);
        for (post, at) in [(1i64, old), (2, new)] {
            let at = at as i64;
            conn.execute(
                "INSERT INTO minute_totals VALUES (?1, 0, 1, 1)",
                [at / 60_000],
            )
            .expect("minute");
            conn.execute(
                "INSERT INTO hour_domains VALUES (?1, 'd.test', 0, 1)",
                [at / 3_600_000],
            )
            .expect("hour");
            conn.execute(
                "INSERT INTO post_domains VALUES (?1, 'd.test', 0, 0, 1, 1, 1, ?2)",
                [post, at],
            )
            .expect("post domain");
            conn.execute("INSERT INTO post_curve VALUES (?1, 1, 1, 0)", [post])
                .expect("curve");
            conn.execute(
                "INSERT INTO posts VALUES (?1, 'l@x', ?2, 1, 1, ?2)",
                [post, at],
            )
            .expect("post");
        }
        assert_eq!(prune(&conn, 30 * day).expect("prune"), 5);
        for table in [
            "minute_totals",
            "hour_domains",
            "post_domains",
            "post_curve",
            "posts",
        ] {
            let n: i64 = conn
                .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
                .expect("count");
            assert_eq!(n, 1, "{table}");
        }
        assert_eq!(prune(&conn, 30 * day).expect("again"), 0);
    }
}
