//! The simulated Internet: a DNS server and scripted SMTP receivers on 127.0.0.0/8, used by
//! Herald's tests, `herald demo` and the benchmarks.
//!
//! Place in the flow: outside it. Herald's delivery stage resolves MX records against
//! [`dns::DnsServer`] and delivers to the receivers a [`World`] starts; the world's
//! [`Recorder`] says what arrived, when, and whether anything arrived twice.
//!
//! - [`dns`]: an authoritative DNS server (UDP and TCP) for a [`dns::Zone`] built in code; it
//!   can also play a validating resolver for DANE (AD on signed names, SERVFAIL on bogus ones)
//!   and serve TLSA records.
//! - [`config`]: [`WorldConfig`], the TOML description of a world (domains, MX hosts, behaviour
//!   profiles), and [`GenSpec`] to generate large Zipf-shaped worlds deterministically.
//! - [`receiver`]: fast SMTP receivers with one behaviour profile per domain (normal, slow,
//!   greylisting, unknown users, throttling, hung, refused, dropping mid-DATA, STARTTLS).
//! - [`https`] and [`pki`]: an HTTPS server for MTA-STS policies and a test CA to sign its
//!   certificate.
//! - [`recorder`]: every accepted copy, rejection and connection, with duplicate detection.
//! - [`world`]: starts and stops all of the above.
//! - [`disk`]: a small tmpfs for disk-full tests (not the Internet, but the same kind of
//!   stand-in: a real filesystem that really runs out of space).
//! - [`export`]: streams the recorder to a run directory from a background thread (`herald sim run`).
//! - [`report`] and [`chart`]: delivered / missing / duplicates / failed, t50/t95/t100, and the
//!   cumulative delivery curve as PNG and SVG (`herald sim report`).
//!
//! Typical use (tests, `herald demo`, benchmarks):
//!
//! ```text
//! let cfg = WorldConfig::generate(&GenSpec { domains: 2000, ..GenSpec::default() })?;
//! let members = cfg.member_addresses(100_000);
//! let world = World::start(cfg).await?;          // DNS on world.dns_addr(), SMTP on world.smtp_port()
//! // ... point Herald at world.dns_addr() / world.smtp_port(), send a post ...
//! world.recorder().wait_for(members.len() as u64, timeout).await;
//! let snap = world.recorder().snapshot();        // accepted, duplicates, rejections, per copy
//! world.shutdown().await;
//! ```
//!
//! Invariants: nothing here binds or connects outside 127.0.0.0/8 (checked when a world or DNS
//! server starts); receivers never take 127.0.0.1, which is Herald's; every buffer and table has
//! a bound.
//!
//! Limits: receivers sustain ~60,000 msgs of 10 KB per CPU-second (SHA-256 of each message is a
//! third of that; see `examples/sink_bench.rs`); the recorder keeps every copy in memory.
//!
//! SECURITY: the receivers parse bytes from a client that is, in tests, Herald itself; they still
//! treat input as untrusted (bounded lines and messages, no panics on malformed input), because a
//! developer may point anything at a running `herald sim`.

pub mod chart;
pub mod config;
pub mod disk;
pub mod dns;
mod error;
pub mod export;
pub mod https;
pub mod pki;
pub mod receiver;
pub mod recorder;
pub mod report;
pub mod world;

pub use config::{
    DaneSpec, Dnssec, DomainConfig, Expectation, ExtraMx, GenSpec, HostSpec, Profile,
    ProfileFractions, ReceiverSettings, SmtpExtensions, TlsaData, TlsaSpec, WorldConfig,
};
pub use dns::{DnsServer, Zone};
pub use error::{ConfigError, SimError};
pub use recorder::{
    CopyRecord, HostCounters, MimeVerdict, PeerCounters, Recorder, Rejection, Snapshot,
};
pub use report::Report;
pub use world::World;

use std::net::IpAddr;

/// Refuses any address outside loopback (127.0.0.0/8, ::1), so that a mistyped config can never
/// make the simulator listen on a real interface.
pub(crate) fn ensure_loopback(ip: IpAddr) -> Result<(), SimError> {
    if ip.is_loopback() {
        Ok(())
    } else {
        Err(SimError::NotLoopback { addr: ip })
    }
}
