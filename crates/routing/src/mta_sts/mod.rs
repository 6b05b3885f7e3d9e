//! MTA-STS (RFC 8461): recipient domains that publish a policy get their mail only over TLS that
//! verifies, to the MX hosts they name.
//!
//! ```text
//! scheduler routing a domain ─► MxResolver::resolve ─┐
//!                           └─► MtaSts::lookup ───────┴─► apply ─► hosts + StsRoute (or defer)
//! MtaSts::lookup: TXT _mta-sts.<domain> ─► same id as the cached policy? use it
//!                                      └─► else GET https://mta-sts.<domain>/.well-known/mta-sts.txt
//! ```
//!
//! * [`record`]: the TXT record; [`policy`]: the policy file and MX patterns; [`fetch`]: the
//!   HTTPS request (reqwest, resolved by Herald's resolver); [`cache`]: memory + `mta-sts.json`;
//!   [`apply`]: what a policy does to a domain's MX hosts and TLS requirement.
//! * Failures never block delivery on their own (§5.1): a TXT lookup or fetch that fails falls
//!   back to the cached policy if one is unexpired, and to ordinary delivery otherwise. Only a
//!   valid `enforce` policy can defer a copy (no MX host matches, or TLS does not verify).
//!
//! Limits: the cache holds at most `cache_max_domains` policies; a fetch is bounded by
//! `fetch_timeout_secs` and 64 KiB of body; DNS lookups by the resolver's own limits.
//!
//! SECURITY: TXT records, the policy host and its response are hostile input; see each module.
//! The policy is only trusted after the HTTPS certificate verified for `mta-sts.<domain>`.

pub mod apply;
pub mod cache;
pub mod config;
pub mod fetch;
pub mod policy;
pub mod record;

pub use apply::{apply, StsRoute};
pub use cache::CachedPolicy;
pub use fetch::FetchError;
pub use policy::{Mode, MxPattern, Policy, PolicyError};
pub use record::TxtRecord;

use crate::resolve::{classify, fqdn, Failure, MxResolver};
use cache::PolicyCache;
use config::MtaStsConfig;
use fetch::Fetcher;
use hickory_resolver::TokioResolver;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Where a lookup's policy came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySource {
    /// Fetched just now (the TXT id was new, or the cached policy had expired).
    Fetched,
    /// The cached policy: its id is still current, or DNS / HTTPS failed (§5.1).
    Cached,
    /// No policy applies.
    None,
}

/// Why discovery did not go all the way (for the log; never an error for delivery).
#[derive(Debug, thiserror::Error)]
pub enum LookupProblem {
    #[error("TXT lookup of _mta-sts.{domain} failed: {detail}")]
    Dns { domain: String, detail: String },
    #[error("TXT record of _mta-sts.{domain} is unusable: {why}")]
    Txt { domain: String, why: &'static str },
    #[error("{0}")]
    Fetch(#[from] FetchError),
}

/// The outcome of [`MtaSts::lookup`].
#[derive(Debug)]
pub struct StsLookup {
    /// The policy to apply, if any (unexpired).
    pub policy: Option<CachedPolicy>,
    pub source: PolicySource,
    /// What failed on the way, if anything.
    pub problem: Option<LookupProblem>,
}

/// Policy discovery and the policy cache. Cheap to share (`Arc`); built once per server.
pub struct MtaSts {
    resolver: TokioResolver,
    fetcher: Fetcher,
    /// A std lock: held only for map operations, never across an await.
    cache: Arc<Mutex<PolicyCache>>,
    file: Option<Arc<CacheFileWriter>>,
}

/// The cache file and the lock that keeps two writes from interleaving.
struct CacheFileWriter {
    path: PathBuf,
    writing: Mutex<()>,
}

impl std::fmt::Debug for MtaSts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MtaSts")
            .field(
                "file",
                &self.file.as_ref().map(|w| w.path.display().to_string()),
            )
            .finish_non_exhaustive()
    }
}

