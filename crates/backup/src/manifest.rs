//! `manifest.json`, the last entry of a backup: what it holds and each file's SHA-256.
//!
//! Layout of a backup (the only names [`check_name`] accepts):
//! - `data/<name>` — files of the data directory (`herald.db`, `archive.db`, `stats.db`,
//!   `digest.db`, `tlsrpt.db`, `accounts.db`, `secret`, `dedup.log`, `host-health.json`, `mta-sts.json`);
//! - `spool/journal/<segment>` — the journal's segments at the cut;
//! - `keys/<n>` — the key and certificate files the config names, with their role;
//! - `manifest.json`.

use serde::{Deserialize, Serialize};

/// The format written by this version; restore refuses others.
pub const FORMAT: &str = "herald-backup/1";
/// The manifest's entry name; it comes last, so its presence means the backup is complete.
pub const MANIFEST: &str = "manifest.json";
/// Largest manifest accepted (it lists a few dozen files).
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// Files of the data directory a backup carries, and whether each is an SQLite database
/// (copied with `VACUUM INTO`) or a plain file (copied as it is).
pub const DATA_FILES: &[(&str, bool)] = &[
    ("herald.db", true),
    ("archive.db", true),
    ("stats.db", true),
    ("digest.db", true),
    ("tlsrpt.db", true),
    ("accounts.db", true),
    ("secret", false),
    ("dedup.log", false),
    ("host-health.json", false),
    ("mta-sts.json", false),
];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    /// The Herald that took it (`CARGO_PKG_VERSION`).
    pub herald_version: String,
    /// The directory's schema version (SQLite `user_version` of the copy); restore and the
    /// next `herald serve` refuse a newer one with a clear message.
    pub directory_schema: Option<i64>,
    pub hostname: String,
    /// When the journal was cut (RFC 3339, UTC).
    pub taken_at: String,
    /// Journal segments in the cut (they hold the pending deliveries the restored server
    /// resumes).
    pub spool_segments: usize,
    /// Every file of the backup but the manifest, keys included.
    pub files: Vec<FileEntry>,
    pub keys: Vec<KeyEntry>,
    /// Key files the config names that could not be read (e.g. a TLS key readable by root
    /// only, once the server runs as its own user): role, path and why.
    pub skipped: Vec<String>,
}

/// One file of the backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Name in the backup (see the module docs).
    pub name: String,
    pub bytes: u64,
    /// Lower-case hex.
    pub sha256: String,
}

/// A key or certificate file: its role decides where restore puts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// e.g. `dkim:lists.example.org:s2026`, `tls:key`, `http:cert`.
    pub role: String,
    /// Name in the backup (`keys/<n>`).
    pub name: String,
    /// Where it was on the machine that took the backup.
    pub original_path: String,
}

/// A key file the config names, by role (both sides build these from their config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFile {
    pub role: String,
    pub path: std::path::PathBuf,
}

/// Accepts an entry name only if it fits the layout: never absolute, never `..`, never a name
/// with a separator where none belongs. Returns the name's kind.
pub fn check_name(name: &str) -> Result<EntryKind, String> {
    let simple = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.len() <= 255
            && s.bytes()
                .all(|b| b.is_ascii_graphic() && b != b'/' && b != b'\\')
    };
    if name == MANIFEST {
        return Ok(EntryKind::Manifest);
    }
    if let Some(file) = name.strip_prefix("data/") {
        return if DATA_FILES.iter().any(|(n, _)| *n == file) {
            Ok(EntryKind::Data)
        } else {
            Err(format!("unknown data file {name:?}"))
        };
    }
    if let Some(seg) = name.strip_prefix("spool/journal/") {
        return if simple(seg) {
            Ok(EntryKind::Segment)
        } else {
            Err(format!("bad segment name {name:?}"))
        };
    }
    if let Some(key) = name.strip_prefix("keys/") {
        return if simple(key) {
            Ok(EntryKind::Key)
        } else {
            Err(format!("bad key name {name:?}"))
        };
    }
    Err(format!("{name:?} is not part of a Herald backup"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Manifest,
    Data,
    Segment,
    Key,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_outside_the_layout_are_refused() {
        for bad in [
            "/etc/passwd",
            "../x",
            "data/../../etc/passwd",
            "data/herald.db/..",
            "spool/journal/../x",
            "spool/journal/a/b",
            "keys/",
            "keys/..",
            "keys/a\\b",
            "data/unknown.db",
            "spool/x",
            "manifest.json/",
            "keys/a b",
        ] {
            assert!(check_name(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(check_name("data/herald.db"), Ok(EntryKind::Data));
        assert_eq!(
            check_name("spool/journal/0000000000000001.log"),
            Ok(EntryKind::Segment)
        );
        assert_eq!(check_name("keys/0-dkim.pem"), Ok(EntryKind::Key));
        assert_eq!(check_name("manifest.json"), Ok(EntryKind::Manifest));
    }
}
