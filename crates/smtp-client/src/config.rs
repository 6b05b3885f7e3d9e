//! Typed configuration of the SMTP client (`[delivery]` in the server's TOML), checked once
//! ([`ClientConfig::validate`]).
//!
//! The `[delivery]` table also carries the routing policy an operator sets for outbound mail
//! (`[[delivery.tls_policy]]`, `[delivery.mta_sts]`, `[delivery.dane]`); those types belong to
//! `herald-routing` and are only embedded here so that the TOML keys stay where operators know
//! them. The client reads only [`ClientConfig::tls_for`] of them.
//!
//! The timeouts are the short *first-pass* timeouts (seeds/000: a hung host must not hold a worker
//! for minutes per SMTP step); a slow lane may run with a second, longer `ClientConfig` (and
//! `tarpit_after = 0`: patient with replies that trickle).
//! Durations are written in seconds in TOML (`connect_timeout_secs = 10`, fractions allowed).

use crate::error::ConfigError;
use crate::reply_reader::Patience;
use crate::tls::TlsCache;
use herald_egress::{EgressConfig, EgressPoolConfig, EgressSource};
use herald_routing::config::secs;
use herald_routing::tls_policy::{policy_for, validate_rules};
use herald_routing::{DaneConfig, MtaStsConfig, TlsMode, TlsPolicy, TlsPolicyRule};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// Most signing threads `signing_threads` may ask for: far above any core count that helps,
/// low enough that a typo cannot start a hundred thousand threads.
pub const MAX_SIGNING_THREADS: usize = 256;

/// The outbound SMTP client's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// Name sent in EHLO/HELO; should be this host's name with matching reverse DNS.
    pub helo_name: String,
    /// Destination port (25 on the Internet; the simulator uses others). The scheduler pairs it
    /// with each [`herald_routing::MxHost`] address; [`crate::Connection::connect`] uses the port of the
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
    /// Longest silence inside a reply once its first byte has arrived: a host that stops
    /// mid-line is cut off after this, not after the whole step's timeout.
    #[serde(rename = "reply_idle_timeout_secs", deserialize_with = "secs")]
    pub reply_idle_timeout: Duration,
    /// A reply still arriving this long after its first byte is a tarpit's (slow but steady):
    /// the first pass gives up on it at once and the scheduler moves the host to the slow lane,
    /// without counting it down. 0: never (the slow lane, which reads such replies to the end
    /// within its RFC 5321 timeouts).
    #[serde(rename = "tarpit_after_secs", deserialize_with = "secs")]
    pub tarpit_after: Duration,
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
    /// Local source addresses (`[[delivery.egress]]`): owned by `herald-egress`,
    /// embedded here so the keys sit under `[delivery]`. The scheduler chooses one per
    /// connection; the client binds it ([`crate::Connection::connect_from`]).
    pub egress: Vec<EgressSource>,
    /// Pools of those sources (`[[delivery.egress_pool]]`).
    pub egress_pool: Vec<EgressPoolConfig>,
    /// The pool of copies whose list and destination name none.
    pub default_egress_pool: Option<String>,
    /// Threads that splice and DKIM-sign the copies of signed posts (the scheduler's signing
    /// pool), off the runtime threads that drive the connections. Unset: one
    /// per available core; 0: each copy is signed inline by the worker that writes it.
    /// Embedded here so the key sits under `[delivery]`; the client itself never reads it.
    pub signing_threads: Option<usize>,
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
            reply_idle_timeout: Duration::from_secs(60),
            // Above Postfix postscreen's greet wait (6 s between "220-" and "220 "): a
            // postscreen host is not a tarpit.
            tarpit_after: Duration::from_secs(10),
            tls: TlsMode::Opportunistic,
            tls_ca_file: None,
            tls_policy: Vec::new(),
            mta_sts: MtaStsConfig::default(),
            dane: DaneConfig::default(),
            egress: Vec::new(),
            egress_pool: Vec::new(),
            default_egress_pool: None,
            signing_threads: None,
            tls_cache: TlsCache::default(),
        }
    }
}

impl ClientConfig {
    /// The TLS policy for `mx_name`: the first matching [`TlsPolicyRule`], else [`Self::tls`]
    /// without verification.
    pub fn tls_for(&self, mx_name: &str) -> TlsPolicy {
        policy_for(&self.tls_policy, self.tls, mx_name)
    }

    /// The egress keys as `herald-egress` takes them.
    pub fn egress_config(&self) -> EgressConfig {
        EgressConfig {
            sources: self.egress.clone(),
            pools: self.egress_pool.clone(),
            default_pool: self.default_egress_pool.clone(),
        }
    }

    /// How patient this lane is with a reply that is arriving (see `reply_reader`).
    pub fn patience(&self) -> Patience {
        Patience {
            idle: self.reply_idle_timeout,
            trickle: (!self.tarpit_after.is_zero()).then_some(self.tarpit_after),
        }
    }

    /// Refuses a HELO name that could not be sent safely and timeouts that would never fire.
    pub fn validate(&self) -> Result<(), ConfigError> {
        herald_egress::check(&self.egress_config()).map_err(ConfigError::Egress)?;
        let name = &self.helo_name;
        if name.is_empty() || name.len() > 255 {
            return Err(ConfigError::invalid(
                "client.helo_name",
                "must be 1 to 255 octets",
            ));
        }
        if !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::invalid(
                "client.helo_name",
                "must be printable ASCII without spaces",
            ));
        }
        validate_rules(&self.tls_policy)?;
        if self.port == 0 {
            return Err(ConfigError::invalid("client.port", "must not be 0"));
        }
        self.mta_sts.validate()?;
        self.dane.validate()?;
        if self
            .signing_threads
            .is_some_and(|n| n > MAX_SIGNING_THREADS)
        {
            return Err(ConfigError::invalid(
                "delivery.signing_threads",
                "must be at most 256 (0: sign inline)",
            ));
        }
        let timeouts = [
            ("client.connect_timeout_secs", self.connect_timeout),
            ("client.banner_timeout_secs", self.banner_timeout),
            ("client.command_timeout_secs", self.command_timeout),
            ("client.data_timeout_secs", self.data_timeout),
            ("client.reply_idle_timeout_secs", self.reply_idle_timeout),
        ];
        for (key, value) in timeouts {
            if value.is_zero() {
                return Err(ConfigError::invalid(key, "must be greater than 0"));
            }
        }
        Ok(())
    }
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
    }

    #[test]
    fn signing_threads_are_read_and_bounded() {
        let read = |toml_text: &str| toml::from_str::<ClientConfig>(toml_text);
        assert_eq!(read("").expect("empty").signing_threads, None);
        let c = read("signing_threads = 0").expect("inline");
        assert_eq!(c.signing_threads, Some(0));
        c.validate().expect("0 is inline");
        read("signing_threads = 256")
            .expect("max")
            .validate()
            .expect("256 is allowed");
        let e = read("signing_threads = 100000")
            .expect("parses")
            .validate()
            .expect_err("refused");
        assert!(e.to_string().contains("signing_threads"), "{e}");
        for hostile in [
            "signing_threads = -1",
            "signing_threads = \"all\"",
            "signing_threads = 1.5",
            "signing_threads = 99999999999999999999999",
        ] {
            assert!(read(hostile).is_err(), "{hostile}");
        }
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
    fn validation_names_the_key() {
        let c = ClientConfig {
            helo_name: "bad name".into(),
            ..ClientConfig::default()
        };
        let err = c.validate().expect_err("space in helo name");
        assert!(err.to_string().contains("client.helo_name"), "{err}");
    }
}
