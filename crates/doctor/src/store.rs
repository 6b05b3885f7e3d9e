//! The `[store]` check: whether the PostgreSQL directory answers, and whether its
//! schema is one this Herald can use. Pure: the CLI probes (`Directory::probe_postgres`, which
//! changes nothing) and hands the answer here.
//!
//! SECURITY: the subject is the store as `StoreConfig::describe` gives it (no password); the
//! error text is the directory's, which never carries the URL.

use crate::{Finding, Severity};

/// What a probe of the PostgreSQL directory found: its schema version (0: none yet) or why it
/// could not be reached. `supported` is this Herald's schema version.
pub fn store_finding(subject: &str, found: Result<i64, String>, supported: i64) -> Finding {
    let (severity, message) = match found {
        Err(e) => (Severity::Error, format!("cannot reach the directory: {e}")),
        Ok(0) => (
            Severity::Ok,
            "reachable; no directory schema yet (herald serve creates it)".to_string(),
        ),
        Ok(v) if v < supported => (
            Severity::Ok,
            format!("reachable; schema version {v}, herald serve migrates it to {supported}"),
        ),
        Ok(v) if v == supported => (
            Severity::Ok,
            format!("reachable; schema version {v} (current)"),
        ),
        Ok(v) => (
            Severity::Error,
            format!("schema version {v} is newer than this Herald supports ({supported}): upgrade Herald"),
        ),
    };
    Finding::new(severity, "store", subject, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_has_its_severity() {
        let s = "postgres://h:***@db/herald";
        assert_eq!(store_finding(s, Ok(0), 6).severity, Severity::Ok);
        assert_eq!(store_finding(s, Ok(3), 6).severity, Severity::Ok);
        assert_eq!(store_finding(s, Ok(6), 6).severity, Severity::Ok);
        assert_eq!(store_finding(s, Ok(7), 6).severity, Severity::Error);
        let down = store_finding(s, Err("connection refused".into()), 6);
        assert_eq!(down.severity, Severity::Error);
        assert!(down.message.contains("connection refused"));
        // Control characters from a server's error text are not printed raw.
        let hostile = store_finding(s, Err("bad\x1b[2Jthing".into()), 6);
        assert!(!hostile.message.contains('\x1b'), "{}", hostile.message);
    }
}
