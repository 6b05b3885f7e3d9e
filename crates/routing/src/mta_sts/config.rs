//! `[delivery.mta_sts]`: whether MTA-STS is used, the cache bound, the fetch timeout, and (for
//! tests only) the policy host's port. Checked once by [`MtaStsConfig::validate`], which
//! [`crate::ClientConfig::validate`] calls.

use crate::config::secs;
use crate::error::SetupError;
use serde::Deserialize;
use std::time::Duration;

/// MTA-STS (`[delivery.mta_sts]`): before a recipient domain is routed, its `_mta-sts` TXT record
/// is looked up and its policy fetched over HTTPS (or taken from the cache); an `enforce` policy
/// limits delivery to the MX hosts it names, over TLS whose certificate verifies.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MtaStsConfig {
    /// Look up and apply recipient domains' MTA-STS policies.
    pub enabled: bool,
    /// Domains whose policy is cached at most (in memory and in `<data_dir>/mta-sts.json`).
    pub cache_max_domains: usize,
    /// The whole policy fetch: address lookup, connect, TLS, request and response.
    #[serde(rename = "fetch_timeout_secs", deserialize_with = "secs")]
    pub fetch_timeout: Duration,
    /// Port of the policy host's HTTPS server. RFC 8461 says 443; another value is only for
    /// tests that serve policies on a loopback port.
    pub https_port: u16,
}

impl Default for MtaStsConfig {
    fn default() -> Self {
        MtaStsConfig {
            enabled: true,
            cache_max_domains: 10_000,
            fetch_timeout: Duration::from_secs(10),
            https_port: 443,
        }
    }
}

impl MtaStsConfig {
    /// Refuses a cache that holds nothing or a fetch that could never finish or hang routing.
    pub fn validate(&self) -> Result<(), SetupError> {
        if !(1..=1_000_000).contains(&self.cache_max_domains) {
            return Err(SetupError::invalid(
                "delivery.mta_sts.cache_max_domains",
                "must be between 1 and 1000000",
            ));
        }
        if self.fetch_timeout.is_zero() || self.fetch_timeout > Duration::from_secs(300) {
            return Err(SetupError::invalid(
                "delivery.mta_sts.fetch_timeout_secs",
                "must be greater than 0 and at most 300",
            ));
        }
        if self.https_port == 0 {
            return Err(SetupError::invalid(
                "delivery.mta_sts.https_port",
                "must not be 0",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mta_sts_config_is_checked() {
        MtaStsConfig::default()
            .validate()
            .expect("defaults are valid");
        let bad = [
            MtaStsConfig {
                cache_max_domains: 0,
                ..MtaStsConfig::default()
            },
            MtaStsConfig {
                fetch_timeout: Duration::ZERO,
                ..MtaStsConfig::default()
            },
            MtaStsConfig {
                https_port: 0,
                ..MtaStsConfig::default()
            },
        ];
        for c in bad {
            let err = c.validate().expect_err("invalid");
            assert!(err.to_string().contains("delivery.mta_sts."), "{err}");
        }
    }
}
