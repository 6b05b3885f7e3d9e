//! Listener configuration, embedded in the server's TOML and checked once at start-up.
//!
//! Invariant: a config that passed [`InboundConfig::validate`] has a hostname that is a valid
//! domain (it is spliced into the banner, every EHLO reply and every `Received:` header), sane
//! [`Limits`], and at least one session slot.
//!
//! SECURITY: `max_sessions` × `limits.max_message_octets` is the worst-case memory the listener
//! can be made to hold; size them together.

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
    }
}
