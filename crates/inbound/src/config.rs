//! Listener configuration, embedded in the server's TOML and checked once at start-up.
//!
//! Invariant: a config that passed [`InboundConfig::validate`] has a hostname that is a valid
//! domain (it is spliced into the banner, every EHLO reply and every `Received:` header), sane
//! [`Limits`], and at least one session slot.
//!
//! SECURITY: message bodies buffered by all sessions together are bounded by
//! `max_buffered_octets` (shared by the listeners given one [`crate::InboundShared`]), not by
//! `max_sessions` × `limits.max_message_octets`; `max_sessions_per_client` keeps one address,
//! and `max_sessions_per_network` one /24 (IPv6 /48), from taking every session slot; the
//! stress keys keep many addresses from holding the slots idle: see
//! `board.rs`.

use herald_smtp::Limits;
use herald_types::Address;
use serde::Deserialize;
use std::time::Duration;

use crate::InboundError;

/// One listener's settings (the SMTP and LMTP listeners may differ). Every key has a default so
/// the server can embed it as a TOML section; unknown keys are refused.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InboundConfig {
    /// Our name in the banner, EHLO replies and `Received:` headers: set it to the name the
    /// lists' MX records point at (default `localhost`).
    pub hostname: String,
    pub limits: Limits,
    /// Concurrent sessions (default 500); one more gets `421 4.3.2` and is closed.
    pub max_sessions: usize,
    /// Concurrent sessions from one client address (IPv6: one /64), default 20, 0 = no limit;
    /// one more gets `421 4.7.0` and is closed without taking a session slot. Not applied in
    /// LMTP mode: the MTA in front of Herald is one address that legitimately opens many
    /// connections, and LMTP listens only where that MTA can reach it; `max_sessions` still
    /// bounds it.
    pub max_sessions_per_client: usize,
    /// Message octets all sessions may buffer at once (default 256 MiB); a message that would
    /// go past it gets `452 4.3.1` (try again later). At least `limits.max_message_octets`, or
    /// a message of the largest size could never be taken.
    pub max_buffered_octets: u64,
    /// Concurrent sessions from one IPv4 /24 or IPv6 /48 (default 80, four times the
    /// per-client default; 0 = no limit): a small botnet often sits in one provider's block.
    /// One more gets `421 4.7.0`, like the per-client limit. SMTP only, like it. Either 0 or at
    /// least `max_sessions_per_client`.
    pub max_sessions_per_network: usize,
    /// Open sessions, as a percentage of `max_sessions`, from which the listener is in stress
    /// mode (default 75; 0 = never; at most 100). In stress mode idle sessions with no MAIL
    /// yet get `stress_command_timeout_secs` instead of `limits.command_timeout_secs`, those
    /// already open included (Postfix `smtpd_timeout = ${stress?10}`). Stress mode ends once
    /// the count falls a twentieth of `max_sessions` below the threshold, so it does not flap.
    /// SMTP only.
    pub stress_threshold_percent: u8,
    /// In stress mode, how long an idle session with no MAIL yet has for its next command
    /// line, from our last reply (default 10, as Postfix under stress). At least 1; when
    /// `limits.command_timeout_secs` is shorter, that one applies.
    pub stress_command_timeout_secs: u64,
    /// When every session slot is taken, shed the session that has been idle longest with no
    /// MAIL yet (`421 4.7.0`, closed) to admit the newcomer (default true): a newcomer is never
    /// locked out by idlers. Sessions in a transaction are never shed. SMTP only.
    pub shed_idle_sessions: bool,
    /// On shutdown, how long a session in the middle of a transaction may take to finish it
    /// (default 30).
    pub shutdown_grace_secs: u64,
}

impl Default for InboundConfig {
    fn default() -> Self {
        InboundConfig::new("localhost")
    }
}

impl InboundConfig {
    /// Defaults for everything but the hostname.
    pub fn new(hostname: impl Into<String>) -> InboundConfig {
        InboundConfig {
            hostname: hostname.into(),
            limits: Limits::default(),
            max_sessions: 500,
            max_sessions_per_client: 20,
            max_sessions_per_network: 80,
            stress_threshold_percent: 75,
            stress_command_timeout_secs: 10,
            shed_idle_sessions: true,
            max_buffered_octets: 256 * 1024 * 1024,
            shutdown_grace_secs: 30,
        }
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }

    /// The stress deadline in effect: never longer than the normal command timeout.
    pub fn stress_command_timeout(&self) -> Duration {
        Duration::from_secs(
            self.stress_command_timeout_secs
                .min(self.limits.command_timeout_secs),
        )
    }

