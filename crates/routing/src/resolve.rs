//! MX resolution: a recipient domain → the hosts to try, in order, with their addresses.
//!
//! Rules (RFC 5321 §5.1, RFC 7505):
//! * MX records are sorted by preference, lowest first. Hosts of equal preference are shuffled
//!   (a random order per call) so that load spreads across them as §5.1 asks.
//! * No MX records (NODATA): the domain itself is the implicit MX, preference 0, with its own
//!   A/AAAA addresses.
//! * A null MX (a single MX whose exchange is `.`) means the domain accepts no mail:
//!   [`ResolveError::NullMx`], permanent. `.` entries mixed with real ones are ignored.
//! * NXDOMAIN: [`ResolveError::NoSuchDomain`], permanent. No usable address for any host (and no
//!   lookup failed transiently): [`ResolveError::NoAddress`], permanent. Timeouts, SERVFAIL and
//!   other failures are transient.
//! * Each host's A and AAAA records are looked up concurrently; IPv4 addresses come first. A host
//!   whose lookup fails is dropped when another host has addresses (that is what backup MXs are
//!   for).
//!
//! Limits: at most [`MAX_MX_HOSTS`] hosts and [`MAX_ADDRS_PER_HOST`] addresses per host are kept,
//! so a hostile zone cannot make one resolution fan out into unbounded work. A lookup is bounded
//! by the resolver's `timeout_ms × attempts` per query; A and AAAA run in parallel, so a server
//! that drops only AAAA queries costs that bound on every uncached resolution.
//!
//! hickory-resolver's cache is used (positive and negative answers, by TTL).
//!
//! SECURITY: answers are hostile. Names are used only as DNS names and as the TLS server name;
//! addresses are not filtered (the simulator lives on 127.0.0.0/8), so a zone can point its MX
//! at internal addresses — a network-level egress policy is the place to stop that.

use crate::config::ResolverConfig;
use crate::error::SetupError;
use crate::secure_dns::SecureDns;
use herald_types::{EnhancedStatus, Reply};
use hickory_resolver::config::{
    NameServerConfig, NameServerConfigGroup, ResolveHosts, ResolverConfig as HickoryConfig,
    ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::proto::ProtoErrorKind;
use hickory_resolver::{Name, TokioResolver};
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::task::JoinSet;

/// Most MX hosts kept per domain.
pub const MAX_MX_HOSTS: usize = 10;
/// Most addresses kept per host.
pub const MAX_ADDRS_PER_HOST: usize = 8;

/// One mail exchanger and where to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MxHost {
    /// The exchange name without the trailing dot (the domain itself for an implicit MX).
    pub name: String,
    pub preference: u16,
    /// IPv4 first, then IPv6; never empty.
    pub addrs: Vec<IpAddr>,
}

/// Why a domain could not be resolved to hosts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("{domain} does not accept mail (null MX)")]
    NullMx { domain: String },
    #[error("domain {domain} does not exist")]
    NoSuchDomain { domain: String },
    #[error("no address found for the mail exchangers of {domain}")]
    NoAddress { domain: String },
    #[error("{domain:?} is not a valid domain name")]
    InvalidDomain { domain: String },
    #[error("DNS lookup for {domain} timed out")]
    Timeout { domain: String },
    #[error("DNS lookup for {domain} failed: {detail}")]
    Temporary { domain: String, detail: String },
}

impl ResolveError {
    /// Retrying later cannot help (the copy should fail, not be deferred).
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            ResolveError::NullMx { .. }
                | ResolveError::NoSuchDomain { .. }
                | ResolveError::NoAddress { .. }
                | ResolveError::InvalidDomain { .. }
        )
    }

    /// The reply recorded for the copies of this domain.
    pub fn synthetic_reply(&self) -> Reply {
        let (code, (c, s, d)) = match self {
            ResolveError::NullMx { .. } => (556, (5, 1, 10)), // RFC 7505 §4.2
            ResolveError::NoSuchDomain { .. } => (550, (5, 1, 2)),
            ResolveError::NoAddress { .. } => (550, (5, 4, 4)),
            ResolveError::InvalidDomain { .. } => (550, (5, 1, 2)),
            ResolveError::Timeout { .. } | ResolveError::Temporary { .. } => (451, (4, 4, 3)),
        };
        Reply::new(code, Some(EnhancedStatus::new(c, s, d)), self.to_string())
    }
}

