//! `egress-warmup.json`: the warm-up counts that must survive a restart — per source address,
//! the UTC day it first sent (day 0 of its schedule) and the copies it sent on the current UTC
//! day.
//!
//! Written whole to a temporary file and renamed over the old one, so a crash leaves the old
//! or the new file, never half of one. Counts since the last write (at most about a second's)
//! are lost by a crash: the cap may then be exceeded by that much, once.
//!
//! SECURITY: the file is read at start and may have been edited or damaged: it is read up to
//! [`MAX_LEDGER_BYTES`], decoded into typed fields (unknown fields refused) and bounded in
//! entries; anything else is an error naming the file, and the server does not start — a
//! silently reset ledger would undo the warm-up the operator configured.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::net::IpAddr;
use std::path::Path;

/// Largest ledger read (the bounded number of sources makes a real one a few KiB).
pub const MAX_LEDGER_BYTES: u64 = 1024 * 1024;
/// Most entries kept (sources that were configured once stay counted).
pub const MAX_LEDGER_ENTRIES: usize = 4096;

/// The file's contents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    /// The UTC day `sent` counts are for.
    pub day: i64,
    pub sources: BTreeMap<IpAddr, SourceCount>,
}

/// One source address's warm-up state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceCount {
    /// The UTC day it first sent: day 0 of its warm-up schedule.
    pub first_day: i64,
    /// Copies sent (reserved) on [`Ledger::day`].
    pub sent: u64,
}

/// Why the ledger could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("cannot read the egress warm-up ledger {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the egress warm-up ledger {path} is damaged ({reason}); fix it, or delete it to \
         count every address's warm-up from today"
    )]
    Damaged { path: String, reason: String },
    #[error("cannot write the egress warm-up ledger {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// Reads the ledger; a missing file is an empty ledger.
pub fn load(path: &Path) -> Result<Ledger, LedgerError> {
    let shown = path.display().to_string();
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Ledger::default()),
        Err(source) => {
            return Err(LedgerError::Read {
                path: shown,
                source,
            })
        }
    };
    let mut text = Vec::new();
    file.take(MAX_LEDGER_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|source| LedgerError::Read {
            path: shown.clone(),
            source,
        })?;
    let damaged = |reason: String| LedgerError::Damaged {
        path: shown.clone(),
        reason,
    };
    if text.len() as u64 > MAX_LEDGER_BYTES {
        return Err(damaged(format!("larger than {MAX_LEDGER_BYTES} bytes")));
    }
    let ledger: Ledger = serde_json::from_slice(&text).map_err(|e| damaged(e.to_string()))?;
    if ledger.sources.len() > MAX_LEDGER_ENTRIES {
        return Err(damaged(format!("more than {MAX_LEDGER_ENTRIES} addresses")));
    }
    Ok(ledger)
}

/// Writes the ledger (temporary file, then rename).
pub fn store(path: &Path, ledger: &Ledger) -> Result<(), LedgerError> {
    let err = |source| LedgerError::Write {
        path: path.display().to_string(),
        source,
    };
    let text = serde_json::to_vec_pretty(ledger).map_err(|e| err(std::io::Error::other(e)))?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("egress-warmup.json");
        assert_eq!(load(&path).expect("missing"), Ledger::default());
        let mut l = Ledger {
            day: 20_000,
            ..Default::default()
        };
        l.sources.insert(
            "127.0.0.5".parse().expect("ip"),
            SourceCount {
                first_day: 19_999,
                sent: 42,
            },
        );
        store(&path, &l).expect("store");
        assert_eq!(load(&path).expect("load"), l);
    }

    /// A damaged, hostile or oversized ledger is an error naming the file, never a reset.
    #[test]
    fn hostile_ledgers_are_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("egress-warmup.json");
        let many: String = (0..5000)
            .map(|i| {
                format!(
                    "\"10.{}.{}.1\":{{\"first_day\":1,\"sent\":1}}",
                    i / 256,
                    i % 256
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        let cases: Vec<Vec<u8>> = vec![
            b"not json".to_vec(),
            b"{\"day\":1,\"sources\":{\"not-an-ip\":{\"first_day\":1,\"sent\":1}}}".to_vec(),
            b"{\"day\":1,\"sources\":{},\"extra\":1}".to_vec(),
            b"{\"day\":1,\"sources\":{\"127.0.0.5\":{\"first_day\":1,\"sent\":-1}}}".to_vec(),
            vec![b' '; (MAX_LEDGER_BYTES + 10) as usize],
            format!("{{\"day\":1,\"sources\":{{{many}}}}}").into_bytes(),
            vec![0xff, 0xfe, 0x00],
        ];
        for bytes in cases {
            std::fs::write(&path, &bytes).expect("write");
            match load(&path) {
                Err(e @ LedgerError::Damaged { .. }) => {
                    assert!(e.to_string().contains("egress-warmup.json"), "{e}")
                }
                other => panic!("accepted: {other:?}"),
            }
        }
    }
}