    /// The flood keys; each error names its key, so the server can prefix its
    /// section name and report it as is.
    pub fn validate_flood_keys(&self) -> Result<(), InboundError> {
        let invalid = |key, rule| Err(InboundError::Invalid { key, rule });
        if self.max_sessions_per_network != 0
            && self.max_sessions_per_client != 0
            && self.max_sessions_per_network < self.max_sessions_per_client
        {
            return invalid(
                "max_sessions_per_network",
                "must be 0 (no limit) or at least max_sessions_per_client",
            );
        }
        if self.stress_threshold_percent > 100 {
            return invalid(
                "stress_threshold_percent",
                "must be between 0 (never) and 100",
            );
        }
        if self.stress_command_timeout_secs == 0 {
            return invalid("stress_command_timeout_secs", "must be at least 1");
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), InboundError> {
        // The address validator already implements the RFC 5321 domain rules (labels, length,
        // no literals); reuse it rather than keep a second copy.
        if self.hostname.ends_with('.')
            || Address::from_parts("postmaster", &self.hostname).is_err()
        {
            return Err(InboundError::InvalidHostname(self.hostname.clone()));
        }
        self.limits.validate()?;
        if self.max_sessions == 0 {
            return Err(InboundError::NoSessions);
        }
        if self.max_buffered_octets < self.limits.max_message_octets {
            return Err(InboundError::BufferBudgetTooSmall);
        }
        self.validate_flood_keys()
    }
}

/// The server's `[smtp_in]` table: [`InboundConfig`] without the hostname (that is the
/// server's top-level `hostname`, shared by every stage). Every key defaults to the
/// listener's own default; unknown keys are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SmtpInConfig {
    /// Line lengths, message size, recipients, errors and timeouts (`[smtp_in.limits]`).
    pub limits: Limits,
    /// Concurrent sessions per listener; beyond it a connection gets 421 4.3.2.
    pub max_sessions: usize,
    /// Concurrent SMTP and submissions sessions from one client address (IPv6: per /64),
    /// 0 = no limit; beyond it 421 4.7.0. Never applied to LMTP (see `herald.example.toml`).
    pub max_sessions_per_client: usize,
    /// Concurrent SMTP and submissions sessions from one IPv4 /24 or IPv6 /48, 0 = no limit,
    /// else at least `max_sessions_per_client`; beyond it 421 4.7.0. Not applied to LMTP.
    pub max_sessions_per_network: usize,
    /// Percentage of `max_sessions` from which an SMTP listener is in stress mode (0 = never,
    /// at most 100): idle sessions with no MAIL yet get `stress_command_timeout_secs`.
    pub stress_threshold_percent: u8,
    /// The command timeout of idle sessions with no MAIL yet under stress (Postfix: 10 s).
    pub stress_command_timeout_secs: u64,
    /// With every SMTP slot taken, shed the longest-idle session with no MAIL yet (421 4.7.0)
    /// to admit a newcomer; sessions in a transaction are never shed.
    pub shed_idle_sessions: bool,
    /// Message octets all inbound sessions may buffer at once, all listeners together; a
    /// message that would go past it gets 452 4.3.1 and is retried by its sender.
    pub max_buffered_octets: u64,
    /// On shutdown, open transactions get this long to finish.
    pub shutdown_grace_secs: u64,
}

impl Default for SmtpInConfig {
    fn default() -> Self {
        let d = InboundConfig::default();
        SmtpInConfig {
            limits: d.limits,
            max_sessions: d.max_sessions,
            max_sessions_per_client: d.max_sessions_per_client,
            max_sessions_per_network: d.max_sessions_per_network,
            stress_threshold_percent: d.stress_threshold_percent,
            stress_command_timeout_secs: d.stress_command_timeout_secs,
            shed_idle_sessions: d.shed_idle_sessions,
            max_buffered_octets: d.max_buffered_octets,
            shutdown_grace_secs: d.shutdown_grace_secs,
        }
    }
}

impl SmtpInConfig {
    /// The checks the listeners would make at start, made when the server's configuration is
    /// loaded so the error names its key (`smtp_in.…`).
    pub fn check(&self) -> Result<(), String> {
        self.limits
            .validate()
            .map_err(|e| format!("smtp_in.limits.{e}"))?;
        if self.max_sessions == 0 {
            return Err("smtp_in.max_sessions: must be > 0".into());
        }
        if self.max_buffered_octets < self.limits.max_message_octets {
            return Err(
                "smtp_in.max_buffered_octets: must be at least smtp_in.limits.max_message_octets"
                    .into(),
            );
        }
        // The listener's own checks of the flood keys; each error starts with its key.
        self.inbound_config("localhost")
            .validate_flood_keys()
            .map_err(|e| format!("smtp_in.{e}"))
    }

