//! `[[delivery.egress]]`, `[[delivery.egress_pool]]` and `default_egress_pool`: the typed
//! configuration, checked once ([`check`]); every error names its key.

use serde::Deserialize;
use std::collections::HashSet;
use std::net::IpAddr;

/// Most sources and pools: a node has a handful of addresses; the bound keeps selection
/// (a scan of the pool) and the ledger small.
pub const MAX_SOURCES: usize = 256;
pub const MAX_POOLS: usize = 256;
/// Most days in a warm-up schedule (a year) and domain patterns per pool.
pub const MAX_WARMUP_DAYS: usize = 366;
pub const MAX_POOL_DOMAINS: usize = 1000;
/// Longest source or pool name.
pub const MAX_NAME_CHARS: usize = 64;

/// One local source address (`[[delivery.egress]]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSource {
    pub name: String,
    /// The local address connections are bound to before they connect.
    pub source: IpAddr,
    /// Connections open from this address at once, across all destinations. None: no limit
    /// of its own (the scheduler's limits still apply).
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Daily volume caps while the address warms up: copies sent on its first UTC day,
    /// second, …; no cap after the last. Empty: never capped.
    #[serde(default)]
    pub warmup: Vec<u64>,
}

/// A pool of sources (`[[delivery.egress_pool]]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressPoolConfig {
    pub name: String,
    /// Names of `[[delivery.egress]]` sources.
    pub sources: Vec<String>,
    /// Recipient domains whose copies use this pool (when their list names none): `example.com`
    /// matches that domain only, `.example.com` its subdomains and itself. The first pool that
    /// matches wins.
    #[serde(default)]
    pub domains: Vec<String>,
}

/// Everything the egress feature is configured with (the three `[delivery]` keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressConfig {
    pub sources: Vec<EgressSource>,
    pub pools: Vec<EgressPoolConfig>,
    pub default_pool: Option<String>,
}

fn check_name(key: &str, name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err(format!(
            "{key}: {name:?} must be 1 to {MAX_NAME_CHARS} ASCII letters, digits, '.', '-' or '_'"
        ));
    }
    Ok(())
}

/// Checks the egress configuration: names valid and unique, sources unique addresses with
/// sensible limits, pools naming existing sources, domain patterns plain, the default pool
/// existing.
pub fn check(cfg: &EgressConfig) -> Result<(), String> {
    if cfg.sources.len() > MAX_SOURCES {
        return Err(format!("delivery.egress: at most {MAX_SOURCES} sources"));
    }
    if cfg.pools.len() > MAX_POOLS {
        return Err(format!("delivery.egress_pool: at most {MAX_POOLS} pools"));
    }
    let mut names = HashSet::new();
    let mut addrs = HashSet::new();
    for s in &cfg.sources {
        check_name("delivery.egress.name", &s.name)?;
        if !names.insert(s.name.as_str()) {
            return Err(format!("delivery.egress.name: {:?} is used twice", s.name));
        }
        if !addrs.insert(s.source) {
            return Err(format!(
                "delivery.egress.source: {} is used twice",
                s.source
            ));
        }
        if s.source.is_unspecified() || s.source.is_multicast() {
            return Err(format!(
                "delivery.egress.source: {} is not a unicast address",
                s.source
            ));
        }
        if s.max_connections == Some(0) {
            return Err("delivery.egress.max_connections: must be at least 1".into());
        }
        if s.warmup.len() > MAX_WARMUP_DAYS {
            return Err(format!(
                "delivery.egress.warmup: at most {MAX_WARMUP_DAYS} days"
            ));
        }
        if s.warmup.contains(&0) {
            return Err(
                "delivery.egress.warmup: a day's cap must be at least 1 (leave the address out of its pools instead)"
                    .into(),
            );
        }
    }
    let mut pools = HashSet::new();
    for p in &cfg.pools {
        check_name("delivery.egress_pool.name", &p.name)?;
        if !pools.insert(p.name.as_str()) {
            return Err(format!(
                "delivery.egress_pool.name: {:?} is used twice",
                p.name
            ));
        }
        if p.sources.is_empty() {
            return Err(format!(
                "delivery.egress_pool.sources: pool {:?} has no source",
                p.name
            ));
        }
        for s in &p.sources {
            if !names.contains(s.as_str()) {
                return Err(format!(
                    "delivery.egress_pool.sources: pool {:?} names {s:?}, which is not a [[delivery.egress]] name",
                    p.name
                ));
            }
        }
        if p.domains.len() > MAX_POOL_DOMAINS {
            return Err(format!(
                "delivery.egress_pool.domains: at most {MAX_POOL_DOMAINS} per pool"
            ));
        }
        for d in &p.domains {
            let bare = d.strip_prefix('.').unwrap_or(d);
            if bare.is_empty()
                || bare.len() > 253
                || !bare
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
            {
                return Err(format!(
                    "delivery.egress_pool.domains: {d:?} is not a domain or .suffix"
                ));
            }
        }
    }
    if let Some(d) = &cfg.default_pool {
        if !pools.contains(d.as_str()) {
            return Err(format!(
                "delivery.default_egress_pool: {d:?} is not a [[delivery.egress_pool]] name"
            ));
        }
    }
    Ok(())
}

