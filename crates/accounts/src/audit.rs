//! The audit log: every administrative action (who, from where, what, on which list and
//! target, with what outcome, when), kept `audit_retention_days`, readable by list and time,
//! counted per action for `/metrics` (`herald_audit_events_total{action}`).
//!
//! Actions are short fixed words chosen by the HTTP side's route table (`list.update`,
//! `held.approve`, `login.password`…), so the metric's label set stays bounded.
//!
//! Erasure (GDPR, `herald member erase`): [`Accounts::erase_address`] replaces the address
//! wherever it is an actor or a target with `erased:<keyed hash>` — the rows stay (what was
//! done, when) without saying to whom. The key lives in `accounts.db` (`meta.erasure_key`).
//!
//! SECURITY: every field is stored as given, bounded ([`MAX_FIELD_CHARS`]), and control
//! characters are replaced; readers (CLI, pages) print them as text.

use crate::error::AccountsError;
use crate::{key, Accounts};
use herald_types::Address;
use rusqlite::params;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Longest stored field, in characters.
pub const MAX_FIELD_CHARS: usize = 320;
/// Most rows one query returns.
pub const MAX_ROWS: usize = 10_000;
/// Old rows are deleted at most this often (on a write).
const PRUNE_EVERY_MS: u64 = 3_600_000;

/// One action to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    pub at_ms: u64,
    /// `token`, `local` or an account's address.
    pub actor: String,
    pub client: Option<String>,
    pub action: String,
    /// The list's address, when the action concerns one.
    pub list: Option<String>,
    /// A member address, a post id, an account…
    pub target: Option<String>,
    /// `ok`, `denied`, `failed`, `throttled`, or `error <HTTP status>`.
    pub outcome: String,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub id: i64,
    pub event: AuditEvent,
}

/// Which events to read, newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    pub list: Option<String>,
    pub since_ms: Option<u64>,
    pub limit: usize,
}

/// Events recorded per action since the server started.
#[derive(Default)]
pub struct Counters {
    /// std mutex: a map update, no `.await`.
    by_action: Mutex<BTreeMap<String, u64>>,
    last_prune_ms: Mutex<u64>,
}

fn clean(s: &str) -> String {
    s.chars()
        .take(MAX_FIELD_CHARS)
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect()
}

