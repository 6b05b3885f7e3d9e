//! [`WorldConfig`]: what the simulated Internet consists of — its domains, their MX hosts on
//! loopback addresses, and how each host behaves — read from TOML or generated.
//!
//! ```toml
//! smtp_port = 2525                 # every receiver listens here, on its own address; 0 = pick one
//! dns_addr = "127.0.0.1:0"         # the DNS server; port 0 = pick one
//!
//! [receiver]
//! check_mime_every = 1             # fully MIME-check 1 in N messages, line-check the rest
//! keep_messages = false            # keep the bytes of accepted messages in the recorder
//! tls_ca = false                   # STARTTLS certificates issued by the world's CA, per host
//!
//! [[domains]]
//! name = "bigmail.example"
//! mx_addr = "127.1.0.1"            # mx_host defaults to "mx.<name>"
//! weight = 50                      # relative share of members (WorldConfig::member_addresses)
//! starttls = true
//! profile = { kind = "throttle", max_msgs_per_conn = 100 }
//! extra_mx = [{ host = "mx2.bigmail.example", addr = "127.1.0.2", preference = 20 }]
//! dnssec = "signed"                # "unsigned" (default), "signed" or "bogus"
//! tlsa = [{ usage = 3, selector = 1, matching = 1 }]   # data omitted: the receivers' key
//! tlsa_bogus = false               # true: the TLSA answers alone are bogus (SERVFAIL)
//! ```
//!
//! DANE keys (see [`DaneSpec`]): `dnssec` says how a validating resolver would report the
//! domain's zone — its names *and its MX hosts' names* (the world has no separate zones for
//! hosts): `signed` answers carry the AD bit when DNSSEC is asked for, `bogus` answers are
//! SERVFAIL. `tlsa` records are published at `_<smtp_port>._tcp.<mx host>` for every MX host
//! of the domain; `data` is hex, or omitted to publish the receivers' own certificate
//! (selector 0; with `tls_ca`, the CA's) or key (selector 1) in the given matching type. `tlsa_bogus` (needs
//! `dnssec = "signed"`) makes only those TLSA names answer SERVFAIL.
//!
//! Profiles (`kind` plus its keys): `normal`; `slow` {`delay_ms`}; `greylist`
//! {`retry_after_secs`, `announce` (default false)}; `unknown_users` {`users` and/or
//! `fraction`}; `throttle` {`max_msgs_per_conn` and/or `max_msgs_per_min`}; `hung`; `refused`;
//! `drop_mid_data` {`after_msgs`, default 0}; `drop_first_attempt`; `rate_limited`
//! {`budget`, `msgs_per_sec`, `max_msgs_per_conn`}; `tarpit` {`byte_delay_ms`,
//! `max_sessions`}.
//!
//! An `extra_mx` entry whose `host` is a name the domain already uses (the primary's or another
//! entry's) is one more address (A record) of that host, not another MX record: a host name with
//! several addresses of which some are dead (`refused`, `hung`) is written that way.
//!
//! Invariants (checked once, by [`WorldConfig::from_toml`] and [`WorldConfig::validate`]): every
//! address is in 127.0.0.0/8 and no receiver uses 127.0.0.1 (reserved for Herald itself); domain
//! names are unique; one address is one host with one behaviour. Every error names its key.
//!
//! SECURITY: a world file is operator input; validation is what keeps a mistyped address from
//! making the simulator listen on a real interface.

mod generate;
mod raw;

pub use generate::{GenSpec, ProfileFractions};

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use crate::{ConfigError, SimError};

/// Default SMTP port of the receivers (an unprivileged stand-in for 25).
pub const DEFAULT_SMTP_PORT: u16 = 2525;
/// Default MX preference of a domain's primary MX.
pub const DEFAULT_MX_PREFERENCE: u16 = 10;

/// The whole simulated Internet.
#[derive(Debug, Clone, PartialEq)]
pub struct WorldConfig {
    /// Port every receiver listens on, each on its own loopback address. 0 picks a port that is
    /// free on all of them (tests running in parallel each get their own).
    pub smtp_port: u16,
    /// Where the DNS server listens (127.0.0.0/8; port 0 picks one).
    pub dns_addr: SocketAddr,
    /// Settings shared by all receivers.
    pub receiver: ReceiverSettings,
    /// The domains, in rank order for generated worlds (biggest first).
    pub domains: Vec<DomainConfig>,
}

