//! The resolver's typed configuration (`[dns]` in the server's TOML), checked once by
//! [`ResolverConfig::validate`], and the seconds-as-float deserializer the routing and client
//! configs share (`connect_timeout_secs = 0.5`).

use crate::error::SetupError;
use serde::{Deserialize, Deserializer};
use std::net::SocketAddr;
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
    pub fn validate(&self) -> Result<(), SetupError> {
        if self.timeout_ms == 0 {
            return Err(SetupError::invalid(
                "resolver.timeout_ms",
                "must be greater than 0",
            ));
        }
        if self.attempts == 0 {
            return Err(SetupError::invalid(
                "resolver.attempts",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Seconds as an integer or a fraction (`0.5`), refusing negative and absurd values.
pub fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = f64::deserialize(d)?;
    Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        ResolverConfig::default().validate().expect("valid");
        let r = ResolverConfig {
            attempts: 0,
            ..ResolverConfig::default()
        };
        assert!(r.validate().is_err());
    }
}
