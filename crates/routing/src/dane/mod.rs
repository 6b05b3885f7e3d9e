//! DANE for outbound SMTP (RFC 7672, RFC 6698, RFC 7671): MX hosts of DNSSEC-signed domains
//! that publish TLSA records get their mail only over TLS that those records authenticate.
//!
//! ```text
//! scheduler routing a domain ─► MxResolver::resolve ─────────────┐
//!                           ├─► Dane::mx_security (MX, DO=1) ─────┼─► Dane::hosts (per MX host:
//!                           └─► MtaSts::lookup                    │    A, AAAA, _<port>._tcp TLSA)
//!                                                                 └─► apply ─► hosts + DaneRoute
//! worker: a host whose TLSA records are usable ─► herald_smtp_client::Connection::connect_dane
//! ```
//!
//! * [`tlsa`]: the records, parsed strictly; [`crate::secure_dns`]: the DNSSEC-aware queries
//!   (AD bit); [`cache`]: per-host answers by TTL; [`apply`]: what the answers do to a route.
//!   The certificate check in the handshake is the SMTP client's (`herald_smtp_client::
//!   dane_verify`): routing decides *which* records a host must match, the client matches them.
//! * Trust: the `[dns]` resolver's AD bit, as Postfix does — the operator promises it is a
//!   local validating resolver by turning DANE on. Only AD=1 answers are secure.
//! * RFC 7672 §2.2: DANE applies to an MX host when the domain's MX answer is secure, the
//!   host's address answers are secure, and its TLSA answer is secure with at least one usable
//!   record. An insecure answer anywhere on that path means ordinary (non-DANE) delivery; a
//!   failed one (SERVFAIL, which is how a validating resolver reports bogus data, or no answer)
//!   means the host is not used at all, and if no host is left the copies are deferred
//!   (`451 4.7.5`) — never sent in plaintext.
//! * RFC 8461 §2: when DANE applies to any host of a domain, DANE decides for the domain and its
//!   MTA-STS policy is not applied (the caller skips it).
//!
//! Limits: per host three queries (A, AAAA, TLSA), concurrently, each bounded by the resolver's
//! `timeout_ms × attempts`; answers cached per host (at most `cache_max_hosts`); at most
//! [`tlsa::MAX_RECORDS`] records per host.
//!
//! SECURITY: every DNS answer and every certificate is hostile input; see each module. Nothing
//! here trusts a record that did not come with AD=1 from the configured resolver.

pub mod apply;
mod cache;
pub mod config;
pub mod tlsa;
mod verdict;

pub use apply::{apply, DaneRoute};
pub use config::DaneConfig;
pub use tlsa::{Tlsa, TlsaSet, Unusable};
pub use verdict::{HostDane, MxSecurity};

use crate::resolve::{fqdn, MxHost, MxResolver};
use crate::secure_dns::{Answer, QueryError, SecureDns};
use cache::HostCache;
use hickory_resolver::proto::rr::{RData, RecordType};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// TLSA lookups and their cache. Cheap to clone (clones share the cache); built once per
/// server.
#[derive(Clone)]
pub struct Dane(Arc<Inner>);

struct Inner {
    dns: SecureDns,
    /// The delivery port: TLSA records are looked up at `_<port>._tcp.<host>`.
    port: u16,
    /// A std lock: held only for one map operation, never across an await.
    cache: Mutex<HostCache>,
}

impl std::fmt::Debug for Dane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dane")
            .field("nameservers", &self.0.dns.nameservers)
            .field("port", &self.0.port)
            .finish_non_exhaustive()
    }
}

impl Dane {
    /// DANE on the nameservers `resolver` uses, for MX hosts reached on `port`.
    pub fn new(cfg: &DaneConfig, resolver: &MxResolver, port: u16) -> Dane {
        Dane(Arc::new(Inner {
            dns: resolver.secure_dns(),
            port,
            cache: Mutex::new(HostCache::new(cfg.cache_max_hosts)),
        }))
    }

    /// The owner name of `host`'s TLSA records.
    pub fn tlsa_name(&self, host: &str) -> String {
        format!("_{}._tcp.{}", self.0.port, host.trim_end_matches('.'))
    }

    /// Whether `domain`'s MX answer is secure. A domain without MX records (an implicit MX) is
    /// judged by the authenticated denial of its MX records.
    pub async fn mx_security(&self, domain: &str) -> MxSecurity {
        let Some(name) = fqdn(domain.trim_end_matches('.')) else {
            return MxSecurity::Failed(format!("{domain:?} is not a domain name"));
        };
        match self.0.dns.query(&name, RecordType::MX).await {
            Ok(a) if a.authentic => MxSecurity::Secure,
            Ok(_) => MxSecurity::Insecure,
            Err(e) => MxSecurity::Failed(format!("MX lookup of {domain}: {e}")),
        }
    }