/// Settings shared by every receiver.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReceiverSettings {
    /// Fully check one in N accepted messages (mail-parser: MIME structure) and the rest only at
    /// line level (CRLF, line length, header syntax); 1 = all fully, 0 = no checks. The full
    /// check costs more than receiving (~30k msgs/s of 10 KB vs ~75k); benchmarks sample
    /// (e.g. 100) to keep the receivers far faster than the sender they measure.
    pub check_mime_every: u32,
    /// Keep the bytes of every accepted message in the recorder (tests that inspect content).
    pub keep_messages: bool,
    /// Largest message accepted (advertised as SIZE); larger ones get 552 5.3.4.
    pub max_message_bytes: usize,
    /// Most recipients in one transaction; more get 452 4.5.3.
    pub max_recipients: usize,
    /// Most concurrent sessions per host; more get 421 4.3.2 at connect.
    pub max_sessions_per_host: usize,
    /// A session idle for this long is closed with 421 4.4.2.
    pub idle_timeout_secs: u64,
    /// STARTTLS hosts present a certificate for their own name issued by the world's CA
    /// (exported as `ca.pem`) instead of one self-signed certificate naming them all.
    pub tls_ca: bool,
}

impl Default for ReceiverSettings {
    fn default() -> Self {
        ReceiverSettings {
            check_mime_every: 1,
            keep_messages: false,
            max_message_bytes: 64 * 1024 * 1024,
            max_recipients: 1000,
            max_sessions_per_host: 1000,
            idle_timeout_secs: 300,
            tls_ca: false,
        }
    }
}

/// One domain of the simulated Internet.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainConfig {
    /// The domain name (lower case).
    pub name: String,
    /// Relative share of members given to this domain by [`WorldConfig::member_addresses`].
    pub weight: f64,
    /// The primary MX host name (default `mx.<name>`).
    pub mx_host: String,
    /// The primary MX's address (127.0.0.0/8, not 127.0.0.1).
    pub mx_addr: Ipv4Addr,
    /// The primary MX's preference.
    pub mx_preference: u16,
    /// Further MX hosts (each may behave differently, e.g. a hung primary and a working backup).
    pub extra_mx: Vec<ExtraMx>,
    /// How the MX host(s) behave.
    pub profile: Profile,
    /// Whether the host(s) offer STARTTLS (with a self-signed certificate).
    pub starttls: bool,
    /// DNSSEC status and TLSA records (DANE).
    pub dane: DaneSpec,
    /// Which optional SMTP extensions the host(s) offer (SMTPUTF8, DSN).
    pub extensions: SmtpExtensions,
}

/// Optional SMTP extensions a receiver offers, beyond PIPELINING, 8BITMIME, SIZE,
/// ENHANCEDSTATUSCODES (always) and STARTTLS (`starttls`).
///
/// The default offers SMTPUTF8 (RFC 6531) and not DSN (RFC 3461), as the largest mailbox
/// providers do today: Gmail and Outlook offer SMTPUTF8, and so does Postfix out of the box;
/// Gmail offers no DSN. A host without SMTPUTF8 answers a UTF-8 path `553 5.6.7` and the
/// SMTPUTF8 parameter `555`; a host without DSN answers the DSN parameters `555`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmtpExtensions {
    /// RFC 6531: UTF-8 envelopes accepted with `MAIL FROM:<…> SMTPUTF8`.
    pub smtputf8: bool,
    /// RFC 3461: `RET`/`ENVID`/`NOTIFY`/`ORCPT` accepted and recorded with each copy.
    pub dsn: bool,
}

impl Default for SmtpExtensions {
    fn default() -> Self {
        SmtpExtensions {
            smtputf8: true,
            dsn: false,
        }
    }
}

/// What a domain publishes for DANE (RFC 7672).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DaneSpec {
    /// How a validating resolver reports the domain's zone (and its MX hosts' names).
    pub dnssec: Dnssec,
    /// TLSA records published for each MX host of the domain.
    pub tlsa: Vec<TlsaSpec>,
    /// The TLSA answers alone are bogus (SERVFAIL) in an otherwise signed zone.
    pub tlsa_bogus: bool,
}

/// DNSSEC status of a domain's zone, as a validating resolver in front of it would report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dnssec {
    /// Not signed: answers never carry AD.
    #[default]
    Unsigned,
    /// Signed and valid: answers carry AD when the query asks for DNSSEC.
    Signed,
    /// Signed with signatures that do not validate: every query answers SERVFAIL.
    Bogus,
}

/// One TLSA record to publish. Parameters may be any octet, so that unusable records can be
/// published too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsaSpec {
    pub usage: u8,
    pub selector: u8,
    pub matching: u8,
    pub data: TlsaData,
}

