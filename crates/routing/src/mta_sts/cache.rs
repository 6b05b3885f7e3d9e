//! The policy cache (RFC 8461 §5.1): the last valid policy of each domain with the TXT id it was
//! fetched under, kept until it expires (`fetched_at + max_age`), in memory and in a JSON file
//! so that a restart keeps enforcing. No async: callers hold the lock only for map operations.
//!
//! Limits: at most `max_domains` entries. When full, expired entries go first, then the one that
//! expires soonest (it would have to be fetched again first anyway).
//!
//! The file is written whole to a temporary name and renamed, so a crash leaves the old or the
//! new file, never half of one. Reading it back re-parses every policy with the strict parser;
//! entries that do not parse, or have expired, are dropped — a damaged file costs cached
//! policies, never the start.
//!
//! SECURITY: the file is Herald's own, but it is read as untrusted input (size-bounded, every
//! field re-validated).

use super::policy::{self, Policy};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Largest cache file read back (64 policies × 64 patterns × 255 octets would be ~1 MiB; a
/// hundred thousand ordinary entries are a few tens of MiB).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// Format version of the file.
const FILE_VERSION: u32 = 1;

/// One domain's cached policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPolicy {
    /// The TXT record's `id` the policy was fetched under.
    pub id: String,
    pub policy: Arc<Policy>,
    /// When it was fetched, seconds since the Unix epoch.
    pub fetched_at: u64,
}

impl CachedPolicy {
    /// Seconds since the epoch after which the policy must not be used.
    pub fn expires_at(&self) -> u64 {
        self.fetched_at.saturating_add(self.policy.max_age_secs)
    }

    fn is_fresh(&self, now: u64) -> bool {
        now < self.expires_at()
    }
}

/// The in-memory cache.
#[derive(Debug)]
pub(crate) struct PolicyCache {
    map: HashMap<String, CachedPolicy>,
    max_domains: usize,
}

impl PolicyCache {
    pub fn new(max_domains: usize) -> PolicyCache {
        PolicyCache {
            map: HashMap::new(),
            max_domains: max_domains.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The unexpired policy of `domain`; an expired one is removed.
    pub fn get(&mut self, domain: &str, now: u64) -> Option<CachedPolicy> {
        match self.map.get(domain) {
            Some(p) if p.is_fresh(now) => Some(p.clone()),
            Some(_) => {
                self.map.remove(domain);
                None
            }
            None => None,
        }
    }

    /// Stores `entry` for `domain`, making room if the cache is full.
    pub fn insert(&mut self, domain: &str, entry: CachedPolicy, now: u64) {
        if !self.map.contains_key(domain) && self.map.len() >= self.max_domains {
            self.map.retain(|_, p| p.is_fresh(now));
            if self.map.len() >= self.max_domains {
                let soonest = self
                    .map
                    .iter()
                    .min_by_key(|(_, p)| p.expires_at())
                    .map(|(d, _)| d.clone());
                if let Some(d) = soonest {
                    self.map.remove(&d);
                }
            }
        }
        self.map.insert(domain.to_string(), entry);
    }

    /// The file form of every unexpired entry.
    pub fn to_file(&self, now: u64) -> CacheFile {
        let mut policies: Vec<FileEntry> = self
            .map
            .iter()
            .filter(|(_, p)| p.is_fresh(now))
            .map(|(domain, p)| FileEntry {
                domain: domain.clone(),
                id: p.id.clone(),
                fetched_at: p.fetched_at,
                policy: p.policy.to_text(),
            })
            .collect();
        policies.sort_by(|a, b| a.domain.cmp(&b.domain));
        CacheFile {
            version: FILE_VERSION,
            policies,
        }
    }

    /// Loads the unexpired, valid entries of `file` (at most `max_domains`). Returns how many
    /// entries were dropped as invalid.
    pub fn load(&mut self, file: CacheFile, now: u64) -> usize {
        let mut dropped = 0;
        if file.version != FILE_VERSION {
            return file.policies.len();
        }
        for e in file.policies {
            let valid = policy::is_host_name(&e.domain)
                && super::record::is_valid_id(&e.id)
                && e.fetched_at <= now.saturating_add(300); // a clock set back a little is fine
            let parsed = valid.then(|| policy::parse(&e.policy).ok()).flatten();
            let Some(p) = parsed else {
                dropped += 1;
                continue;
            };
            let entry = CachedPolicy {
                id: e.id,
                policy: Arc::new(p),
                fetched_at: e.fetched_at,
            };
            if entry.is_fresh(now) {
                self.insert(&e.domain.to_ascii_lowercase(), entry, now);
            }
        }
        dropped
    }
}

/// The cache file: `{"version": 1, "policies": [{domain, id, fetched_at, policy}]}`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CacheFile {
    version: u32,
    policies: Vec<FileEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct FileEntry {
    domain: String,
    id: String,
    fetched_at: u64,
    /// The policy in its canonical text form.
    policy: String,
}

/// Why the cache file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CacheFileError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: larger than {MAX_FILE_BYTES} octets")]
    TooLarge { path: String },
    #[error("{path}: {source}")]
    Format {
        path: String,
        source: serde_json::Error,
    },
}

/// Reads the cache file; Ok(None) when there is none yet.
pub(crate) fn read_file(path: &Path) -> Result<Option<CacheFile>, CacheFileError> {
    let name = || path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CacheFileError::Io {
                path: name(),
                source,
            })
        }
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(CacheFileError::TooLarge { path: name() });
    }
    let bytes = std::fs::read(path).map_err(|source| CacheFileError::Io {
        path: name(),
        source,
    })?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| CacheFileError::Format {
            path: name(),
            source,
        })
}

