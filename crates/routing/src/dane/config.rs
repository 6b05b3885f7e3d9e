//! `[delivery.dane]`: whether DANE is used and how many hosts' TLSA answers are cached. Checked
//! once by [`DaneConfig::validate`], which [`crate::ClientConfig::validate`] calls.
//!
//! The TLSA records looked up are those of the configured delivery port
//! (`_<delivery.port>._tcp.<mx host>`): `_25._tcp` on the Internet, the simulator's port in
//! tests.

use crate::error::SetupError;
use serde::Deserialize;

/// DANE for outbound SMTP (`[delivery.dane]`, RFC 7672): off by default, because it needs the
/// `[dns]` nameservers to be a DNSSEC-validating resolver (most hosts have none locally), whose
/// AD bit Herald then trusts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DaneConfig {
    /// Look up TLSA records for MX hosts of DNSSEC-signed domains and authenticate them by it.
    pub enabled: bool,
    /// MX hosts whose TLSA answers (and address security) are cached at most, each for its TTL.
    pub cache_max_hosts: usize,
}

impl Default for DaneConfig {
    fn default() -> Self {
        DaneConfig {
            enabled: false,
            cache_max_hosts: 10_000,
        }
    }
}

impl DaneConfig {
    /// Refuses a cache that holds nothing or an absurd one.
    pub fn validate(&self) -> Result<(), SetupError> {
        if !(1..=1_000_000).contains(&self.cache_max_hosts) {
            return Err(SetupError::invalid(
                "delivery.dane.cache_max_hosts",
                "must be between 1 and 1000000",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dane_is_off_by_default_and_checked() {
        let d = DaneConfig::default();
        assert!(!d.enabled);
        d.validate().expect("defaults are valid");
        for n in [0, 1_000_001] {
            let bad = DaneConfig {
                cache_max_hosts: n,
                ..DaneConfig::default()
            };
            let err = bad.validate().expect_err("invalid");
            assert!(
                err.to_string().contains("delivery.dane.cache_max_hosts"),
                "{err}"
            );
        }
    }
}
