//! `herald doctor`: what is wrong with a list domain's DNS and this server's identity, before
//! the first post lands in spam folders.
//!
//! Each check asks the configured resolvers (`[dns]`, the same servers delivery asks) and
//! gives [`Finding`]s: a severity, what was seen, and — where something must be published —
//! the exact record, in zone-file form. The checks:
//! - per list domain ([`checks::domain`]): MX (present, not null, hosts resolving, port 25
//!   answering with a 220 banner), SPF (evaluated by mail-auth for each sending address, as a
//!   receiver evaluates it for the VERP envelope sender), the DKIM key published at the
//!   configured selector (compared with the configured private key), DMARC, MTA-STS and TLS-RPT
//!   records;
//! - per sending address ([`checks::egress`]): reverse DNS, forward-confirmed reverse DNS, and
//!   the HELO name against them;
//! - the TLS certificate ([`cert`]): parses, names the host, days to expiry, chain order;
//! - the data disk ([`disk`]): room left, and whether it fills within a week at the rate the
//!   data directory grows (from the samples each run records).
//!
//! SECURITY: everything read here comes from DNS or the network and is only compared and
//! printed (control characters replaced); nothing is executed or trusted beyond that.

pub mod cert;
pub mod checks;
pub mod disk;
pub mod dns;
pub mod store;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Ok,
    /// Works, but receivers will like it less (or an optional protection is missing).
    Warn,
    /// Mail will be refused or land in spam until it is fixed.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Ok => "ok",
            Severity::Warn => "WARN",
            Severity::Error => "ERROR",
        })
    }
}

/// One result of one check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// `mx`, `spf`, `dkim`, `dmarc`, `mta-sts`, `tls-rpt`, `port25`, `rdns`, `helo`, `tls`,
    /// `store`, `disk`.
    pub check: &'static str,
    /// The domain, address or file it is about.
    pub subject: String,
    pub message: String,
    /// The record to publish (zone-file form), when publishing one fixes it.
    pub publish: Option<String>,
}

impl Finding {
    pub(crate) fn new(
        severity: Severity,
        check: &'static str,
        subject: impl Into<String>,
        message: impl Into<String>,
    ) -> Finding {
        Finding {
            severity,
            check,
            subject: printable(&subject.into()),
            message: printable(&message.into()),
            publish: None,
        }
    }

    pub(crate) fn publish(mut self, record: impl Into<String>) -> Finding {
        self.publish = Some(printable(&record.into()));
        self
    }
}

/// Text from DNS or a peer, safe to print on a terminal.
pub(crate) fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// A DKIM key the config names for a domain.
#[derive(Debug, Clone)]
pub struct DkimExpectation {
    pub selector: String,
    /// The record this key needs (`v=DKIM1; k=…; p=…`), or why the key file could not be read.
    pub record: Result<String, String>,
}

/// What to examine.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// List domains.
    pub domains: Vec<String>,
    /// The addresses copies leave from.
    pub egress: Vec<IpAddr>,
    /// `hostname` from the config: the HELO/EHLO name.
    pub helo: String,
    /// DKIM keys by domain (lower-case).
    pub dkim: std::collections::BTreeMap<String, Vec<DkimExpectation>>,
    /// `[tls] cert_file`.
    pub tls_cert: Option<PathBuf>,
    /// The port mail arrives on at the MX hosts (25 on the Internet).
    pub smtp_port: u16,
    /// Wait this long for a connection or a banner.
    pub connect_timeout: std::time::Duration,
}

/// Runs every check; findings in the order they were made (domain by domain, then the
/// sending addresses, then the certificate).
pub async fn examine(
    inputs: &Inputs,
    dns: &dns::Dns,
    auth: &herald_auth::Authenticator,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for domain in &inputs.domains {
        checks::domain(inputs, dns, auth, domain, &mut out).await;
    }
    for ip in &inputs.egress {
        checks::egress(inputs, dns, *ip, &mut out).await;
    }
    if let Some(path) = &inputs.tls_cert {
        out.extend(cert::check(path, &inputs.helo, jiff::Timestamp::now()));
    }
    out
}

/// The address this machine would send from to reach `toward` (no packet is sent: a UDP
/// socket is connected, which only picks the route and the source address).
pub fn source_address(toward: SocketAddr) -> Option<IpAddr> {
    let bind: SocketAddr = if toward.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let socket = std::net::UdpSocket::bind(bind).ok()?;
    socket.connect(toward).ok()?;
    socket.local_addr().ok().map(|a| a.ip())
}