/// How one DNS query failed.
pub(crate) enum Failure {
    /// The name exists but has no records of that type.
    NoData,
    NxDomain,
    Timeout,
    Other(String),
}

/// Resolves recipient domains to MX hosts. Cheap to clone; clones share the cache.
#[derive(Debug, Clone)]
pub struct MxResolver {
    pub(crate) resolver: TokioResolver,
    /// The same nameservers and limits, for DANE's DNSSEC-aware queries (which need the AD
    /// bit that hickory-resolver does not show).
    secure: SecureDns,
}

/// A hickory resolver as `[dns]` says: only `cfg.nameservers` (UDP, TCP on truncation) when
/// given, the system configuration otherwise; with the nameservers it uses and its timeout.
/// Delivery's [`MxResolver`] and `herald doctor` ask the same servers the same way. Must be
/// called inside a tokio runtime.
pub fn build_resolver(
    cfg: &ResolverConfig,
) -> Result<(TokioResolver, Vec<SocketAddr>, Duration), SetupError> {
    cfg.validate()?;
    let (config, mut opts) = if cfg.nameservers.is_empty() {
        hickory_resolver::system_conf::read_system_conf().map_err(SetupError::SystemDns)?
    } else {
        let mut group = NameServerConfigGroup::with_capacity(cfg.nameservers.len() * 2);
        for &ns in &cfg.nameservers {
            group.push(NameServerConfig::new(ns, Protocol::Udp));
            group.push(NameServerConfig::new(ns, Protocol::Tcp));
        }
        let mut opts = ResolverOpts::default();
        // Explicit servers are the whole truth (the simulator relies on this).
        opts.use_hosts_file = ResolveHosts::Never;
        (HickoryConfig::from_parts(None, vec![], group), opts)
    };
    opts.timeout = Duration::from_millis(cfg.timeout_ms);
    // hickory's `attempts` counts retries after the first try; ours counts tries.
    opts.attempts = cfg.attempts.saturating_sub(1);
    let mut nameservers: Vec<SocketAddr> = Vec::new();
    for ns in config.name_servers() {
        if !nameservers.contains(&ns.socket_addr) {
            nameservers.push(ns.socket_addr);
        }
    }
    let timeout = opts.timeout;
    let resolver = TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
        .with_options(opts)
        .build();
    Ok((resolver, nameservers, timeout))
}

impl MxResolver {
    /// Builds the resolver: only `cfg.nameservers` (UDP, TCP on truncation) when given, the
    /// system configuration otherwise. Must be called inside a tokio runtime.
    pub fn new(cfg: &ResolverConfig) -> Result<MxResolver, SetupError> {
        let (resolver, nameservers, timeout) = build_resolver(cfg)?;
        let secure = SecureDns {
            nameservers,
            timeout,
            attempts: cfg.attempts,
        };
        Ok(MxResolver { resolver, secure })
    }

    /// Where DANE sends its DNSSEC-aware queries: the nameservers this resolver uses.
    pub(crate) fn secure_dns(&self) -> SecureDns {
        self.secure.clone()
    }

