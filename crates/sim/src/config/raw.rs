//! The TOML shape of a world and its conversion to and from [`WorldConfig`].
//!
//! Two layers, so that every error names its key: serde (through serde_path_to_error) reads flat
//! "raw" structs and reports type errors, unknown and missing keys with their full path; the
//! conversion then checks meaning (profile keys that fit the kind, loopback addresses, unique
//! names) and builds the typed config, naming keys the same way.
//!
//! SECURITY: a world file may come from anywhere; nothing here panics on bad input, and no
//! address outside 127.0.0.0/8 survives validation.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::{
    DaneSpec, Dnssec, DomainConfig, ExtraMx, Profile, ReceiverSettings, SmtpExtensions, TlsaData,
    TlsaSpec, WorldConfig, DEFAULT_MX_PREFERENCE, DEFAULT_SMTP_PORT, MAX_TLSA_DATA,
};
use crate::ConfigError;

/// Longest greylisting interval accepted (a day): anything longer is a typo.
const MAX_RETRY_AFTER_SECS: f64 = 86_400.0;
/// Longest per-byte delay of a tarpit (a minute a byte: a banner takes half an hour).
const MAX_TARPIT_BYTE_DELAY: Duration = Duration::from_secs(60);

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorld {
    #[serde(default = "default_smtp_port")]
    smtp_port: u16,
    #[serde(default = "default_dns_addr")]
    dns_addr: String,
    #[serde(default)]
    receiver: ReceiverSettings,
    #[serde(default)]
    domains: Vec<RawDomain>,
}

fn default_smtp_port() -> u16 {
    DEFAULT_SMTP_PORT
}

fn default_dns_addr() -> String {
    "127.0.0.1:0".to_string()
}

fn default_weight() -> f64 {
    1.0
}

fn default_preference() -> u16 {
    DEFAULT_MX_PREFERENCE
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDomain {
    name: String,
    #[serde(default = "default_weight")]
    weight: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mx_host: Option<String>,
    mx_addr: String,
    #[serde(default = "default_preference")]
    mx_preference: u16,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    extra_mx: Vec<RawExtraMx>,
    #[serde(default)]
    profile: RawProfile,
    #[serde(default)]
    starttls: bool,
    #[serde(default, skip_serializing_if = "is_unsigned")]
    dnssec: RawDnssec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tlsa: Vec<RawTlsa>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    tlsa_bogus: bool,
    /// Offers SMTPUTF8 (default yes: see `SmtpExtensions`).
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    smtputf8: bool,
    /// Offers DSN (default no).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    dsn: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

#[derive(Serialize, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum RawDnssec {
    #[default]
    Unsigned,
    Signed,
    Bogus,
}

fn is_unsigned(d: &RawDnssec) -> bool {
    *d == RawDnssec::Unsigned
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTlsa {
    usage: u8,
    selector: u8,
    matching: u8,
    /// Hex; absent: computed from the receivers' certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExtraMx {
    host: String,
    addr: String,
    #[serde(default = "default_preference")]
    preference: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    profile: Option<RawProfile>,
}

#[derive(Serialize, Deserialize, Default, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
enum Kind {
    #[default]
    Normal,
    Slow,
    Greylist,
    UnknownUsers,
    Throttle,
    Hung,
    Refused,
    DropMidData,
    DropFirstAttempt,
    RateLimited,
    Tarpit,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_after_secs: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    users: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fraction: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_msgs_per_conn: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_msgs_per_min: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after_msgs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    announce: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    budget: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    msgs_per_sec: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    byte_delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_sessions: Option<u32>,
}

/// Parses TOML text into a checked [`WorldConfig`].
pub(super) fn parse(text: &str) -> Result<WorldConfig, ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax(e.to_string().trim().to_string()))?;
    let raw: RawWorld = serde_path_to_error::deserialize(toml::Value::Table(table))
        .map_err(|e| serde_error(e.path().to_string(), &e.inner().to_string()))?;
    let cfg = build(raw)?;
    validate(&cfg)?;
    Ok(cfg)
}