    /// What DANE requires of each of `hosts` (same order), looked up concurrently or taken
    /// from the cache, and how long the answers stay valid (the shortest of them; failures
    /// count as zero).
    pub async fn hosts(&self, hosts: &[MxHost]) -> (Vec<HostDane>, Duration) {
        let mut tasks = JoinSet::new();
        for (i, h) in hosts.iter().enumerate() {
            let dane = self.clone();
            let name = h.name.to_ascii_lowercase();
            tasks.spawn(async move { (i, dane.host(&name).await) });
        }
        let mut out = vec![HostDane::Failed("lookup did not finish".into()); hosts.len()];
        let mut valid_for = Duration::from_secs(u64::from(cache::MAX_TTL_SECS));
        while let Some(joined) = tasks.join_next().await {
            // A panicked task leaves its host Failed: never used rather than used unchecked.
            if let Ok((i, (dane, left))) = joined {
                valid_for = valid_for.min(left);
                if let Some(slot) = out.get_mut(i) {
                    *slot = dane;
                }
            }
        }
        (out, valid_for)
    }

    /// One host's requirement, from the cache or DNS, and how long it stays valid.
    pub async fn host(&self, host: &str) -> (HostDane, Duration) {
        let key = host.trim_end_matches('.').to_ascii_lowercase();
        if let Some(hit) = lock(&self.0.cache).get(&key, Instant::now()) {
            return hit;
        }
        let (dane, ttl) = self.look_up(&key).await;
        if let HostDane::Failed(why) = &dane {
            tracing::info!(host = %key, reason = %why, "DANE lookup failed; the host is not used");
        }
        let now = Instant::now();
        let mut cache = lock(&self.0.cache);
        cache.insert(&key, dane.clone(), ttl, now);
        let left = cache
            .get(&key, now)
            .map_or(Duration::ZERO, |(_, left)| left);
        (dane, left)
    }

    /// A, AAAA and TLSA of `host` concurrently, judged as RFC 7672 §2.2.2 says.
    async fn look_up(&self, host: &str) -> (HostDane, u32) {
        let tlsa_owner = self.tlsa_name(host);
        let (Some(name), Some(tlsa_name)) = (fqdn(host), fqdn(&tlsa_owner)) else {
            return (HostDane::Failed(format!("{host:?} is not a host name")), 0);
        };
        let dns = &self.0.dns;
        let (a, aaaa, tlsa) = tokio::join!(
            dns.query(&name, RecordType::A),
            dns.query(&name, RecordType::AAAA),
            dns.query(&tlsa_name, RecordType::TLSA),
        );
        let failed = |what: &str, e: QueryError| {
            let why = format!("{what} lookup of {host}: {e}");
            (HostDane::Failed(why), 0)
        };
        let (a, aaaa) = match (a, aaaa) {
            (Ok(a), Ok(aaaa)) => (a, aaaa),
            (Err(e), _) | (_, Err(e)) => return failed("address", e),
        };
        let addr_ttl = a.ttl.min(aaaa.ttl);
        // TLSA records of a host whose addresses are not secure are not used: an attacker who
        // can forge the address could send us anywhere regardless (RFC 7672 §2.2.2).
        if !(a.authentic && aaaa.authentic) {
            return (HostDane::Insecure, addr_ttl);
        }
        let tlsa = match tlsa {
            Ok(t) => t,
            Err(e) => return failed("TLSA", e),
        };
        let ttl = addr_ttl.min(tlsa.ttl);
        (judge_tlsa(host, &tlsa), ttl)
    }
}

/// A TLSA answer from the resolver: secure with usable records, secure without, or insecure.
fn judge_tlsa(host: &str, answer: &Answer) -> HostDane {
    if !answer.authentic {
        return HostDane::Insecure;
    }
    let rdatas: Vec<Vec<u8>> = answer.records.iter().map(wire_rdata).collect();
    let (set, unusable) = TlsaSet::from_rdata(rdatas.iter().map(Vec::as_slice));
    if !unusable.is_empty() {
        let reasons: Vec<String> = unusable.iter().map(ToString::to_string).collect();
        tracing::info!(
            host,
            ?reasons,
            usable = set.len(),
            "unusable TLSA records ignored"
        );
    }
    if set.is_empty() {
        HostDane::NoRecords
    } else {
        HostDane::Required(Arc::new(set))
    }
}

/// A TLSA record's rdata in wire form, for the strict parser; anything hickory did not decode
/// as TLSA (e.g. empty rdata) becomes empty, which the parser rejects.
fn wire_rdata(rdata: &RData) -> Vec<u8> {
    match rdata {
        RData::TLSA(t) => {
            let mut v = vec![
                u8::from(t.cert_usage()),
                u8::from(t.selector()),
                u8::from(t.matching()),
            ];
            v.extend_from_slice(t.cert_data());
            v
        }
        _ => Vec::new(),
    }
}

/// Poisoning only means another thread panicked mid-operation on the map; it is still whole.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