/// Writes the cache file atomically (temporary file, fsync, rename).
pub(crate) fn write_file(path: &Path, file: &CacheFile) -> Result<(), CacheFileError> {
    use std::io::Write;
    let io = |source| CacheFileError::Io {
        path: path.display().to_string(),
        source,
    };
    let json = serde_json::to_vec_pretty(file).map_err(|source| CacheFileError::Format {
        path: path.display().to_string(),
        source,
    })?;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&json).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, fetched_at: u64, max_age: u64) -> CachedPolicy {
        let text =
            format!("version: STSv1\nmode: enforce\nmx: mx.{id}.example\nmax_age: {max_age}\n");
        CachedPolicy {
            id: id.into(),
            policy: Arc::new(policy::parse(&text).expect("valid")),
            fetched_at,
        }
    }

    #[test]
    fn expired_entries_are_not_returned() {
        let mut c = PolicyCache::new(10);
        c.insert("a.example", entry("1", 1000, 100), 1000);
        assert!(c.get("a.example", 1099).is_some());
        assert!(c.get("a.example", 1100).is_none());
        assert_eq!(c.len(), 0, "the expired entry is gone");
    }

    #[test]
    fn a_full_cache_evicts_expired_then_soonest_expiring() {
        let mut c = PolicyCache::new(2);
        c.insert("a.example", entry("a", 0, 10), 0);
        c.insert("b.example", entry("b", 0, 1000), 0);
        c.insert("c.example", entry("c", 0, 500), 0);
        assert!(c.get("a.example", 1).is_none(), "soonest to expire went");
        assert_eq!(c.len(), 2);
        // At t=600 c has expired: it makes room, b stays.
        c.insert("d.example", entry("d", 600, 1000), 600);
        assert!(c.get("b.example", 600).is_some());
        assert!(c.get("d.example", 600).is_some());
        // Replacing an entry never evicts another.
        c.insert("b.example", entry("b2", 600, 1000), 600);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn file_round_trip_drops_expired_and_invalid_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mta-sts.json");
        let mut c = PolicyCache::new(10);
        c.insert("a.example", entry("a1", 1000, 5000), 1000);
        c.insert("b.example", entry("b1", 1000, 10), 1000);
        write_file(&path, &c.to_file(1005)).expect("write");
        let mut back = PolicyCache::new(10);
        let file = read_file(&path).expect("read").expect("exists");
        assert_eq!(back.load(file, 2000), 0);
        assert_eq!(back.get("a.example", 2000), c.get("a.example", 2000));
        assert!(back.get("b.example", 2000).is_none());

        let hostile = r#"{"version":1,"policies":[
            {"domain":"ok.example","id":"x1","fetched_at":1000,"policy":"version: STSv1\nmode: testing\nmx: mx.ok.example\nmax_age: 9000\n"},
            {"domain":"bad domain","id":"x","fetched_at":1000,"policy":"version: STSv1\nmode: none\nmax_age: 9000\n"},
            {"domain":"c.example","id":"not valid!","fetched_at":1000,"policy":"version: STSv1\nmode: none\nmax_age: 9000\n"},
            {"domain":"d.example","id":"x","fetched_at":1000,"policy":"garbage"},
            {"domain":"e.example","id":"x","fetched_at":99999999999,"policy":"version: STSv1\nmode: none\nmax_age: 9000\n"}
        ]}"#;
        std::fs::write(&path, hostile).expect("write");
        let mut back = PolicyCache::new(10);
        let file = read_file(&path).expect("read").expect("exists");
        assert_eq!(back.load(file, 2000), 4);
        assert_eq!(back.len(), 1);
        std::fs::write(&path, b"\x00not json").expect("write");
        assert!(read_file(&path).is_err());
        assert!(read_file(&dir.path().join("none.json"))
            .expect("no file is fine")
            .is_none());
    }
}