/// The certificate association data of a [`TlsaSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsaData {
    /// Computed at start from the receivers' certificate (selector 0) or its key (selector 1)
    /// with the record's matching type (0 full, 1 SHA-256, 2 SHA-512).
    Receiver,
    /// These octets, as given.
    Bytes(Vec<u8>),
}

/// Longest TLSA data accepted in a world file (the delivery side's own limit is 16 KiB too).
pub const MAX_TLSA_DATA: usize = 16 * 1024;

/// A further MX host of a domain.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraMx {
    /// Host name.
    pub host: String,
    /// Address (127.0.0.0/8, not 127.0.0.1).
    pub addr: Ipv4Addr,
    /// MX preference (lower is tried first).
    pub preference: u16,
    /// Behaviour; `None` means the domain's profile.
    pub profile: Option<Profile>,
}

/// How a receiver host behaves.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Profile {
    /// Accepts everything, as fast as it can.
    #[default]
    Normal,
    /// Waits `delay` before each reply (the banner included).
    Slow { delay: Duration },
    /// `451 4.7.1` to the first attempt of each sender/recipient pair; accepted once
    /// `retry_after` has passed since that first attempt. With `announce` the reply says the
    /// interval ("please retry in 60 seconds"), as some greylisting servers do and others not.
    Greylist {
        retry_after: Duration,
        announce: bool,
    },
    /// `550 5.1.1` for the listed local parts (case-insensitive) and for a deterministic
    /// `fraction` of all others (chosen by a hash of the local part, so retries agree).
    UnknownUsers { users: Vec<String>, fraction: f64 },
    /// `421 4.7.28` (and the connection closed) at the MAIL after `max_msgs_per_conn` messages
    /// on one connection; `452 4.5.3` to recipients beyond `max_msgs_per_min` accepted copies
    /// in the current minute on this host.
    Throttle {
        max_msgs_per_conn: Option<u32>,
        max_msgs_per_min: Option<u32>,
    },
    /// Accepts TCP connections and never sends a banner; holds them open.
    Hung,
    /// Nothing listens on the address: connections are refused.
    Refused,
    /// Accepts `after_msgs` messages per connection, then closes the connection right after
    /// its `354` to the next DATA.
    DropMidData { after_msgs: u32 },
    /// Closes the connection right after the `354` of a transaction with a recipient it has
    /// not seen before (each recipient's first attempt), and accepts every later attempt.
    DropFirstAttempt,
    /// A large provider's rate limit: every host with the same `budget` name draws on one
    /// token bucket of `msgs_per_sec` (a second's worth of burst); a MAIL past it gets
    /// `451 4.7.28` ("unusual rate"), and the MAIL after `max_msgs_per_conn` messages on one
    /// connection gets `421 4.7.28` and the connection is closed.
    RateLimited {
        budget: String,
        msgs_per_sec: u32,
        max_msgs_per_conn: Option<u32>,
    },
    /// A tarpit: answers everything correctly, but writes every reply (the banner included) one
    /// byte at a time, `byte_delay` before each byte — slow but steady, so a banner takes
    /// seconds and a transaction tens of seconds. At most `max_sessions` sessions at once
    /// (more get `421 4.3.2` at connect), when set.
    Tarpit {
        byte_delay: Duration,
        max_sessions: Option<u32>,
    },
}

impl Profile {
    /// The profile's `kind` word, as world files write it.
    pub fn kind(&self) -> &'static str {
        match self {
            Profile::Normal => "normal",
            Profile::Slow { .. } => "slow",
            Profile::Greylist { .. } => "greylist",
            Profile::UnknownUsers { .. } => "unknown_users",
            Profile::Throttle { .. } => "throttle",
            Profile::Hung => "hung",
            Profile::Refused => "refused",
            Profile::DropMidData { .. } => "drop_mid_data",
            Profile::DropFirstAttempt => "drop_first_attempt",
            Profile::RateLimited { .. } => "rate_limited",
            Profile::Tarpit { .. } => "tarpit",
        }
    }
}

/// One receiver host: an address with a name and a behaviour. Several domains may share one.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSpec {
    /// Host name (as published in MX records).
    pub name: String,
    /// Its loopback address.
    pub addr: Ipv4Addr,
    /// Its behaviour.
    pub profile: Profile,
    /// Whether it offers STARTTLS.
    pub starttls: bool,
    /// Optional extensions it offers (its domain's; the first domain naming a host decides).
    pub extensions: SmtpExtensions,
}