/// Turns a serde error at `path` into a key error. "missing field `x`" and "unknown field `x`"
/// name a key one level down, so the key is moved into the path where a reader looks for it.
fn serde_error(path: String, message: &str) -> ConfigError {
    // serde_path_to_error already ends the path with an unknown key, not with a missing one.
    let join = |field: &str| {
        if path.is_empty() || path == "." {
            field.to_string()
        } else if path == field || path.ends_with(&format!(".{field}")) {
            path.clone()
        } else {
            format!("{path}.{field}")
        }
    };
    let field_of = |prefix: &str| {
        message
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
            .map(str::to_string)
    };
    if let Some(f) = field_of("missing field `") {
        return ConfigError::key(join(&f), "required key is missing");
    }
    if let Some(f) = field_of("unknown field `") {
        let expected = message.split_once(", ").map(|(_, e)| e).unwrap_or("");
        return ConfigError::key(join(&f), format!("unknown key ({expected})"));
    }
    let path = if path == "." { String::new() } else { path };
    ConfigError::key(path, message.to_string())
}

fn build(raw: RawWorld) -> Result<WorldConfig, ConfigError> {
    let dns_addr: SocketAddr = raw.dns_addr.parse().map_err(|_| {
        ConfigError::key("dns_addr", format!("{:?} is not an ip:port", raw.dns_addr))
    })?;
    let mut domains = Vec::with_capacity(raw.domains.len());
    for (i, d) in raw.domains.into_iter().enumerate() {
        domains.push(build_domain(&format!("domains[{i}]"), d)?);
    }
    Ok(WorldConfig {
        smtp_port: raw.smtp_port,
        dns_addr,
        receiver: raw.receiver,
        domains,
    })
}

fn build_domain(key: &str, d: RawDomain) -> Result<DomainConfig, ConfigError> {
    let name = d.name.trim_end_matches('.').to_ascii_lowercase();
    let mx_host = match d.mx_host {
        Some(h) => h.trim_end_matches('.').to_ascii_lowercase(),
        None => format!("mx.{name}"),
    };
    let mut extra_mx = Vec::with_capacity(d.extra_mx.len());
    for (j, x) in d.extra_mx.into_iter().enumerate() {
        let xkey = format!("{key}.extra_mx[{j}]");
        extra_mx.push(ExtraMx {
            host: x.host.trim_end_matches('.').to_ascii_lowercase(),
            addr: parse_ipv4(&format!("{xkey}.addr"), &x.addr)?,
            preference: x.preference,
            profile: match x.profile {
                Some(p) => Some(build_profile(&format!("{xkey}.profile"), p)?),
                None => None,
            },
        });
    }
    Ok(DomainConfig {
        name,
        weight: d.weight,
        mx_host,
        mx_addr: parse_ipv4(&format!("{key}.mx_addr"), &d.mx_addr)?,
        mx_preference: d.mx_preference,
        extra_mx,
        profile: build_profile(&format!("{key}.profile"), d.profile)?,
        starttls: d.starttls,
        dane: build_dane(key, d.dnssec, d.tlsa, d.tlsa_bogus)?,
        extensions: SmtpExtensions {
            smtputf8: d.smtputf8,
            dsn: d.dsn,
        },
    })
}

