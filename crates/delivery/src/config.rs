//! Typed configuration for the resolver and the SMTP client, deserialized from the server's TOML
//! and checked once ([`ResolverConfig::validate`], [`ClientConfig::validate`]).
//!
//! The timeouts are the short *first-pass* timeouts (seeds/000: a hung host must not hold a worker
//! for minutes per SMTP step); a slow lane may run with a second, longer `ClientConfig`.
//! Durations are written in seconds in TOML (`connect_timeout_secs = 10`, fractions allowed).

pub use crate::dane::config::DaneConfig;
use crate::error::DeliveryError;
pub use crate::mta_sts::config::MtaStsConfig;
use crate::tls::TlsCache;
use serde::{Deserialize, Deserializer};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How DNS is queried.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResolverConfig {
    /// Name servers to ask (UDP, with TCP for truncated answers). Empty: the system's
    /// configuration (`/etc/resolv.conf`). When given, only these are used.
    pub nameservers: Vec<SocketAddr>,
    /// Time to wait for one answer from one server.
    pub timeout_ms: u64,
    /// How many times a query is tried before the lookup fails (transiently).
    pub attempts: usize,
}

impl Default for ResolverConfig {
    fn default() -> Self {
        ResolverConfig {
            nameservers: Vec::new(),
            timeout_ms: 5_000,
            attempts: 2,
        }
    }
}

impl ResolverConfig {
    /// Refuses values that would make lookups hang or never be tried.
    pub fn validate(&self) -> Result<(), DeliveryError> {
        if self.timeout_ms == 0 {
            return Err(invalid("resolver.timeout_ms", "must be greater than 0"));
        }
        if self.attempts == 0 {
            return Err(invalid("resolver.attempts", "must be at least 1"));
        }
        Ok(())
    }
}

/// Whether STARTTLS is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsMode {
    /// Never send STARTTLS.
    Disabled,
    /// Use STARTTLS when offered, accept any certificate (RFC 7435 opportunistic security) and
    /// record whether it would have verified. A failed handshake falls back to plaintext once.
    #[default]
    Opportunistic,
    /// Refuse to send mail in plaintext: no STARTTLS offered or a failed handshake is an error.
    /// The certificate is not required to verify (MX names are not authenticated without DANE or
    /// MTA-STS); [`crate::TlsInfo::verified`] says whether it did.
    Required,
}

/// One per-destination TLS rule (`[[delivery.tls_policy]]`): MX hosts named `mx_suffix` or
/// ending in `.<mx_suffix>` use `mode` instead of [`ClientConfig::tls`]. The first matching rule
/// wins.
///
/// SECURITY: with `mode = "required"` and `verify = true` a copy is never sent in plaintext nor
/// over TLS whose certificate does not verify for the MX name against the trust anchors
/// ([`ClientConfig::tls_ca_file`] or the system bundle): the session ends before MAIL and the
/// copies are deferred (`451 4.7.5`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsPolicyRule {
    /// A domain suffix, e.g. `example.net` (matches `mx.example.net` and `example.net`).
    pub mx_suffix: String,
    pub mode: TlsMode,
    /// Require the certificate to verify (only with `mode = "required"`).
    #[serde(default)]
    pub verify: bool,
}

impl TlsPolicyRule {
    fn matches(&self, mx_name: &str) -> bool {
        let suffix = self.mx_suffix.trim_matches('.').to_ascii_lowercase();
        let name = mx_name.trim_end_matches('.').to_ascii_lowercase();
        name == suffix || name.ends_with(&format!(".{suffix}"))
    }
}

/// The TLS policy for one MX host: [`ClientConfig::tls_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsPolicy {
    pub mode: TlsMode,
    /// The certificate must verify (implies `mode == Required`).
    pub verify: bool,
}

impl TlsPolicy {
    /// What an MTA-STS policy in `enforce` mode demands of every MX host (RFC 8461 §4.2).
    pub const VERIFIED: TlsPolicy = TlsPolicy {
        mode: TlsMode::Required,
        verify: true,
    };