/// True when `domain` matches `pattern` (see [`EgressPoolConfig::domains`]), ASCII case
/// folded.
pub(crate) fn domain_matches(pattern: &str, domain: &str) -> bool {
    let domain = domain.trim_end_matches('.');
    match pattern.strip_prefix('.') {
        Some(suffix) => {
            domain.eq_ignore_ascii_case(suffix)
                || (domain.len() > suffix.len()
                    && domain.is_char_boundary(domain.len() - suffix.len() - 1)
                    && domain[domain.len() - suffix.len() - 1..]
                        .eq_ignore_ascii_case(&format!(".{suffix}")))
        }
        None => domain.eq_ignore_ascii_case(pattern),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(name: &str, ip: &str) -> EgressSource {
        EgressSource {
            name: name.into(),
            source: ip.parse().expect("ip"),
            max_connections: Some(2),
            warmup: vec![10, 20],
        }
    }

    fn pool(name: &str, sources: &[&str]) -> EgressPoolConfig {
        EgressPoolConfig {
            name: name.into(),
            sources: sources.iter().map(|s| s.to_string()).collect(),
            domains: vec![],
        }
    }

    #[test]
    fn a_good_configuration_passes() {
        let cfg = EgressConfig {
            sources: vec![src("a", "127.0.0.5"), src("b", "127.0.0.6")],
            pools: vec![pool("main", &["a", "b"]), pool("one", &["a"])],
            default_pool: Some("main".into()),
        };
        check(&cfg).expect("valid");
        check(&EgressConfig::default()).expect("empty is valid");
    }

    /// Hostile and inconsistent configurations are refused, each naming its key.
    #[test]
    fn bad_configurations_name_their_key() {
        let base = || EgressConfig {
            sources: vec![src("a", "127.0.0.5"), src("b", "127.0.0.6")],
            pools: vec![pool("main", &["a", "b"])],
            default_pool: None,
        };
        let mut cases: Vec<(EgressConfig, &str)> = Vec::new();
        let mut c = base();
        c.sources[1].name = "a".into();
        cases.push((c, "delivery.egress.name"));
        let mut c = base();
        c.sources[1].source = "127.0.0.5".parse().expect("ip");
        cases.push((c, "delivery.egress.source"));
        let mut c = base();
        c.sources[0].source = "0.0.0.0".parse().expect("ip");
        cases.push((c, "delivery.egress.source"));
        let mut c = base();
        c.sources[0].name = "a b\r\n".into();
        cases.push((c, "delivery.egress.name"));
        let mut c = base();
        c.sources[0].max_connections = Some(0);
        cases.push((c, "delivery.egress.max_connections"));
        let mut c = base();
        c.sources[0].warmup = vec![5, 0];
        cases.push((c, "delivery.egress.warmup"));
        let mut c = base();
        c.sources[0].warmup = vec![1; 400];
        cases.push((c, "delivery.egress.warmup"));
        let mut c = base();
        c.pools[0].sources.push("nope".into());
        cases.push((c, "delivery.egress_pool.sources"));
        let mut c = base();
        c.pools[0].sources.clear();
        cases.push((c, "delivery.egress_pool.sources"));
        let mut c = base();
        c.pools.push(pool("main", &["a"]));
        cases.push((c, "delivery.egress_pool.name"));
        let mut c = base();
        c.pools[0].domains = vec!["*.evil\n".into()];
        cases.push((c, "delivery.egress_pool.domains"));
        let mut c = base();
        c.pools[0].domains = vec![".".into()];
        cases.push((c, "delivery.egress_pool.domains"));
        let mut c = base();
        c.default_pool = Some("other".into());
        cases.push((c, "delivery.default_egress_pool"));
        for (c, key) in cases {
            let e = check(&c).expect_err(key);
            assert!(e.starts_with(key), "{key}: {e}");
        }
    }

    #[test]
    fn domain_patterns() {
        assert!(domain_matches("example.com", "EXAMPLE.com"));
        assert!(!domain_matches("example.com", "mx.example.com"));
        assert!(domain_matches(".example.com", "example.com"));
        assert!(domain_matches(".example.com", "a.b.example.com."));
        assert!(!domain_matches(".example.com", "badexample.com"));
        assert!(!domain_matches(".example.com", "com"));
        // A suffix that would cut a UTF-8 character in two is no match (and no panic).
        assert!(!domain_matches(".xample.com", "éxample.com"));
    }
}