impl MtaSts {
    /// Builds discovery on `resolver`'s DNS, verifying policy hosts against `ca_file` (else the
    /// system bundle), with the cache kept in `cache_file` when given (read now: a missing or
    /// damaged file only costs cached policies, with a warning).
    pub fn new(
        cfg: &MtaStsConfig,
        resolver: &MxResolver,
        ca_file: Option<&Path>,
        cache_file: Option<PathBuf>,
    ) -> MtaSts {
        let mut cache = PolicyCache::new(cfg.cache_max_domains);
        if let Some(path) = &cache_file {
            match cache::read_file(path) {
                Ok(Some(file)) => {
                    let dropped = cache.load(file, unix_now());
                    if dropped > 0 {
                        tracing::warn!(path = %path.display(), dropped, "invalid MTA-STS cache entries dropped");
                    }
                    tracing::info!(path = %path.display(), policies = cache.len(), "MTA-STS policy cache loaded");
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "MTA-STS policy cache not loaded; starting empty")
                }
            }
        }
        MtaSts {
            resolver: resolver.resolver.clone(),
            fetcher: Fetcher::new(
                resolver.resolver.clone(),
                ca_file,
                cfg.https_port,
                cfg.fetch_timeout,
            ),
            cache: Arc::new(Mutex::new(cache)),
            file: cache_file.map(|path| {
                Arc::new(CacheFileWriter {
                    path,
                    writing: Mutex::new(()),
                })
            }),
        }
    }

    /// The policy that applies to `domain` now (RFC 8461 §3, §5.1). Never fails: problems are
    /// reported in [`StsLookup::problem`] and fall back to the cache, then to no policy.
    pub async fn lookup(&self, domain: &str) -> StsLookup {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        let now = unix_now();
        let cached = lock(&self.cache).get(&domain, now);
        let fallback = |problem: Option<LookupProblem>| StsLookup {
            source: match cached {
                Some(_) => PolicySource::Cached,
                None => PolicySource::None,
            },
            policy: cached.clone(),
            problem,
        };
        let id = match self.txt(&domain).await {
            Ok(TxtRecord::Policy { id }) => id,
            Ok(TxtRecord::Absent) => return fallback(None),
            Ok(TxtRecord::Invalid(why)) => {
                return fallback(Some(LookupProblem::Txt { domain, why }))
            }
            Err(detail) => return fallback(Some(LookupProblem::Dns { domain, detail })),
        };
        if let Some(c) = cached.as_ref().filter(|c| c.id == id) {
            return StsLookup {
                policy: Some(c.clone()),
                source: PolicySource::Cached,
                problem: None,
            };
        }
        match self.fetcher.fetch(&domain).await {
            Ok(policy) => {
                let entry = CachedPolicy {
                    id,
                    policy: Arc::new(policy),
                    fetched_at: now,
                };
                lock(&self.cache).insert(&domain, entry.clone(), now);
                self.persist();
                StsLookup {
                    policy: Some(entry),
                    source: PolicySource::Fetched,
                    problem: None,
                }
            }
            Err(e) => fallback(Some(e.into())),
        }
    }

    /// The TXT records of `_mta-sts.<domain>`, judged. Err: the lookup failed (not "no record").
    async fn txt(&self, domain: &str) -> Result<TxtRecord, String> {
        let name = fqdn(&format!("_mta-sts.{domain}")).ok_or("not a valid domain name")?;
        match self.resolver.txt_lookup(name).await {
            Ok(found) => {
                let records: Vec<String> = found
                    .iter()
                    .map(|txt| {
                        // A record's character-strings are one text (RFC 7208 §3.3 style).
                        txt.txt_data()
                            .iter()
                            .map(|s| String::from_utf8_lossy(s))
                            .collect::<String>()
                    })
                    .collect();
                Ok(record::parse_records(&records))
            }
            Err(e) => match classify(&e) {
                Failure::NoData | Failure::NxDomain => Ok(TxtRecord::Absent),
                other => Err(other.describe()),
            },
        }
    }

    /// Writes the cache file off the async threads. Writes are serialized and each takes the
    /// latest state, so the last one to run leaves the newest cache on disk.
    fn persist(&self) {
        let Some(file) = self.file.clone() else {
            return;
        };
        let cache = self.cache.clone();
        tokio::task::spawn_blocking(move || {
            let _writing = lock(&file.writing);
            let snapshot = lock(&cache).to_file(unix_now());
            if let Err(e) = cache::write_file(&file.path, &snapshot) {
                tracing::warn!(error = %e, "cannot save the MTA-STS policy cache");
            }
        });
    }
}

/// Poisoning only means another thread panicked mid-operation on a map; the map is still whole.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Wall-clock seconds: cached policies outlive the process, so their times are Unix times.
fn unix_now() -> u64 {
    herald_types::unix_ms_now() / 1000
}