    /// The stricter of two policies, requirement by requirement: an explicit rule and an
    /// MTA-STS policy both apply, and neither may weaken the other.
    pub fn stricter(self, other: TlsPolicy) -> TlsPolicy {
        let rank = |m: TlsMode| match m {
            TlsMode::Disabled => 0,
            TlsMode::Opportunistic => 1,
            TlsMode::Required => 2,
        };
        let mode = if rank(other.mode) > rank(self.mode) {
            other.mode
        } else {
            self.mode
        };
        TlsPolicy {
            mode,
            verify: (self.verify || other.verify) && mode == TlsMode::Required,
        }
    }
}

/// The outbound SMTP client's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// Name sent in EHLO/HELO; should be this host's name with matching reverse DNS.
    pub helo_name: String,
    /// Destination port (25 on the Internet; the simulator uses others). The scheduler pairs it
    /// with each [`crate::MxHost`] address; [`crate::Connection::connect`] uses the port of the
    /// address it is given.
    pub port: u16,
    /// TCP connect.
    #[serde(rename = "connect_timeout_secs", deserialize_with = "secs")]
    pub connect_timeout: Duration,
    /// From connected to the complete 220 greeting.
    #[serde(rename = "banner_timeout_secs", deserialize_with = "secs")]
    pub banner_timeout: Duration,
    /// Each command reply (EHLO, STARTTLS, MAIL, RCPT, DATA, RSET, QUIT) and the TLS handshake.
    #[serde(rename = "command_timeout_secs", deserialize_with = "secs")]
    pub command_timeout: Duration,
    /// The reply after the message body, and each 64 KiB of body written.
    #[serde(rename = "data_timeout_secs", deserialize_with = "secs")]
    pub data_timeout: Duration,
    /// STARTTLS policy.
    pub tls: TlsMode,
    /// PEM file of trust anchors used to *record* whether a server certificate verifies. None:
    /// the system bundle at its usual paths, when there is one.
    pub tls_ca_file: Option<PathBuf>,
    /// Per-destination TLS rules, first match wins (`[[delivery.tls_policy]]`); none by default.
    pub tls_policy: Vec<TlsPolicyRule>,
    /// MTA-STS (RFC 8461): recipient domains' published TLS policies (`[delivery.mta_sts]`).
    pub mta_sts: MtaStsConfig,
    /// DANE (RFC 7672): MX hosts' DNSSEC-signed TLSA records (`[delivery.dane]`, off by
    /// default: it needs a validating resolver).
    pub dane: DaneConfig,
    /// The rustls configuration, built once on first STARTTLS and shared by every connection
    /// made with this config. Leave it `Default`.
    #[serde(skip)]
    pub tls_cache: TlsCache,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            helo_name: "localhost".to_string(),
            port: 25,
            connect_timeout: Duration::from_secs(10),
            banner_timeout: Duration::from_secs(15),
            command_timeout: Duration::from_secs(30),
            data_timeout: Duration::from_secs(60),
            tls: TlsMode::Opportunistic,
            tls_ca_file: None,
            tls_policy: Vec::new(),
            mta_sts: MtaStsConfig::default(),
            dane: DaneConfig::default(),
            tls_cache: TlsCache::default(),
        }
    }
}

impl ClientConfig {
    /// The TLS policy for `mx_name`: the first matching [`TlsPolicyRule`], else [`Self::tls`]
    /// without verification.
    pub fn tls_for(&self, mx_name: &str) -> TlsPolicy {
        match self.tls_policy.iter().find(|r| r.matches(mx_name)) {
            Some(rule) => TlsPolicy {
                mode: rule.mode,
                verify: rule.verify && rule.mode == TlsMode::Required,
            },
            None => TlsPolicy {
                mode: self.tls,
                verify: false,
            },
        }
    }