    /// The hosts to try for `domain`, best first. See the module docs for the rules.
    pub async fn resolve(&self, domain: &str) -> Result<Vec<MxHost>, ResolveError> {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        let name = fqdn(&domain).ok_or_else(|| ResolveError::InvalidDomain {
            domain: domain.clone(),
        })?;
        let exchanges = match self.resolver.mx_lookup(name.clone()).await {
            Ok(mx) => mx
                .iter()
                .map(|r| (r.preference(), r.exchange().clone()))
                .collect(),
            Err(e) => match classify(&e) {
                Failure::NoData => Vec::new(),
                Failure::NxDomain => return Err(ResolveError::NoSuchDomain { domain }),
                Failure::Timeout => return Err(ResolveError::Timeout { domain }),
                Failure::Other(detail) => return Err(ResolveError::Temporary { domain, detail }),
            },
        };
        if exchanges.is_empty() {
            return self.implicit_mx(domain, name).await;
        }
        let ordered = order_exchanges(exchanges).ok_or_else(|| ResolveError::NullMx {
            domain: domain.clone(),
        })?;
        self.resolve_hosts(domain, ordered).await
    }

    /// RFC 5321 §5.1: no MX records, so the domain's own addresses.
    async fn implicit_mx(&self, domain: String, name: Name) -> Result<Vec<MxHost>, ResolveError> {
        match lookup_addrs(&self.resolver, name).await {
            Ok(addrs) if !addrs.is_empty() => Ok(vec![MxHost {
                name: domain,
                preference: 0,
                addrs,
            }]),
            Ok(_) => Err(ResolveError::NoAddress { domain }),
            Err(failure) => Err(transient(domain, failure)),
        }
    }

    /// Looks up every exchange's addresses concurrently; keeps the order given.
    async fn resolve_hosts(
        &self,
        domain: String,
        ordered: Vec<(u16, Name)>,
    ) -> Result<Vec<MxHost>, ResolveError> {
        let mut tasks = JoinSet::new();
        for (i, (preference, name)) in ordered.into_iter().enumerate() {
            let resolver = self.resolver.clone();
            tasks.spawn(async move {
                let result = lookup_addrs(&resolver, name.clone()).await;
                (i, preference, name, result)
            });
        }
        let mut found = Vec::new();
        let mut failure = None;
        while let Some(joined) = tasks.join_next().await {
            let Ok((i, preference, name, result)) = joined else {
                continue; // a panicked lookup task counts as "no address" for that host
            };
            match result {
                Ok(addrs) if !addrs.is_empty() => {
                    let name = name.to_ascii().trim_end_matches('.').to_string();
                    found.push((
                        i,
                        MxHost {
                            name,
                            preference,
                            addrs,
                        },
                    ));
                }
                Ok(_) => {}
                Err(f) => failure = Some(f),
            }
        }
        if found.is_empty() {
            return Err(match failure {
                Some(f) => transient(domain, f),
                None => ResolveError::NoAddress { domain },
            });
        }
        found.sort_by_key(|(i, _)| *i);
        Ok(found.into_iter().map(|(_, host)| host).collect())
    }
}

/// Sorts by preference with a random tie-break, drops `.` and duplicate names, bounds the count.
/// None when the set is a null MX (only `.` exchanges).
fn order_exchanges(mut exchanges: Vec<(u16, Name)>) -> Option<Vec<(u16, Name)>> {
    exchanges.retain(|(_, name)| !name.is_root());
    if exchanges.is_empty() {
        return None;
    }
    // RandomState is seeded per instance: a fresh shuffle of equal preferences on each call.
    let seed = std::collections::hash_map::RandomState::new();
    exchanges.sort_by_cached_key(|(pref, name)| (*pref, seed.hash_one(name.to_lowercase())));
    let mut seen = HashSet::new();
    exchanges.retain(|(_, name)| seen.insert(name.to_lowercase()));
    exchanges.truncate(MAX_MX_HOSTS);
    Some(exchanges)
}

/// A and AAAA for one name, concurrently. Ok(empty) when the name has neither.
pub(crate) async fn lookup_addrs(
    resolver: &TokioResolver,
    name: Name,
) -> Result<Vec<IpAddr>, Failure> {
    let (v4, v6) = tokio::join!(
        resolver.ipv4_lookup(name.clone()),
        resolver.ipv6_lookup(name)
    );
    let mut addrs: Vec<IpAddr> = Vec::new();
    let mut failure = None;
    match v4 {
        Ok(found) => addrs.extend(found.iter().map(|a| IpAddr::V4(a.0))),
        Err(e) => failure = hard_failure(classify(&e)),
    }
    match v6 {
        Ok(found) => addrs.extend(found.iter().map(|a| IpAddr::V6(a.0))),
        Err(e) => failure = failure.or(hard_failure(classify(&e))),
    }
    addrs.dedup();
    addrs.truncate(MAX_ADDRS_PER_HOST);
    match failure {
        Some(f) if addrs.is_empty() => Err(f),
        _ => Ok(addrs),
    }
}

