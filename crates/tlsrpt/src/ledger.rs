//! The TLS reporting ledger, `tlsrpt.db` (SQLite, WAL): session counts per UTC day, recipient
//! domain, policy, MX host and result, and per (day, domain) what became of its report — so a
//! restart neither loses a day's counts (they are flushed every few seconds) nor sends a report
//! twice.
//!
//! SECURITY: holds Herald's own observations (domain and MX names from validated DNS answers,
//! addresses, counts); nothing is executed or interpreted.

use herald_store::{open_versioned, Versioned};
use herald_types::{TlsPolicyKind, TlsResultType};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;

/// The ledger's schema version (SQLite `user_version`). A newer file is refused, never
/// rewritten.
pub const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    day            TEXT NOT NULL,
    domain         TEXT NOT NULL,
    policy         TEXT NOT NULL,
    policy_strings TEXT NOT NULL,
    mx_host        TEXT NOT NULL,
    receiving_ip   TEXT NOT NULL,
    result         TEXT NOT NULL,
    info           TEXT NOT NULL,
    count          INTEGER NOT NULL,
    PRIMARY KEY (day, domain, policy, policy_strings, mx_host, receiving_ip, result)
);
CREATE TABLE IF NOT EXISTS reports (
    day       TEXT NOT NULL,
    domain    TEXT NOT NULL,
    report_id TEXT NOT NULL,
    state     TEXT NOT NULL CHECK (state IN ('sent', 'no-record', 'failed')),
    detail    TEXT NOT NULL,
    at_ms     INTEGER NOT NULL,
    PRIMARY KEY (day, domain)
);
";

/// Why the ledger failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("TLS report ledger: {0}")]
    Sql(#[from] rusqlite::Error),
    /// Opening failed, or the file is from a newer Herald (the message says what to do).
    #[error(transparent)]
    Open(#[from] herald_store::OpenError),
}

/// One aggregated line: sessions of one kind to one MX address on one day.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Row {
    pub policy: TlsPolicyKind,
    pub policy_strings: Vec<String>,
    pub mx_host: String,
    pub receiving_ip: String,
    /// `None`: TLS as required.
    pub result: Option<TlsResultType>,
    /// The latest reason given for a failure (empty for successes).
    pub info: String,
    pub count: u64,
}

/// What became of a (day, domain)'s report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub report_id: String,
    /// `sent`, `no-record` (the domain asks for no reports) or `failed` (every destination
    /// refused it; not retried, so that a broken destination does not get a report a day late
    /// and again).
    pub state: String,
    pub detail: String,
}

/// The ledger: one connection, used from blocking tasks one at a time.
pub struct Ledger {
    conn: Connection,
}

impl Ledger {
    pub fn open(path: &Path) -> Result<Ledger, LedgerError> {
        let spec = Versioned::schema("TLS report ledger", SCHEMA_VERSION, SCHEMA);
        let conn = open_versioned(path, &spec)?;
        Ok(Ledger { conn })
    }

