//! [`World`]: starts the DNS server and the receivers of a [`WorldConfig`], and stops them.
//!
//! The zone is derived from the config: for each domain, MX records for its primary and extra
//! MX hosts, and an A record per host; for DANE, the domain's DNSSEC marking (its own names and
//! its MX hosts') and TLSA records at `_<smtp port>._tcp.<mx host>`, those without data computed
//! from the receivers' certificate. Herald is pointed at [`World::dns_addr`] and delivers on
//! [`World::smtp_port`]; what arrives is in [`World::recorder`].
//!
//! Invariants: nothing binds outside 127.0.0.0/8; receivers never use 127.0.0.1 (Herald's own
//! address); the recorder's clock starts when the world does.
//!
//! SECURITY: see the crate docs; the config is validated again here, whatever built it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use crate::config::{Dnssec, DomainConfig, Expectation, HostSpec, TlsaData, TlsaSpec, WorldConfig};
use crate::dns::{DnsServer, Zone};
use crate::receiver::Receivers;
use crate::{Recorder, SimError};

/// A running simulated Internet.
pub struct World {
    config: WorldConfig,
    dns: DnsServer,
    receivers: Receivers,
    recorder: Recorder,
    /// Domain name → index in `config.domains`, for per-address lookups over large member lists.
    domain_index: HashMap<String, usize>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("dns_addr", &self.dns.local_addr())
            .field("smtp_port", &self.receivers.port)
            .field("domains", &self.config.domains.len())
            .finish()
    }
}

/// What TLSA records without data are computed from: the receivers' certificate and key.
#[derive(Debug, Clone, Copy)]
pub struct ReceiverCert<'a> {
    /// The DER certificate (selector 0).
    pub der: &'a [u8],
    /// Its DER SubjectPublicKeyInfo (selector 1).
    pub spki_der: &'a [u8],
}

/// The DNS zone a world publishes, with TLSA owner names for `config.smtp_port` (resolved, not
/// 0) and computed TLSA data from `cert` (records that need it are left out without one;
/// validation makes sure a started world has it).
pub fn zone_of(config: &WorldConfig, cert: Option<ReceiverCert<'_>>) -> Zone {
    let mut zone = Zone::new();
    for d in &config.domains {
        zone.add_mx(&d.name, d.mx_preference, &d.mx_host);
        zone.add_a(&d.mx_host, d.mx_addr);
        let mut named = vec![d.mx_host.as_str()];
        for x in &d.extra_mx {
            // A name already used is one more address of that host, not another MX record.
            if !named.iter().any(|n| n.eq_ignore_ascii_case(&x.host)) {
                zone.add_mx(&d.name, x.preference, &x.host);
                named.push(&x.host);
            }
            zone.add_a(&x.host, x.addr);
        }
        publish_dane(&mut zone, config.smtp_port, d, cert);
    }
    zone
}

/// A domain's DNSSEC marking and TLSA records (see the config docs for the meaning).
fn publish_dane(zone: &mut Zone, port: u16, d: &DomainConfig, cert: Option<ReceiverCert<'_>>) {
    let hosts: Vec<&str> = std::iter::once(d.mx_host.as_str())
        .chain(d.extra_mx.iter().map(|x| x.host.as_str()))
        .collect();
    let marked = std::iter::once(d.name.as_str()).chain(hosts.iter().copied());
    match d.dane.dnssec {
        Dnssec::Unsigned => {}
        Dnssec::Signed => marked.for_each(|n| {
            zone.set_signed(n, true);
        }),
        Dnssec::Bogus => marked.for_each(|n| {
            zone.set_bogus(n, true);
        }),
    }
    for host in hosts {
        let owner = format!("_{port}._tcp.{host}");
        for t in &d.dane.tlsa {
            let data = match &t.data {
                TlsaData::Bytes(b) => b.clone(),
                TlsaData::Receiver => match cert.and_then(|c| computed_tlsa(t, c)) {
                    Some(b) => b,
                    None => continue,
                },
            };
            zone.add_tlsa(&owner, t.usage, t.selector, t.matching, &data);
        }
        if d.dane.tlsa_bogus {
            zone.set_servfail(&owner, true);
        }
    }
}