fn build_dane(
    key: &str,
    dnssec: RawDnssec,
    tlsa: Vec<RawTlsa>,
    tlsa_bogus: bool,
) -> Result<DaneSpec, ConfigError> {
    let mut records = Vec::with_capacity(tlsa.len());
    for (j, t) in tlsa.into_iter().enumerate() {
        let data = match t.data {
            None => TlsaData::Receiver,
            Some(text) => {
                let bytes = unhex(&text).ok_or_else(|| {
                    ConfigError::key(
                        format!("{key}.tlsa[{j}].data"),
                        "expected hexadecimal octets (an even number of 0-9, a-f)",
                    )
                })?;
                TlsaData::Bytes(bytes)
            }
        };
        records.push(TlsaSpec {
            usage: t.usage,
            selector: t.selector,
            matching: t.matching,
            data,
        });
    }
    Ok(DaneSpec {
        dnssec: match dnssec {
            RawDnssec::Unsigned => Dnssec::Unsigned,
            RawDnssec::Signed => Dnssec::Signed,
            RawDnssec::Bogus => Dnssec::Bogus,
        },
        tlsa: records,
        tlsa_bogus,
    })
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Octets from hex (either case, no separators); None for anything else.
fn unhex(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if digits.len() % 2 != 0 {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    digits
        .chunks(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

fn parse_ipv4(key: &str, text: &str) -> Result<Ipv4Addr, ConfigError> {
    text.parse()
        .map_err(|_| ConfigError::key(key, format!("{text:?} is not an IPv4 address")))
}

/// The keys each kind uses; any other key set is an error naming it.
fn allowed_keys(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Normal | Kind::Hung | Kind::Refused | Kind::DropFirstAttempt => &[],
        Kind::Slow => &["delay_ms"],
        Kind::Greylist => &["retry_after_secs", "announce"],
        Kind::UnknownUsers => &["users", "fraction"],
        Kind::Throttle => &["max_msgs_per_conn", "max_msgs_per_min"],
        Kind::DropMidData => &["after_msgs"],
        Kind::RateLimited => &["budget", "msgs_per_sec", "max_msgs_per_conn"],
        Kind::Tarpit => &["byte_delay_ms", "max_sessions"],
    }
}

fn build_profile(key: &str, p: RawProfile) -> Result<Profile, ConfigError> {
    let present = [
        ("delay_ms", p.delay_ms.is_some()),
        ("retry_after_secs", p.retry_after_secs.is_some()),
        ("users", p.users.is_some()),
        ("fraction", p.fraction.is_some()),
        ("max_msgs_per_conn", p.max_msgs_per_conn.is_some()),
        ("max_msgs_per_min", p.max_msgs_per_min.is_some()),
        ("after_msgs", p.after_msgs.is_some()),
        ("announce", p.announce.is_some()),
        ("budget", p.budget.is_some()),
        ("msgs_per_sec", p.msgs_per_sec.is_some()),
        ("byte_delay_ms", p.byte_delay_ms.is_some()),
        ("max_sessions", p.max_sessions.is_some()),
    ];
    let kind_name = kind_name(p.kind);
    for (name, set) in present {
        if set && !allowed_keys(p.kind).contains(&name) {
            let msg = format!("not used by kind = \"{kind_name}\"");
            return Err(ConfigError::key(format!("{key}.{name}"), msg));
        }
    }
    let required = |name: &str| {
        let msg = format!("required for kind = \"{kind_name}\"");
        ConfigError::key(format!("{key}.{name}"), msg)
    };
    Ok(match p.kind {
        Kind::Normal => Profile::Normal,
        Kind::Hung => Profile::Hung,
        Kind::Refused => Profile::Refused,
        Kind::Slow => Profile::Slow {
            delay: Duration::from_millis(p.delay_ms.ok_or_else(|| required("delay_ms"))?),
        },
        Kind::Greylist => {
            let secs = p
                .retry_after_secs
                .ok_or_else(|| required("retry_after_secs"))?;
            Profile::Greylist {
                retry_after: retry_after(&format!("{key}.retry_after_secs"), secs)?,
                announce: p.announce.unwrap_or(false),
            }
        }
        Kind::UnknownUsers => {
            if p.users.is_none() && p.fraction.is_none() {
                return Err(required("users"));
            }
            Profile::UnknownUsers {
                users: p.users.unwrap_or_default(),
                fraction: p.fraction.unwrap_or(0.0),
            }
        }
        Kind::Throttle => {
            if p.max_msgs_per_conn.is_none() && p.max_msgs_per_min.is_none() {
                return Err(required("max_msgs_per_conn"));
            }
            Profile::Throttle {
                max_msgs_per_conn: p.max_msgs_per_conn,
                max_msgs_per_min: p.max_msgs_per_min,
            }
        }
        Kind::DropMidData => Profile::DropMidData {
            after_msgs: p.after_msgs.unwrap_or(0),
        },
        Kind::DropFirstAttempt => Profile::DropFirstAttempt,
        Kind::RateLimited => Profile::RateLimited {
            budget: p.budget.ok_or_else(|| required("budget"))?,
            msgs_per_sec: p.msgs_per_sec.ok_or_else(|| required("msgs_per_sec"))?,
            max_msgs_per_conn: p.max_msgs_per_conn,
        },
        Kind::Tarpit => Profile::Tarpit {
            byte_delay: Duration::from_millis(
                p.byte_delay_ms.ok_or_else(|| required("byte_delay_ms"))?,
            ),
            max_sessions: p.max_sessions,
        },
    })
}

fn retry_after(key: &str, secs: f64) -> Result<Duration, ConfigError> {
    if !(0.0..=MAX_RETRY_AFTER_SECS).contains(&secs) {
        let msg = format!("expected seconds between 0 and {MAX_RETRY_AFTER_SECS}, got {secs}");
        return Err(ConfigError::key(key, msg));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Normal => "normal",
        Kind::Slow => "slow",
        Kind::Greylist => "greylist",
        Kind::UnknownUsers => "unknown_users",
        Kind::Throttle => "throttle",
        Kind::Hung => "hung",
        Kind::Refused => "refused",
        Kind::DropMidData => "drop_mid_data",
        Kind::DropFirstAttempt => "drop_first_attempt",
        Kind::RateLimited => "rate_limited",
        Kind::Tarpit => "tarpit",
    }
}

/// Checks the rules a world must keep, whether parsed or built in code.
pub(super) fn validate(cfg: &WorldConfig) -> Result<(), ConfigError> {
    if !cfg.dns_addr.ip().is_loopback() {
        let msg = format!("{} is not in 127.0.0.0/8", cfg.dns_addr);
        return Err(ConfigError::key("dns_addr", msg));
    }
    validate_receiver(&cfg.receiver)?;
    let mut names: HashMap<&str, usize> = HashMap::new();
    // address -> (key of first use, host name, profile, starttls)
    let mut hosts: HashMap<Ipv4Addr, (String, &str, &Profile, bool)> = HashMap::new();
    for (i, d) in cfg.domains.iter().enumerate() {
        let key = format!("domains[{i}]");
        check_name(&format!("{key}.name"), &d.name)?;
        if let Some(first) = names.insert(&d.name, i) {
            let msg = format!("duplicate domain {:?} (also domains[{first}])", d.name);
            return Err(ConfigError::key(format!("{key}.name"), msg));
        }
        if !d.weight.is_finite() || d.weight < 0.0 {
            let msg = format!("expected a number >= 0, got {}", d.weight);
            return Err(ConfigError::key(format!("{key}.weight"), msg));
        }
        check_name(&format!("{key}.mx_host"), &d.mx_host)?;
        let primary = (format!("{key}.mx_addr"), d.mx_host.as_str(), d.mx_addr);
        check_host(&mut hosts, primary, &d.profile, d.starttls)?;
        for (j, x) in d.extra_mx.iter().enumerate() {
            let xkey = format!("{key}.extra_mx[{j}]");
            check_name(&format!("{xkey}.host"), &x.host)?;
            let profile = x.profile.as_ref().unwrap_or(&d.profile);
            check_profile(&format!("{xkey}.profile"), profile)?;
            let h = (format!("{xkey}.addr"), x.host.as_str(), x.addr);
            check_host(&mut hosts, h, profile, d.starttls)?;
        }
        check_profile(&format!("{key}.profile"), &d.profile)?;
        check_dane(&key, d)?;
    }
    Ok(())
}

/// TLSA data that can be computed, a bogus TLSA only in a signed zone, bounded data.
fn check_dane(key: &str, d: &DomainConfig) -> Result<(), ConfigError> {
    if d.dane.tlsa_bogus && d.dane.dnssec != Dnssec::Signed {
        return Err(ConfigError::key(
            format!("{key}.tlsa_bogus"),
            "needs dnssec = \"signed\" (in a bogus zone everything is SERVFAIL already)",
        ));
    }
    for (j, t) in d.dane.tlsa.iter().enumerate() {
        let data_key = format!("{key}.tlsa[{j}].data");
        match &t.data {
            TlsaData::Receiver if !d.starttls => {
                let msg = "required: the domain's hosts offer no STARTTLS, so there is no \
                           certificate to compute it from";
                return Err(ConfigError::key(data_key, msg));
            }
            TlsaData::Receiver if t.selector > 1 || t.matching > 2 => {
                let msg = "required: only selector 0 or 1 with matching 0, 1 or 2 can be \
                           computed from the receivers' certificate";
                return Err(ConfigError::key(data_key, msg));
            }
            TlsaData::Bytes(b) if b.is_empty() || b.len() > MAX_TLSA_DATA => {
                let msg = format!("expected 1 to {MAX_TLSA_DATA} octets, got {}", b.len());
                return Err(ConfigError::key(data_key, msg));
            }
            _ => {}
        }
    }
    Ok(())
}

fn validate_receiver(r: &ReceiverSettings) -> Result<(), ConfigError> {
    let positive = [
        ("receiver.max_message_bytes", r.max_message_bytes),
        ("receiver.max_recipients", r.max_recipients),
        ("receiver.max_sessions_per_host", r.max_sessions_per_host),
        ("receiver.idle_timeout_secs", r.idle_timeout_secs as usize),
    ];
    for (key, v) in positive {
        if v == 0 {
            return Err(ConfigError::key(key, "expected a number > 0"));
        }
    }
    Ok(())
}

/// One address is one host: a second use must agree on name and behaviour.
fn check_host<'a>(
    hosts: &mut HashMap<Ipv4Addr, (String, &'a str, &'a Profile, bool)>,
    (key, name, addr): (String, &'a str, Ipv4Addr),
    profile: &'a Profile,
    starttls: bool,
) -> Result<(), ConfigError> {
    if !IpAddr::V4(addr).is_loopback() {
        return Err(ConfigError::key(
            key,
            format!("{addr} is not in 127.0.0.0/8"),
        ));
    }
    if addr == Ipv4Addr::LOCALHOST {
        let msg = "127.0.0.1 is reserved for Herald itself; use another 127.x.y.z";
        return Err(ConfigError::key(key, msg));
    }
    match hosts.get(&addr) {
        None => {
            hosts.insert(addr, (key, name, profile, starttls));
            Ok(())
        }
        Some((first, n, p, t)) if *n == name && *p == profile && *t == starttls => {
            let _ = first;
            Ok(())
        }
        Some((first, n, _, _)) => {
            let msg = format!(
                "{addr} is already used by {n} ({first}) with a different host name, profile \
                 or starttls"
            );
            Err(ConfigError::key(key, msg))
        }
    }
}

fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    herald_types::Address::from_parts("postmaster", name)
        .map(|_| ())
        .map_err(|e| ConfigError::key(key, format!("{name:?} is not a valid domain name: {e}")))
}

/// Checks values a typed profile built in code could still get wrong.
fn check_profile(key: &str, p: &Profile) -> Result<(), ConfigError> {
    match p {
        Profile::UnknownUsers { fraction, .. } if !(0.0..=1.0).contains(fraction) => {
            let msg = format!("expected a fraction between 0 and 1, got {fraction}");
            Err(ConfigError::key(format!("{key}.fraction"), msg))
        }
        Profile::Throttle {
            max_msgs_per_conn: None,
            max_msgs_per_min: None,
        } => Err(ConfigError::key(
            format!("{key}.max_msgs_per_conn"),
            "required for kind = \"throttle\" (or max_msgs_per_min)",
        )),
        Profile::Throttle {
            max_msgs_per_conn: Some(0),
            ..
        }
        | Profile::RateLimited {
            max_msgs_per_conn: Some(0),
            ..
        } => Err(ConfigError::key(
            format!("{key}.max_msgs_per_conn"),
            "expected a number > 0",
        )),
        Profile::RateLimited { msgs_per_sec, .. } if *msgs_per_sec == 0 => Err(ConfigError::key(
            format!("{key}.msgs_per_sec"),
            "expected a number > 0",
        )),
        Profile::Tarpit { byte_delay, .. } if *byte_delay > MAX_TARPIT_BYTE_DELAY => {
            let msg = format!(
                "expected at most {} ms, got {} ms",
                MAX_TARPIT_BYTE_DELAY.as_millis(),
                byte_delay.as_millis()
            );
            Err(ConfigError::key(format!("{key}.byte_delay_ms"), msg))
        }
        Profile::Tarpit {
            max_sessions: Some(0),
            ..
        } => Err(ConfigError::key(
            format!("{key}.max_sessions"),
            "expected a number > 0",
        )),
        Profile::RateLimited { budget, .. } if budget.is_empty() || budget.len() > 253 => {
            Err(ConfigError::key(
                format!("{key}.budget"),
                "expected a name of 1 to 253 octets",
            ))
        }
        _ => Ok(()),
    }
}

/// Renders a config as TOML.
pub(super) fn render(cfg: &WorldConfig) -> Result<String, ConfigError> {
    let raw = RawWorld {
        smtp_port: cfg.smtp_port,
        dns_addr: cfg.dns_addr.to_string(),
        receiver: cfg.receiver.clone(),
        domains: cfg.domains.iter().map(raw_domain).collect(),
    };
    toml::to_string(&raw).map_err(|e| ConfigError::key("", e.to_string()))
}

fn raw_domain(d: &DomainConfig) -> RawDomain {
    RawDomain {
        name: d.name.clone(),
        weight: d.weight,
        mx_host: Some(d.mx_host.clone()),
        mx_addr: d.mx_addr.to_string(),
        mx_preference: d.mx_preference,
        extra_mx: d
            .extra_mx
            .iter()
            .map(|x| RawExtraMx {
                host: x.host.clone(),
                addr: x.addr.to_string(),
                preference: x.preference,
                profile: x.profile.as_ref().map(raw_profile),
            })
            .collect(),
        profile: raw_profile(&d.profile),
        starttls: d.starttls,
        dnssec: match d.dane.dnssec {
            Dnssec::Unsigned => RawDnssec::Unsigned,
            Dnssec::Signed => RawDnssec::Signed,
            Dnssec::Bogus => RawDnssec::Bogus,
        },
        tlsa: d
            .dane
            .tlsa
            .iter()
            .map(|t| RawTlsa {
                usage: t.usage,
                selector: t.selector,
                matching: t.matching,
                data: match &t.data {
                    TlsaData::Receiver => None,
                    TlsaData::Bytes(b) => Some(hex(b)),
                },
            })
            .collect(),
        tlsa_bogus: d.dane.tlsa_bogus,
        smtputf8: d.extensions.smtputf8,
        dsn: d.extensions.dsn,
    }
}

fn raw_profile(p: &Profile) -> RawProfile {
    let mut r = RawProfile::default();
    match p {
        Profile::Normal => {}
        Profile::Hung => r.kind = Kind::Hung,
        Profile::Refused => r.kind = Kind::Refused,
        Profile::Slow { delay } => {
            r.kind = Kind::Slow;
            r.delay_ms = Some(delay.as_millis() as u64);
        }
        Profile::Greylist {
            retry_after,
            announce,
        } => {
            r.kind = Kind::Greylist;
            r.retry_after_secs = Some(retry_after.as_secs_f64());
            r.announce = announce.then_some(true);
        }
        Profile::UnknownUsers { users, fraction } => {
            r.kind = Kind::UnknownUsers;
            r.users = Some(users.clone());
            r.fraction = Some(*fraction);
        }
        Profile::Throttle {
            max_msgs_per_conn,
            max_msgs_per_min,
        } => {
            r.kind = Kind::Throttle;
            r.max_msgs_per_conn = *max_msgs_per_conn;
            r.max_msgs_per_min = *max_msgs_per_min;
        }
        Profile::DropMidData { after_msgs } => {
            r.kind = Kind::DropMidData;
            r.after_msgs = Some(*after_msgs);
        }
        Profile::DropFirstAttempt => r.kind = Kind::DropFirstAttempt,
        Profile::RateLimited {
            budget,
            msgs_per_sec,
            max_msgs_per_conn,
        } => {
            r.kind = Kind::RateLimited;
            r.budget = Some(budget.clone());
            r.msgs_per_sec = Some(*msgs_per_sec);
            r.max_msgs_per_conn = *max_msgs_per_conn;
        }
        Profile::Tarpit {
            byte_delay,
            max_sessions,
        } => {
            r.kind = Kind::Tarpit;
            r.byte_delay_ms = Some(byte_delay.as_millis() as u64);
            r.max_sessions = *max_sessions;
        }
    }
    r
}