    /// Adds counts: `(day, domain, row)` with `row.count` sessions, in one transaction.
    pub fn add(&mut self, batch: &[(String, String, Row)]) -> Result<(), LedgerError> {
        let tx = self.conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO sessions (day, domain, policy, policy_strings, mx_host, receiving_ip,
                                       result, info, count)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (day, domain, policy, policy_strings, mx_host, receiving_ip, result)
                 DO UPDATE SET count = count + excluded.count,
                               info = CASE WHEN excluded.info = '' THEN info ELSE excluded.info END",
            )?;
            for (day, domain, row) in batch {
                stmt.execute(params![
                    day,
                    domain,
                    row.policy.word(),
                    row.policy_strings.join("\n"),
                    row.mx_host,
                    row.receiving_ip,
                    row.result.map_or("", TlsResultType::word),
                    row.info,
                    i64::try_from(row.count).unwrap_or(i64::MAX),
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// (day, domain) pairs with sessions before `today` and no report outcome yet, oldest first.
    pub fn pending(&self, today: &str) -> Result<Vec<(String, String)>, LedgerError> {
        let mut stmt = self.conn.prepare(
            "SELECT DISTINCT s.day, s.domain FROM sessions s
             WHERE s.day < ?1 AND NOT EXISTS
                 (SELECT 1 FROM reports r WHERE r.day = s.day AND r.domain = s.domain)
             ORDER BY s.day, s.domain",
        )?;
        let rows = stmt.query_map([today], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The domains with sessions on `day`.
    pub fn domains(&self, day: &str) -> Result<Vec<String>, LedgerError> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT domain FROM sessions WHERE day = ?1 ORDER BY domain")?;
        let rows = stmt.query_map([day], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The rows of `domain` on `day`. Rows written by another version with words this one does
    /// not know are skipped.
    pub fn rows(&self, day: &str, domain: &str) -> Result<Vec<Row>, LedgerError> {
        let mut stmt = self.conn.prepare(
            "SELECT policy, policy_strings, mx_host, receiving_ip, result, info, count
             FROM sessions WHERE day = ?1 AND domain = ?2
             ORDER BY policy, policy_strings, mx_host, receiving_ip, result",
        )?;
        let rows = stmt.query_map([day, domain], |r| {
            let policy: String = r.get(0)?;
            let strings: String = r.get(1)?;
            let result: String = r.get(4)?;
            let count: i64 = r.get(6)?;
            Ok((
                policy,
                strings,
                r.get(2)?,
                r.get(3)?,
                result,
                r.get(5)?,
                count,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (policy, strings, mx_host, receiving_ip, result, info, count) = row?;
            let Some(policy) = TlsPolicyKind::from_word(&policy) else {
                continue;
            };
            let result = match result.as_str() {
                "" => None,
                w => match TlsResultType::from_word(w) {
                    Some(t) => Some(t),
                    None => continue,
                },
            };
            out.push(Row {
                policy,
                policy_strings: strings
                    .split('\n')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
                mx_host,
                receiving_ip,
                result,
                info,
                count: u64::try_from(count).unwrap_or(0),
            });
        }
        Ok(out)
    }

    /// Records what became of `domain`'s report for `day` (replacing an earlier outcome: an
    /// operator's `send` again).
    pub fn record(
        &self,
        day: &str,
        domain: &str,
        o: &Outcome,
        at_ms: i64,
    ) -> Result<(), LedgerError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO reports (day, domain, report_id, state, detail, at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![day, domain, o.report_id, o.state, o.detail, at_ms],
        )?;
        Ok(())
    }

    /// The outcome recorded for `domain` on `day`.
    pub fn outcome(&self, day: &str, domain: &str) -> Result<Option<Outcome>, LedgerError> {
        Ok(self
            .conn
            .query_row(
                "SELECT report_id, state, detail FROM reports WHERE day = ?1 AND domain = ?2",
                [day, domain],
                |r| {
                    Ok(Outcome {
                        report_id: r.get(0)?,
                        state: r.get(1)?,
                        detail: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }

    /// Forgets days before `day` (counts and outcomes): reports are daily and not re-sent
    /// after a week.
    pub fn purge_before(&self, day: &str) -> Result<(), LedgerError> {
        self.conn
            .execute("DELETE FROM sessions WHERE day < ?1", [day])?;
        self.conn
            .execute("DELETE FROM reports WHERE day < ?1", [day])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(result: Option<TlsResultType>, count: u64) -> Row {
        Row {
            policy: TlsPolicyKind::NoPolicyFound,
            policy_strings: Vec::new(),
            mx_host: "mx.d.example".into(),
            receiving_ip: "127.0.0.2".into(),
            result,
            info: String::new(),
            count,
        }
    }

    #[test]
    fn counts_add_up_and_reports_are_recorded_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(&dir.path().join("tlsrpt.db")).unwrap();
        let day = "2026-11-24".to_string();
        let d = "d.example".to_string();
        l.add(&[(day.clone(), d.clone(), row(None, 2))]).unwrap();
        l.add(&[
            (day.clone(), d.clone(), row(None, 3)),
            (
                day.clone(),
                d.clone(),
                row(Some(TlsResultType::StarttlsNotSupported), 1),
            ),
        ])
        .unwrap();
        let rows = l.rows(&day, &d).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), 6);
        assert_eq!(l.pending("2026-11-24").unwrap(), vec![]);
        assert_eq!(
            l.pending("2026-11-25").unwrap(),
            vec![(day.clone(), d.clone())]
        );
        let o = Outcome {
            report_id: "x".into(),
            state: "sent".into(),
            detail: "mailto".into(),
        };
        l.record(&day, &d, &o, 1).unwrap();
        assert_eq!(l.pending("2026-11-25").unwrap(), vec![]);
        assert_eq!(l.outcome(&day, &d).unwrap(), Some(o));
        l.purge_before("2026-11-25").unwrap();
        assert!(l.rows(&day, &d).unwrap().is_empty());
    }

    #[test]
    fn a_newer_ledger_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tlsrpt.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 9)
            .unwrap();
        assert!(matches!(
            Ledger::open(&path),
            Err(LedgerError::Open(herald_store::OpenError::TooNew {
                found: 9,
                ..
            }))
        ));
    }
}