impl Failure {
    /// For logs: what went wrong.
    pub(crate) fn describe(&self) -> String {
        match self {
            Failure::NoData => "no records".into(),
            Failure::NxDomain => "no such name".into(),
            Failure::Timeout => "timed out".into(),
            Failure::Other(detail) => detail.clone(),
        }
    }
}

/// Failures that say "try again later", as opposed to "there are no such records".
fn hard_failure(f: Failure) -> Option<Failure> {
    match f {
        Failure::NoData | Failure::NxDomain => None,
        other => Some(other),
    }
}

fn transient(domain: String, f: Failure) -> ResolveError {
    match f {
        Failure::Timeout => ResolveError::Timeout { domain },
        Failure::Other(detail) => ResolveError::Temporary { domain, detail },
        // Not produced by `hard_failure`; mapped for totality.
        Failure::NoData | Failure::NxDomain => ResolveError::NoAddress { domain },
    }
}

pub(crate) fn classify(e: &hickory_resolver::ResolveError) -> Failure {
    let Some(proto) = e.proto() else {
        return Failure::Other(e.to_string());
    };
    match proto.kind() {
        ProtoErrorKind::NoRecordsFound { response_code, .. } => match *response_code {
            ResponseCode::NXDomain => Failure::NxDomain,
            ResponseCode::NoError => Failure::NoData,
            other => Failure::Other(format!("server answered {other}")),
        },
        ProtoErrorKind::Timeout => Failure::Timeout,
        _ => Failure::Other(proto.to_string()),
    }
}

/// The domain as a fully qualified name, so no search domains are appended.
pub(crate) fn fqdn(domain: &str) -> Option<Name> {
    if domain.is_empty() || domain.parse::<IpAddr>().is_ok() {
        return None;
    }
    let mut name = Name::from_ascii(domain).ok()?;
    name.set_fqdn(true);
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::from_ascii(s).expect("name")
    }

    #[test]
    fn orders_by_preference_and_drops_duplicates() {
        let got = order_exchanges(vec![
            (20, n("b.example.")),
            (10, n("a.example.")),
            (30, n("A.example.")),
        ])
        .expect("not null");
        let names: Vec<_> = got.iter().map(|(p, n)| (*p, n.to_string())).collect();
        assert_eq!(
            names,
            vec![(10, "a.example.".into()), (20, "b.example.".into())]
        );
    }

    #[test]
    fn root_only_is_null_mx() {
        assert!(order_exchanges(vec![(0, Name::root())]).is_none());
        let mixed = order_exchanges(vec![(0, Name::root()), (5, n("mx.example."))]);
        assert_eq!(mixed.map(|v| v.len()), Some(1));
    }

    #[test]
    fn rejects_literals_and_junk() {
        assert!(fqdn("").is_none());
        assert!(fqdn("192.0.2.1").is_none());
        assert!(fqdn("example.com").is_some_and(|n| n.is_fqdn()));
    }

    #[test]
    fn permanence_and_replies() {
        let d = || "example.com".to_string();
        assert!(ResolveError::NullMx { domain: d() }.is_permanent());
        let r = ResolveError::NullMx { domain: d() }.synthetic_reply();
        assert_eq!(
            (r.code, r.enhanced.map(|e| e.to_string())),
            (556, Some("5.1.10".into()))
        );
        assert!(!ResolveError::Timeout { domain: d() }.is_permanent());
        assert!(ResolveError::Timeout { domain: d() }
            .synthetic_reply()
            .is_transient());
    }
}
