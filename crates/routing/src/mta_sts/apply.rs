//! What a domain's policy does to its route (RFC 8461 §4, §5). No I/O.
//!
//! * `enforce`: only MX hosts matching the policy's patterns are kept; if none matches, the
//!   domain's copies are deferred (`451 4.7.5`, naming MTA-STS) — never sent elsewhere. Every
//!   kept host must then be reached over TLS whose certificate verifies for its name
//!   ([`crate::TlsPolicy::VERIFIED`], applied by the connection).
//! * `testing`: the hosts are unchanged; those that do not match are recorded so that delivery
//!   through them can be logged and counted as a would-be failure.
//! * `none` (or no policy): nothing changes.

use super::cache::CachedPolicy;
use super::policy::Mode;
use crate::resolve::MxHost;
use herald_types::{EnhancedStatus, Reply};

/// What MTA-STS requires of a routed domain's connections.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StsRoute {
    /// `Enforce` or `Testing` (a `none` policy yields no route).
    pub mode: Mode,
    /// Testing mode: the MX hosts that do not match the policy (sorted). Empty when enforcing:
    /// those hosts were removed.
    pub unmatched: Vec<String>,
    /// When the policy expires (Unix seconds): the route must be looked at again by then.
    pub expires_at: u64,
    /// The policy's lines in canonical form: TLS reports (RFC 8460 `policy-string`) name it.
    pub policy_lines: std::sync::Arc<[String]>,
}

impl StsRoute {
    /// True when delivery through `mx_name` over this TLS would satisfy the policy.
    pub fn satisfied_by(&self, mx_name: &str, tls_verified: bool) -> bool {
        tls_verified
            && !self
                .unmatched
                .iter()
                .any(|u| u.eq_ignore_ascii_case(mx_name))
    }
}

/// Applies `policy` to `domain`'s MX hosts: the hosts to use and the route's requirements, or
/// the reply to defer the domain's copies with when an enforced policy allows none of them.
pub fn apply(
    domain: &str,
    policy: Option<&CachedPolicy>,
    hosts: Vec<MxHost>,
) -> Result<(Vec<MxHost>, Option<StsRoute>), Reply> {
    let Some(cached) = policy else {
        return Ok((hosts, None));
    };
    let p = &cached.policy;
    match p.mode {
        Mode::None => Ok((hosts, None)),
        Mode::Testing => {
            let mut unmatched: Vec<String> = hosts
                .iter()
                .filter(|h| !p.allows(&h.name))
                .map(|h| h.name.to_ascii_lowercase())
                .collect();
            unmatched.sort();
            unmatched.dedup();
            let route = StsRoute {
                mode: Mode::Testing,
                unmatched,
                expires_at: cached.expires_at(),
                policy_lines: policy_lines(p),
            };
            Ok((hosts, Some(route)))
        }
        Mode::Enforce => {
            let names: Vec<String> = hosts.iter().map(|h| h.name.clone()).collect();
            let kept: Vec<MxHost> = hosts.into_iter().filter(|h| p.allows(&h.name)).collect();
            if kept.is_empty() {
                return Err(Reply::new(
                    451,
                    Some(EnhancedStatus::new(4, 7, 5)),
                    format!(
                        "MTA-STS policy of {domain} (enforce) allows none of its MX hosts ({})",
                        names.join(", ")
                    ),
                ));
            }
            let route = StsRoute {
                mode: Mode::Enforce,
                unmatched: Vec::new(),
                expires_at: cached.expires_at(),
                policy_lines: policy_lines(p),
            };
            Ok((kept, Some(route)))
        }
    }
}

/// The policy's canonical lines, for TLS reports.
fn policy_lines(p: &super::policy::Policy) -> std::sync::Arc<[String]> {
    p.to_text().lines().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mta_sts::policy::parse;
    use std::sync::Arc;

    fn host(name: &str) -> MxHost {
        MxHost {
            name: name.into(),
            preference: 10,
            addrs: vec!["127.0.0.2".parse().expect("ip")],
        }
    }

    fn cached(mode: &str) -> CachedPolicy {
        let text = format!("version: STSv1\nmode: {mode}\nmx: *.good.example\nmax_age: 100\n");
        CachedPolicy {
            id: "1".into(),
            policy: Arc::new(parse(&text).expect("valid")),
            fetched_at: 1000,
        }
    }

    #[test]
    fn enforce_keeps_only_matching_hosts() {
        let hosts = vec![
            host("mx1.good.example"),
            host("mx.evil.example"),
            host("mx2.good.example"),
        ];
        let (kept, route) =
            apply("d.example", Some(&cached("enforce")), hosts).expect("some match");
        let names: Vec<&str> = kept.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["mx1.good.example", "mx2.good.example"]);
        let route = route.expect("route");
        assert_eq!((route.mode, route.expires_at), (Mode::Enforce, 1100));
        assert!(route.satisfied_by("mx1.good.example", true));
        assert!(!route.satisfied_by("mx1.good.example", false));
    }

    #[test]
    fn enforce_with_no_matching_host_defers() {
        let reply = apply(
            "d.example",
            Some(&cached("enforce")),
            vec![host("mx.evil.example")],
        )
        .expect_err("no host allowed");
        assert_eq!(reply.code, 451);
        assert_eq!(
            reply.enhanced.map(|e| e.to_string()).as_deref(),
            Some("4.7.5")
        );
        assert!(reply.text.contains("MTA-STS"), "{}", reply.text);
    }

    #[test]
    fn testing_keeps_every_host_and_notes_the_others() {
        let hosts = vec![host("MX.evil.example"), host("mx1.good.example")];
        let (kept, route) = apply("d.example", Some(&cached("testing")), hosts).expect("ok");
        assert_eq!(kept.len(), 2);
        let route = route.expect("route");
        assert_eq!(route.unmatched, ["mx.evil.example"]);
        assert!(!route.satisfied_by("mx.evil.example", true));
        assert!(route.satisfied_by("mx1.good.example", true));
    }

    #[test]
    fn none_or_no_policy_changes_nothing() {
        let none = cached_none();
        for p in [None, Some(&none)] {
            let (kept, route) = apply("d.example", p, vec![host("mx.any.example")]).expect("ok");
            assert_eq!((kept.len(), route), (1, None));
        }
    }

    fn cached_none() -> CachedPolicy {
        CachedPolicy {
            id: "1".into(),
            policy: Arc::new(parse("version: STSv1\nmode: none\nmax_age: 100\n").expect("valid")),
            fetched_at: 0,
        }
    }
}
