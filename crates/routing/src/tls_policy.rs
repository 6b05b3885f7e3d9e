//! Per-destination TLS policy: the STARTTLS mode Herald uses by default, the operator's rules
//! (`[[delivery.tls_policy]]`) that override it per MX host, and how an MTA-STS or DANE demand
//! is combined with them ([`TlsPolicy::stricter`]). Pure data and rules, no I/O: the routing
//! decides the [`TlsPolicy`] of a host, the SMTP client enforces it.
//!
//! SECURITY: `mx_suffix` values are operator input, checked by [`validate_rules`]; the names
//! they are matched against come from DNS and are only compared, never interpreted.

use crate::error::SetupError;
use serde::Deserialize;

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
    /// MTA-STS); `herald_smtp_client::TlsInfo::verified` says whether it did.
    Required,
}

/// One per-destination TLS rule (`[[delivery.tls_policy]]`): MX hosts named `mx_suffix` or
/// ending in `.<mx_suffix>` use `mode` instead of the default mode (`delivery.tls`). The first matching rule
/// wins.
///
/// SECURITY: with `mode = "required"` and `verify = true` a copy is never sent in plaintext nor
/// over TLS whose certificate does not verify for the MX name against the trust anchors
/// (`delivery.tls_ca_file` or the system bundle, [`crate::trust`]): the session ends before MAIL and the
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

/// The TLS policy for one MX host: [`policy_for`].
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

/// The TLS policy for `mx_name`: the first matching rule, else `default` without verification.
pub fn policy_for(rules: &[TlsPolicyRule], default: TlsMode, mx_name: &str) -> TlsPolicy {
    match rules.iter().find(|r| r.matches(mx_name)) {
        Some(rule) => TlsPolicy {
            mode: rule.mode,
            verify: rule.verify && rule.mode == TlsMode::Required,
        },
        None => TlsPolicy {
            mode: default,
            verify: false,
        },
    }
}

/// Refuses a rule whose suffix is not a domain name or that asks for verification without
/// requiring TLS.
pub fn validate_rules(rules: &[TlsPolicyRule]) -> Result<(), SetupError> {
    for rule in rules {
        let suffix = rule.mx_suffix.trim_matches('.');
        if suffix.is_empty()
            || !suffix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            return Err(SetupError::invalid(
                "delivery.tls_policy.mx_suffix",
                "must be a domain name",
            ));
        }
        if rule.verify && rule.mode != TlsMode::Required {
            return Err(SetupError::invalid(
                "delivery.tls_policy.verify",
                "needs mode = \"required\"",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
