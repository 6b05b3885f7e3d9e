//! Spool configuration: where the journal lives and how often it is committed.
//!
//! The server config embeds [`SpoolConfig`] as its `[spool]` table; unknown keys are rejected and
//! every key has a default, so an empty table is valid. [`SpoolConfig::validate`] is called once by
//! [`crate::Spool::open`] and names the offending key in its error.
//!
//! Limits: `commit_max_records` 1..=1,000,000; `commit_interval_ms` ≤ 60,000;
//! `segment_max_bytes` 4 KiB..=4 GiB (small values exist for tests that exercise segment rolls).

use crate::error::SpoolError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Smallest segment size accepted: a roll per few records is only useful to tests.
pub const MIN_SEGMENT_BYTES: u64 = 4 << 10;
/// Largest segment size accepted: recovery reads one segment at a time, and a bigger segment only
/// delays compaction.
pub const MAX_SEGMENT_BYTES: u64 = 4 << 30;
/// Upper bound for `commit_max_records`: a larger batch only grows the write buffer.
pub const MAX_COMMIT_RECORDS: usize = 1_000_000;
/// Upper bound for `commit_interval_ms`: beyond a minute, "crash loses at most T ms of outcomes"
/// stops being a useful promise.
pub const MAX_COMMIT_INTERVAL_MS: u64 = 60_000;

/// How the spool stores and commits its journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpoolConfig {
    /// Spool directory; the journal lives in `<dir>/journal/`. Created if missing.
    pub dir: PathBuf,
    /// Longest time a recorded outcome waits before it is committed (fdatasync). Bounds what a
    /// crash can lose; accepts never wait for it (they force a commit).
    pub commit_interval_ms: u64,
    /// Commit as soon as this many records are waiting, even before `commit_interval_ms`.
    pub commit_max_records: usize,
    /// Roll to a new segment file after this many bytes; old segments are then compacted away.
    pub segment_max_bytes: u64,
}

impl Default for SpoolConfig {
    fn default() -> Self {
        SpoolConfig {
            dir: PathBuf::from("spool"),
            commit_interval_ms: 5,
            commit_max_records: 4096,
            segment_max_bytes: 64 << 20,
        }
    }
}

impl SpoolConfig {
    /// A default config rooted at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> SpoolConfig {
        SpoolConfig {
            dir: dir.into(),
            ..SpoolConfig::default()
        }
    }

    /// Checks every limit; the error names the key.
    pub fn validate(&self) -> Result<(), SpoolError> {
        let bad = |key, reason: String| Err(SpoolError::Config { key, reason });
        if self.dir.as_os_str().is_empty() {
            return bad("dir", "must not be empty".into());
        }
        if self.commit_interval_ms > MAX_COMMIT_INTERVAL_MS {
            return bad(
                "commit_interval_ms",
                format!("must be at most {MAX_COMMIT_INTERVAL_MS}"),
            );
        }
        if !(1..=MAX_COMMIT_RECORDS).contains(&self.commit_max_records) {
            return bad(
                "commit_max_records",
                format!("must be between 1 and {MAX_COMMIT_RECORDS}"),
            );
        }
        if !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&self.segment_max_bytes) {
            return bad(
                "segment_max_bytes",
                format!("must be between {MIN_SEGMENT_BYTES} and {MAX_SEGMENT_BYTES}"),
            );
        }
        Ok(())
    }
}

/// The server's `[spool]` table: [`SpoolConfig`] without `dir`, which the server derives
/// (`<data_dir>/spool`), so an operator cannot point the journal away from the data directory.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpoolSection {
    /// Group commit: at most this many ms between a record and its fsync…
    pub commit_interval_ms: u64,
    /// …or this many records, whichever comes first.
    pub commit_max_records: usize,
    /// Journal segments roll over at this size.
    pub segment_max_bytes: u64,
}

impl Default for SpoolSection {
    fn default() -> Self {
        let d = SpoolConfig::default();
        SpoolSection {
            commit_interval_ms: d.commit_interval_ms,
            commit_max_records: d.commit_max_records,
            segment_max_bytes: d.segment_max_bytes,
        }
    }
}

impl SpoolSection {
    /// The spool's settings with its journal under `dir`.
    pub fn spool_config(&self, dir: PathBuf) -> SpoolConfig {
        SpoolConfig {
            dir,
            commit_interval_ms: self.commit_interval_ms,
            commit_max_records: self.commit_max_records,
            segment_max_bytes: self.segment_max_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_architecture() {
        let c = SpoolConfig::default();
        assert_eq!(c.commit_interval_ms, 5);
        assert_eq!(c.commit_max_records, 4096);
        assert_eq!(c.segment_max_bytes, 64 << 20);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn embeds_with_defaults_and_rejects_unknown_keys() {
        let c: SpoolConfig = serde_json::from_str(r#"{"dir":"/var/spool/herald"}"#).unwrap();
        assert_eq!(c.dir, PathBuf::from("/var/spool/herald"));
        assert_eq!(c.commit_max_records, 4096);
        assert!(serde_json::from_str::<SpoolConfig>(r#"{"commit_every":3}"#).is_err());
    }

    #[test]
    fn the_server_section_defaults_to_the_spool_defaults_under_the_given_dir() {
        let c = SpoolSection::default().spool_config(PathBuf::from("/data/spool"));
        assert_eq!(c, SpoolConfig::new("/data/spool"));
        let tuned = SpoolSection {
            commit_interval_ms: 7,
            commit_max_records: 9,
            segment_max_bytes: 1 << 20,
        }
        .spool_config(PathBuf::from("/d"));
        assert_eq!(
            (
                tuned.commit_interval_ms,
                tuned.commit_max_records,
                tuned.segment_max_bytes
            ),
            (7, 9, 1 << 20)
        );
    }

    #[test]
    fn validate_names_the_key() {
        let mut c = SpoolConfig::new("/tmp/x");
        c.commit_max_records = 0;
        match c.validate() {
            Err(SpoolError::Config { key, .. }) => assert_eq!(key, "commit_max_records"),
            other => panic!("unexpected {other:?}"),
        }
        let mut c = SpoolConfig::new("/tmp/x");
        c.segment_max_bytes = 10;
        assert!(matches!(
            c.validate(),
            Err(SpoolError::Config {
                key: "segment_max_bytes",
                ..
            })
        ));
    }
}