impl Accounts {
    /// Records `ev` (and, at most hourly, deletes rows past the retention).
    pub fn record(&self, ev: &AuditEvent) -> Result<(), AccountsError> {
        let db = self.db();
        db.prepare_cached(
            "INSERT INTO audit (at_ms, actor, client, action, list, target, outcome)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            ev.at_ms as i64,
            clean(&ev.actor),
            ev.client.as_deref().map(clean),
            clean(&ev.action),
            ev.list.as_deref().map(clean),
            ev.target.as_deref().map(clean),
            clean(&ev.outcome)
        ])?;
        {
            let mut counts = self
                .inner
                .audit
                .by_action
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *counts.entry(clean(&ev.action)).or_insert(0) += 1;
        }
        let mut last = self
            .inner
            .audit
            .last_prune_ms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if ev.at_ms.saturating_sub(*last) >= PRUNE_EVERY_MS {
            *last = ev.at_ms;
            let keep_ms = u64::from(self.config().audit_retention_days) * 86_400_000;
            let n = db.execute(
                "DELETE FROM audit WHERE at_ms < ?1",
                [ev.at_ms.saturating_sub(keep_ms) as i64],
            )?;
            if n > 0 {
                tracing::info!(deleted = n, "audit events past their retention deleted");
            }
        }
        Ok(())
    }

    /// Events matching `q`, newest first.
    pub fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditRow>, AccountsError> {
        let limit = q.limit.clamp(1, MAX_ROWS) as i64;
        let since = q.since_ms.unwrap_or(0) as i64;
        let db = self.db();
        let mut st = db.prepare_cached(
            "SELECT id, at_ms, actor, client, action, list, target, outcome FROM audit
             WHERE at_ms >= ?1 AND (?2 IS NULL OR list = ?2)
             ORDER BY at_ms DESC, id DESC LIMIT ?3",
        )?;
        let rows = st.query_map(params![since, q.list, limit], |r| {
            Ok(AuditRow {
                id: r.get(0)?,
                event: AuditEvent {
                    at_ms: r.get::<_, i64>(1)? as u64,
                    actor: r.get(2)?,
                    client: r.get(3)?,
                    action: r.get(4)?,
                    list: r.get(5)?,
                    target: r.get(6)?,
                    outcome: r.get(7)?,
                },
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Events per action since the server started, for `/metrics`.
    pub fn audit_counts(&self) -> Vec<(String, u64)> {
        self.inner
            .audit
            .by_action
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// How an erased address appears in the log.
    pub fn erased_name(&self, address: &Address) -> Result<String, AccountsError> {
        let key_bytes: Vec<u8> = self.db().query_row(
            "SELECT value FROM meta WHERE name = 'erasure_key'",
            [],
            |r| r.get(0),
        )?;
        let h = herald_types::token::erasure_hash(&key_bytes, address);
        Ok(format!("erased:{}", &h[..h.len().min(22)]))
    }

    /// GDPR erasure: the address leaves the audit log (replaced by its keyed hash), and its
    /// account, roles, sessions and links are removed. Returns the audit rows rewritten.
    pub fn erase_address(&self, address: &Address) -> Result<u64, AccountsError> {
        let name = self.erased_name(address)?;
        self.remove(address)?;
        let k = key(address);
        let db = self.db();
        // Stored fields keep the case they were given in; compare without it.
        let a = db.execute(
            "UPDATE audit SET actor = ?2 WHERE lower(actor) = ?1",
            params![k, name],
        )?;
        let t = db.execute(
            "UPDATE audit SET target = ?2 WHERE lower(target) = ?1",
            params![k, name],
        )?;
        Ok((a + t) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{addr, store};

    fn ev(
        at_ms: u64,
        actor: &str,
        action: &str,
        list: Option<&str>,
        target: Option<&str>,
    ) -> AuditEvent {
        AuditEvent {
            at_ms,
            actor: actor.into(),
            client: Some("127.0.0.2".into()),
            action: action.into(),
            list: list.map(str::to_string),
            target: target.map(str::to_string),
            outcome: "ok".into(),
        }
    }

    #[test]
    fn recorded_filtered_counted_and_pruned() {
        let (a, _dir) = store();
        let day = 86_400_000;
        a.record(&ev(1, "token", "list.update", Some("dev@l.test"), None))
            .expect("r");
        a.record(&ev(
            2,
            "o@x.test",
            "member.add",
            Some("ops@l.test"),
            Some("m@x.test"),
        ))
        .expect("r");
        let all = a
            .audit(&AuditQuery {
                limit: 10,
                ..Default::default()
            })
            .expect("q");
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].event.action, "member.add", "newest first");
        let dev = a
            .audit(&AuditQuery {
                list: Some("dev@l.test".into()),
                limit: 10,
                ..Default::default()
            })
            .expect("q");
        assert_eq!(dev.len(), 1);
        let since = a
            .audit(&AuditQuery {
                since_ms: Some(2),
                limit: 10,
                ..Default::default()
            })
            .expect("q");
        assert_eq!(since.len(), 1);
        assert_eq!(
            a.audit_counts(),
            vec![("list.update".into(), 1), ("member.add".into(), 1)]
        );
        // A year and more later, the next write prunes what is past the retention.
        a.record(&ev(366 * day, "token", "list.update", None, None))
            .expect("r");
        let all = a
            .audit(&AuditQuery {
                limit: 10,
                ..Default::default()
            })
            .expect("q");
        assert_eq!(all.len(), 1);
    }

    #[test]
    fn erasure_leaves_no_address_in_clear_and_fields_are_bounded() {
        let (a, _dir) = store();
        let who = addr("Gone@X.test");
        a.add(&who, false, None, 0).expect("add");
        a.record(&ev(
            1,
            "token",
            "member.add",
            Some("dev@l.test"),
            Some("Gone@X.test"),
        ))
        .expect("r");
        a.record(&ev(
            2,
            "gone@x.test",
            "held.approve",
            Some("dev@l.test"),
            Some("17"),
        ))
        .expect("r");
        assert_eq!(a.erase_address(&who).expect("erase"), 2);
        let rows = a
            .audit(&AuditQuery {
                limit: 10,
                ..Default::default()
            })
            .expect("q");
        let text = format!("{rows:?}").to_lowercase();
        assert!(!text.contains("gone@x.test"), "{text}");
        assert!(text.contains("erased:"));
        assert!(a.get(&who).expect("get").is_none(), "the account went too");
        // Hostile fields: long and with control characters.
        let long = "x".repeat(100_000);
        a.record(&ev(3, &long, "a\r\nb", None, Some("t\u{0}")))
            .expect("r");
        let r = &a
            .audit(&AuditQuery {
                limit: 1,
                ..Default::default()
            })
            .expect("q")[0]
            .event;
        assert_eq!(r.actor.chars().count(), MAX_FIELD_CHARS);
        assert!(!r.action.contains('\n') && !r.target.as_deref().unwrap_or("").contains('\0'));
    }
}