/// The association data naming the receivers' certificate or key; None for parameters that
/// name neither (validation refuses those).
fn computed_tlsa(t: &TlsaSpec, cert: ReceiverCert<'_>) -> Option<Vec<u8>> {
    use sha2::{Digest, Sha256, Sha512};
    let selected = match t.selector {
        0 => cert.der,
        1 => cert.spki_der,
        _ => return None,
    };
    match t.matching {
        0 => Some(selected.to_vec()),
        1 => Some(Sha256::digest(selected).to_vec()),
        2 => Some(Sha512::digest(selected).to_vec()),
        _ => None,
    }
}

impl World {
    /// Validates `config`, starts the receivers (resolving `smtp_port = 0` to a free port) and
    /// the DNS server.
    pub async fn start(config: WorldConfig) -> Result<World, SimError> {
        config.validate()?;
        let recorder = Recorder::new();
        let hosts = config.hosts();
        let receivers =
            Receivers::start(&hosts, config.smtp_port, &config.receiver, &recorder).await?;
        let mut config = config;
        config.smtp_port = receivers.port;
        let cert = match (&receivers.certificate_der, &receivers.spki_der) {
            (Some(der), Some(spki_der)) => Some(ReceiverCert { der, spki_der }),
            _ => None,
        };
        let zone = zone_of(&config, cert);
        let dns = match DnsServer::start(config.dns_addr, zone).await {
            Ok(dns) => dns,
            Err(e) => {
                receivers.shutdown().await;
                return Err(e);
            }
        };
        let domain_index = (config.domains.iter().enumerate())
            .map(|(i, d)| (d.name.clone(), i))
            .collect();
        Ok(World {
            domain_index,
            config,
            dns,
            receivers,
            recorder,
        })
    }

    /// Where the DNS server listens (UDP and TCP).
    pub fn dns_addr(&self) -> SocketAddr {
        self.dns.local_addr()
    }

    /// The port every receiver listens on.
    pub fn smtp_port(&self) -> u16 {
        self.receivers.port
    }

    /// The record of everything received.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// The config the world runs (with `smtp_port` resolved).
    pub fn config(&self) -> &WorldConfig {
        &self.config
    }

    /// The DNS server, e.g. to change the zone while running.
    pub fn dns(&self) -> &DnsServer {
        &self.dns
    }

    /// The receiver hosts.
    pub fn hosts(&self) -> Vec<HostSpec> {
        self.config.hosts()
    }

    /// The domain config of `domain` (case-insensitive).
    pub fn domain(&self, domain: &str) -> Option<&DomainConfig> {
        let i = self.domain_index.get(&domain.to_ascii_lowercase())?;
        self.config.domains.get(*i)
    }

    /// The primary MX address of `domain`, with the SMTP port.
    pub fn mx_addr(&self, domain: &str) -> Option<SocketAddr> {
        let d = self.domain(domain)?;
        Some(SocketAddr::new(IpAddr::V4(d.mx_addr), self.smtp_port()))
    }

    /// What delivery to `address` should end as by design.
    pub fn expectation(&self, address: &str) -> Expectation {
        let domain = address.rsplit_once('@').map_or("", |(_, d)| d);
        match self.domain(domain) {
            Some(d) => d.expectation(address),
            None => Expectation::NoSuchDomain,
        }
    }

    /// The DER of the self-signed certificate STARTTLS hosts present, if any offers STARTTLS
    /// (with `[receiver] tls_ca`: the CA's certificate).
    pub fn tls_certificate_der(&self) -> Option<&[u8]> {
        self.receivers.certificate_der.as_deref()
    }

    /// The world's CA certificate (PEM) when `[receiver] tls_ca` has it issue the STARTTLS
    /// hosts' certificates: what a verifying sender is told to trust.
    pub fn tls_ca_pem(&self) -> Option<&str> {
        self.receivers.ca_pem.as_deref()
    }

    /// The DER SubjectPublicKeyInfo of that certificate (what a TLSA `3 1 x` record names).
    pub fn tls_spki_der(&self) -> Option<&[u8]> {
        self.receivers.spki_der.as_deref()
    }

    /// Stops the receivers and the DNS server and waits until their sockets are closed. The
    /// recorder (a clone of it) stays readable.
    pub async fn shutdown(self) {
        self.receivers.shutdown().await;
        self.dns.shutdown().await;
    }
}
