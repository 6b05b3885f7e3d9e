//! What DANE does to a domain's route (RFC 7672 §2.2). No I/O.
//!
//! * MX answer insecure: every host is kept and marked [`HostDane::Insecure`]; DANE does not
//!   apply, MTA-STS and the configured TLS rules do.
//! * MX answer failed (bogus or indeterminate): the domain's copies are deferred
//!   (`451 4.7.5`): a forged MX set must not be able to steer mail to plaintext.
//! * MX answer secure: hosts whose lookups failed are dropped (never tried, so never sent to in
//!   plaintext); if none is left, the copies are deferred (`451 4.7.5`). Hosts with usable
//!   records need DANE-authenticated TLS; the others get ordinary delivery.
//!
//! [`DaneRoute::applies`] says whether DANE decides for the domain (some kept host has usable
//! records); then MTA-STS is not applied (RFC 8461 §2).

use super::verdict::{HostDane, MxSecurity};
use crate::resolve::MxHost;
use herald_types::{EnhancedStatus, Reply};
use std::sync::Arc;

/// What DANE requires of a routed domain's connections.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DaneRoute {
    /// Whether the domain's MX answer was secure.
    pub mx_secure: bool,
    /// Each kept host's requirement, by lower-cased name, in route order.
    pub hosts: Vec<(String, HostDane)>,
    /// When the answers behind it expire (Unix seconds): the route must be looked at again by
    /// then.
    pub expires_at: u64,
}

impl DaneRoute {
    /// True when some host needs DANE-authenticated TLS: DANE decides for the domain.
    pub fn applies(&self) -> bool {
        self.hosts
            .iter()
            .any(|(_, d)| matches!(d, HostDane::Required(_)))
    }

    /// The requirement for `mx_name` (Insecure for a host the route does not know: DANE never
    /// tightens what it did not look up).
    pub fn host(&self, mx_name: &str) -> &HostDane {
        self.hosts
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(mx_name.trim_end_matches('.')))
            .map_or(&HostDane::Insecure, |(_, d)| d)
    }

    /// The TLSA records `mx_name` must be authenticated by, if any.
    pub fn tlsa_for(&self, mx_name: &str) -> Option<Arc<super::tlsa::TlsaSet>> {
        match self.host(mx_name) {
            HostDane::Required(set) => Some(set.clone()),
            _ => None,
        }
    }

    /// The destination key suffix: routes whose logs or requirements differ never share a
    /// destination (`|dane`, `|dane=none`, `|dane=insecure`).
    pub fn key_suffix(&self) -> &'static str {
        match (self.mx_secure, self.applies()) {
            (_, true) => "|dane",
            (true, false) => "|dane=none",
            (false, false) => "|dane=insecure",
        }
    }
}

/// Applies the DANE findings to `domain`'s hosts: `mx` is the MX answer's security and
/// `per_host` each host's requirement (same order as `hosts`; ignored when the MX answer is
/// not secure). `expires_at` is when the findings expire (Unix seconds). Err: the reply to
/// defer the domain's copies with.
pub fn apply(
    domain: &str,
    mx: MxSecurity,
    hosts: Vec<MxHost>,
    per_host: Vec<HostDane>,
    expires_at: u64,
) -> Result<(Vec<MxHost>, DaneRoute), Reply> {
    let defer = |text: String| Reply::new(451, Some(EnhancedStatus::new(4, 7, 5)), text);
    match mx {
        MxSecurity::Failed(why) => Err(defer(format!(
            "DANE: DNSSEC status of the MX records of {domain} unknown: {why}"
        ))),
        MxSecurity::Insecure => {
            let marks = hosts
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), HostDane::Insecure))
                .collect();
            let route = DaneRoute {
                mx_secure: false,
                hosts: marks,
                expires_at,
            };
            Ok((hosts, route))
        }
        MxSecurity::Secure => {
            let mut kept = Vec::with_capacity(hosts.len());
            let mut marks = Vec::with_capacity(hosts.len());
            let mut failures = Vec::new();
            for (host, dane) in hosts.into_iter().zip(per_host) {
                match dane {
                    HostDane::Failed(why) => failures.push(why),
                    dane => {
                        marks.push((host.name.to_ascii_lowercase(), dane));
                        kept.push(host);
                    }
                }
            }
            if kept.is_empty() {
                return Err(defer(format!(
                    "DANE: no MX host of {domain} can be used: {}",
                    failures.join("; ")
                )));
            }
            let route = DaneRoute {
                mx_secure: true,
                hosts: marks,
                expires_at,
            };
            Ok((kept, route))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dane::tlsa::{parse, TlsaSet};

    fn host(name: &str) -> MxHost {
        MxHost {
            name: name.into(),
            preference: 10,
            addrs: vec!["127.0.0.2".parse().expect("ip")],
        }
    }

    fn required() -> HostDane {
        let rdata = [&[3u8, 1, 1][..], &[0u8; 32]].concat();
        let set = TlsaSet::new(vec![parse(&rdata).expect("usable")]);
        HostDane::Required(Arc::new(set))
    }

    #[test]
    fn an_insecure_mx_keeps_every_host_and_applies_nothing() {
        let (kept, route) = apply(
            "d.example",
            MxSecurity::Insecure,
            vec![host("MX1.d.example"), host("mx2.d.example")],
            vec![required(), required()],
            100,
        )
        .expect("routed");
        assert_eq!(kept.len(), 2);
        assert!(!route.applies());
        assert_eq!(route.host("mx1.d.example."), &HostDane::Insecure);
        assert_eq!(route.key_suffix(), "|dane=insecure");
    }

    #[test]
    fn a_secure_mx_drops_failed_hosts_and_applies_when_records_are_usable() {
        let (kept, route) = apply(
            "d.example",
            MxSecurity::Secure,
            vec![
                host("mx1.d.example"),
                host("mx2.d.example"),
                host("mx3.d.example"),
            ],
            vec![
                HostDane::Failed("SERVFAIL".into()),
                required(),
                HostDane::NoRecords,
            ],
            100,
        )
        .expect("routed");
        let names: Vec<&str> = kept.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["mx2.d.example", "mx3.d.example"]);
        assert!(route.applies());
        assert!(route.tlsa_for("MX2.d.example").is_some());
        assert!(route.tlsa_for("mx3.d.example").is_none());
        assert_eq!(route.key_suffix(), "|dane");
        assert_eq!(route.host("unknown.example"), &HostDane::Insecure);
    }

    #[test]
    fn no_usable_host_or_an_unknown_mx_status_defers() {
        for (mx, hosts) in [
            (
                MxSecurity::Secure,
                vec![HostDane::Failed("SERVFAIL".into())],
            ),
            (
                MxSecurity::Failed("timed out".into()),
                vec![HostDane::NoRecords],
            ),
        ] {
            let reply =
                apply("d.example", mx, vec![host("mx.d.example")], hosts, 0).expect_err("deferred");
            assert_eq!(
                (reply.code, reply.enhanced.map(|e| e.to_string())),
                (451, Some("4.7.5".into()))
            );
            assert!(reply.text.starts_with("DANE: "), "{}", reply.text);
        }
        let (_, route) = apply(
            "d.example",
            MxSecurity::Secure,
            vec![host("mx.d.example")],
            vec![HostDane::NoRecords],
            0,
        )
        .expect("routed");
        assert_eq!((route.applies(), route.key_suffix()), (false, "|dane=none"));
    }
}
