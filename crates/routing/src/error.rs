//! Errors of setting up routing: a refused configuration value or an unreadable system DNS
//! configuration. Lookup results are not errors of this kind: resolution failures are
//! [`crate::resolve::ResolveError`] (with `is_permanent()`), and MTA-STS and DANE problems are
//! outcomes of their lookups, not errors.

/// Setting up routing failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("invalid configuration: {key} {reason}")]
    InvalidConfig {
        key: &'static str,
        reason: &'static str,
    },
    #[error("cannot read the system DNS configuration: {0}")]
    SystemDns(#[source] hickory_resolver::ResolveError),
}

impl SetupError {
    /// A refused value, named by its TOML key.
    pub fn invalid(key: &'static str, reason: &'static str) -> SetupError {
        SetupError::InvalidConfig { key, reason }
    }

    /// True when the operator's configuration is at fault (not the host's DNS setup).
    pub fn is_config(&self) -> bool {
        matches!(self, SetupError::InvalidConfig { .. })
    }
}
