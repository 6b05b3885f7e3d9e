//! Listener configuration, embedded in the server's TOML and checked once at start-up.
//!
//! Invariant: a config that passed [`InboundConfig::validate`] has a hostname that is a valid
//! domain (it is spliced into the banner, every EHLO reply and every `Received:` header), sane
//! [`Limits`], and at least one session slot.
//!
//! SECURITY: message bodies buffered by all sessions together are bounded by
//! `max_buffered_octets` (shared by the listeners given one [`crate::InboundShared`]), not by
//! `max_sessions` × `limits.max_message_octets`; `max_sessions_per_client` keeps one address
//! from taking every session slot.

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
            max_buffered_octets: 256 * 1024 * 1024,
            shutdown_grace_secs: 30,
        }
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
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
        Ok(())
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
}