/// What a delivery to one address should end as, by the world's design (for reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    /// Deliverable, perhaps after deferrals (greylisting, throttling, dropped connections).
    Deliverable,
    /// Rejected permanently (550 5.1.1).
    UnknownUser,
    /// No MX host of the domain ever accepts mail (hung, refused, drops every message).
    Unreachable,
    /// The domain is not part of the world (NXDOMAIN).
    NoSuchDomain,
}

impl WorldConfig {
    /// An empty world: default port and DNS address, default receiver settings, no domains.
    pub fn empty() -> WorldConfig {
        WorldConfig {
            smtp_port: DEFAULT_SMTP_PORT,
            dns_addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            receiver: ReceiverSettings::default(),
            domains: Vec::new(),
        }
    }

    /// Parses and checks a world from TOML. Errors name the offending key.
    pub fn from_toml(text: &str) -> Result<WorldConfig, ConfigError> {
        raw::parse(text)
    }

    /// Reads a world file.
    pub fn from_file(path: &Path) -> Result<WorldConfig, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::ReadConfig {
            path: path.display().to_string(),
            source,
        })?;
        Ok(WorldConfig::from_toml(&text)?)
    }

    /// Writes the world as TOML (what [`WorldConfig::from_toml`] reads back).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        raw::render(self)
    }

    /// Checks a world built in code with the same rules as a parsed one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        raw::validate(self)
    }

    /// The receiver hosts, one per distinct address, in order of first appearance.
    pub fn hosts(&self) -> Vec<HostSpec> {
        let mut seen: HashMap<Ipv4Addr, usize> = HashMap::new();
        let mut out: Vec<HostSpec> = Vec::new();
        for d in &self.domains {
            let primary = (d.mx_host.as_str(), d.mx_addr, &d.profile);
            let extras = d.extra_mx.iter().map(|x| {
                let profile = x.profile.as_ref().unwrap_or(&d.profile);
                (x.host.as_str(), x.addr, profile)
            });
            for (name, addr, profile) in std::iter::once(primary).chain(extras) {
                seen.entry(addr).or_insert_with(|| {
                    out.push(HostSpec {
                        name: name.to_string(),
                        addr,
                        profile: profile.clone(),
                        starttls: d.starttls,
                        extensions: d.extensions,
                    });
                    out.len() - 1
                });
            }
        }
        out
    }

    /// The domain an address belongs to, if it is part of the world.
    pub fn domain_of(&self, address: &str) -> Option<&DomainConfig> {
        let (_, domain) = address.rsplit_once('@')?;
        let domain = domain.to_ascii_lowercase();
        self.domains.iter().find(|d| d.name == domain)
    }

    /// What delivery to `address` should end as by design (ignoring transient failures).
    /// Finds the domain by a linear scan; [`crate::World::expectation`] uses an index.
    pub fn expectation(&self, address: &str) -> Expectation {
        match self.domain_of(address) {
            Some(domain) => domain.expectation(address),
            None => Expectation::NoSuchDomain,
        }
    }
}

impl DomainConfig {
    /// What delivery to `address` (in this domain) should end as by design: deliverable if any
    /// MX host can accept it.
    pub fn expectation(&self, address: &str) -> Expectation {
        let local = address.rsplit_once('@').map_or(address, |(l, _)| l);
        let profiles = std::iter::once(&self.profile).chain(
            self.extra_mx
                .iter()
                .map(|x| x.profile.as_ref().unwrap_or(&self.profile)),
        );
        let mut best = Expectation::Unreachable;
        for p in profiles {
            match p {
                Profile::Hung | Profile::Refused | Profile::DropMidData { after_msgs: 0 } => {}
                Profile::UnknownUsers { users, fraction }
                    if is_unknown(local, users, *fraction) =>
                {
                    best = Expectation::UnknownUser;
                }
                _ => return Expectation::Deliverable,
            }
        }
        best
    }
}

/// Whether the unknown-users profile rejects `local`: listed (case-insensitive), or in the
/// `fraction` picked by a stable hash of the lower-cased local part.
pub fn is_unknown(local: &str, users: &[String], fraction: f64) -> bool {
    if users.iter().any(|u| u.eq_ignore_ascii_case(local)) {
        return true;
    }
    if fraction <= 0.0 {
        return false;
    }
    // FNV-1a: stable across builds and platforms, unlike std's RandomState hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in local.bytes() {
        h ^= u64::from(b.to_ascii_lowercase());
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % 1_000_000) < (fraction * 1_000_000.0) as u64
}