    /// The listener settings under the server's `hostname`.
    pub fn inbound_config(&self, hostname: &str) -> InboundConfig {
        InboundConfig {
            hostname: hostname.to_string(),
            limits: self.limits,
            max_sessions: self.max_sessions,
            max_sessions_per_client: self.max_sessions_per_client,
            max_sessions_per_network: self.max_sessions_per_network,
            stress_threshold_percent: self.stress_threshold_percent,
            stress_command_timeout_secs: self.stress_command_timeout_secs,
            shed_idle_sessions: self.shed_idle_sessions,
            max_buffered_octets: self.max_buffered_octets,
            shutdown_grace_secs: self.shutdown_grace_secs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deserializes_with_defaults_and_validates() {
        let c: InboundConfig =
            toml::from_str("hostname = \"mx.example\"\n[limits]\nmax_recipients = 7").unwrap();
        assert_eq!(c.max_sessions, 500);
        assert_eq!(c.max_sessions_per_client, 20);
        assert_eq!(c.max_buffered_octets, 256 << 20);
        assert_eq!(c.limits.max_recipients, 7);
        assert_eq!(c.shutdown_grace(), Duration::from_secs(30));
        assert!(c.validate().is_ok());
        assert!(toml::from_str::<InboundConfig>("hostname = \"a\"\nmax_session = 1").is_err());
        let empty: InboundConfig = toml::from_str("").unwrap();
        assert_eq!(empty, InboundConfig::default());
        assert!(empty.validate().is_ok());
    }

    #[test]
    fn refuses_bad_hostnames_and_zero_sessions() {
        for bad in [
            "",
            "mx example",
            "mx.example\r\n250 x",
            "[127.0.0.1]",
            "-mx.example",
            "mx.",
        ] {
            assert!(
                matches!(
                    InboundConfig::new(bad).validate(),
                    Err(InboundError::InvalidHostname(_))
                ),
                "{bad:?}"
            );
        }
        let mut c = InboundConfig::new("mx.example");
        c.max_sessions = 0;
        assert!(matches!(c.validate(), Err(InboundError::NoSessions)));
        c.max_sessions = 1;
        c.limits.max_errors = 0;
        assert!(matches!(c.validate(), Err(InboundError::Limits(_))));
        c.limits.max_errors = 10;
        c.max_buffered_octets = c.limits.max_message_octets - 1;
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("max_buffered_octets"), "{e}");
        c.max_buffered_octets = 0;
        assert!(c.validate().is_err());
    }

    #[test]
    fn flood_keys_have_defaults_and_errors_name_them() {
        let c = InboundConfig::default();
        assert_eq!(c.max_sessions_per_network, 4 * c.max_sessions_per_client);
        assert_eq!(c.stress_threshold_percent, 75);
        assert_eq!(c.stress_command_timeout(), Duration::from_secs(10));
        assert!(c.shed_idle_sessions);
        let parsed: InboundConfig = toml::from_str(
            "max_sessions_per_network = 0\nstress_threshold_percent = 100\n\
             stress_command_timeout_secs = 300\nshed_idle_sessions = false",
        )
        .unwrap();
        assert!(
            parsed.validate().is_ok(),
            "0 = off, 100 and the full timeout are allowed"
        );
        let mut short = InboundConfig::default();
        short.limits.command_timeout_secs = 4;
        assert!(short.validate().is_ok());
        assert_eq!(
            short.stress_command_timeout(),
            Duration::from_secs(4),
            "the shorter applies"
        );
        assert!(toml::from_str::<InboundConfig>("stress_treshold_percent = 5").is_err());
        assert!(toml::from_str::<InboundConfig>("stress_threshold_percent = 300").is_err());
        for (tune, key) in [
            (
                (|c: &mut InboundConfig| c.max_sessions_per_network = 5) as fn(&mut _),
                "max_sessions_per_network",
            ),
            (
                |c| c.stress_threshold_percent = 101,
                "stress_threshold_percent",
            ),
            (
                |c| c.stress_command_timeout_secs = 0,
                "stress_command_timeout_secs",
            ),
        ] {
            let mut c = InboundConfig::default();
            tune(&mut c);
            let e = c.validate().unwrap_err().to_string();
            assert!(e.starts_with(key), "{key}: {e}");
        }
    }
}