    /// Refuses a HELO name that could not be sent safely and timeouts that would never fire.
    pub fn validate(&self) -> Result<(), DeliveryError> {
        let name = &self.helo_name;
        if name.is_empty() || name.len() > 255 {
            return Err(invalid("client.helo_name", "must be 1 to 255 octets"));
        }
        if !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                "client.helo_name",
                "must be printable ASCII without spaces",
            ));
        }
        for rule in &self.tls_policy {
            let suffix = rule.mx_suffix.trim_matches('.');
            if suffix.is_empty()
                || !suffix
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            {
                return Err(invalid(
                    "delivery.tls_policy.mx_suffix",
                    "must be a domain name",
                ));
            }
            if rule.verify && rule.mode != TlsMode::Required {
                return Err(invalid(
                    "delivery.tls_policy.verify",
                    "needs mode = \"required\"",
                ));
            }
        }
        if self.port == 0 {
            return Err(invalid("client.port", "must not be 0"));
        }
        self.mta_sts.validate()?;
        self.dane.validate()?;
        let timeouts = [
            ("client.connect_timeout_secs", self.connect_timeout),
            ("client.banner_timeout_secs", self.banner_timeout),
            ("client.command_timeout_secs", self.command_timeout),
            ("client.data_timeout_secs", self.data_timeout),
        ];
        for (key, value) in timeouts {
            if value.is_zero() {
                return Err(invalid(key, "must be greater than 0"));
            }
        }
        Ok(())
    }
}

pub(crate) fn invalid(key: &'static str, reason: &'static str) -> DeliveryError {
    DeliveryError::InvalidConfig { key, reason }
}

/// Seconds as an integer or a fraction (`0.5`), refusing negative and absurd values.
pub(crate) fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = f64::deserialize(d)?;
    Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_short() {
        let c = ClientConfig::default();
        c.validate().expect("valid");
        assert_eq!(c.connect_timeout, Duration::from_secs(10));
        assert_eq!(c.data_timeout, Duration::from_secs(60));
        ResolverConfig::default().validate().expect("valid");
    }

    #[test]
    fn tls_policy_rules_match_by_suffix_first_match_wins() {
        let rule = |suffix: &str, mode, verify| TlsPolicyRule {
            mx_suffix: suffix.into(),
            mode,
            verify,
        };
        let c = ClientConfig {
            tls_policy: vec![
                rule("secure.example", TlsMode::Required, true),
                rule(".example", TlsMode::Disabled, false),
            ],
            ..ClientConfig::default()
        };
        c.validate().expect("valid");
        let strict = TlsPolicy {
            mode: TlsMode::Required,
            verify: true,
        };
        assert_eq!(c.tls_for("mx1.secure.example"), strict);
        assert_eq!(c.tls_for("SECURE.example."), strict);
        assert_eq!(c.tls_for("mx.example").mode, TlsMode::Disabled);
        assert_eq!(
            c.tls_for("insecure-example.org").mode,
            TlsMode::Opportunistic
        );
        assert_eq!(c.tls_for("notsecure.example").mode, TlsMode::Disabled);
        assert!(!c.tls_for("other.test").verify);

        let bad = ClientConfig {
            tls_policy: vec![rule("x.example", TlsMode::Opportunistic, true)],
            ..ClientConfig::default()
        };
        assert!(bad.validate().is_err(), "verify without required");
        let bad = ClientConfig {
            tls_policy: vec![rule("", TlsMode::Required, false)],
            ..ClientConfig::default()
        };
        assert!(bad.validate().is_err(), "empty suffix");
    }

    #[test]
    fn the_stricter_tls_policy_wins() {
        let p = |mode, verify| TlsPolicy { mode, verify };
        let opportunistic = p(TlsMode::Opportunistic, false);
        let disabled = p(TlsMode::Disabled, false);
        let required = p(TlsMode::Required, false);
        assert_eq!(disabled.stricter(TlsPolicy::VERIFIED), TlsPolicy::VERIFIED);
        assert_eq!(TlsPolicy::VERIFIED.stricter(disabled), TlsPolicy::VERIFIED);
        assert_eq!(opportunistic.stricter(disabled), opportunistic);
        assert_eq!(required.stricter(opportunistic), required);
        assert_eq!(required.stricter(TlsPolicy::VERIFIED), TlsPolicy::VERIFIED);
    }

    #[test]
    fn validation_names_the_key() {
        let c = ClientConfig {
            helo_name: "bad name".into(),
            ..ClientConfig::default()
        };
        let err = c.validate().expect_err("space in helo name");
        assert!(err.to_string().contains("client.helo_name"), "{err}");
        let r = ResolverConfig {
            attempts: 0,
            ..ResolverConfig::default()
        };
        assert!(r.validate().is_err());
    }
}
