//! The `[accounts]` table: session lifetimes, login throttling, the one-time link's lifetime
//! and the audit log's retention. Every key has a default and unknown keys are refused;
//! [`AccountsConfig::check`] runs when the server's configuration is loaded, so its errors name
//! their key.

use serde::Deserialize;

/// Web accounts and the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccountsConfig {
    /// A session unused for this long ends (the browser must sign in again).
    pub session_idle_secs: u64,
    /// A session ends this long after sign-in, used or not (a stolen cookie does not live on).
    pub session_max_secs: u64,
    /// Mark the session cookie `Secure` even over plain HTTP: for a server behind a
    /// TLS-terminating proxy. It is always `Secure` when the listener speaks HTTPS or
    /// `http.public_base_url` starts with `https://`.
    pub cookie_secure: bool,
    /// How long a mailed one-time sign-in link stays valid.
    pub login_link_secs: u64,
    /// Failed password sign-ins allowed per account and per client address within
    /// `failed_login_window_secs`; the next are answered 429 until the window moves on.
    pub max_failed_logins: u32,
    pub failed_login_window_secs: u64,
    /// Sign-in links mailed to one address per hour (so nobody can mail-bomb it through the
    /// form), and asked for by one client address per hour.
    pub login_links_per_address_per_hour: u32,
    pub login_links_per_client_per_hour: u32,
    /// Audit events older than this are deleted.
    pub audit_retention_days: u32,
}

impl Default for AccountsConfig {
    fn default() -> Self {
        AccountsConfig {
            session_idle_secs: 3600,
            session_max_secs: 12 * 3600,
            cookie_secure: false,
            login_link_secs: 15 * 60,
            max_failed_logins: 5,
            failed_login_window_secs: 15 * 60,
            login_links_per_address_per_hour: 3,
            login_links_per_client_per_hour: 10,
            audit_retention_days: 365,
        }
    }
}

impl AccountsConfig {
    /// Every limit must be usable: zero would lock everybody out or keep nothing.
    pub fn check(&self) -> Result<(), String> {
        let positive = [
            ("session_idle_secs", self.session_idle_secs),
            ("session_max_secs", self.session_max_secs),
            ("login_link_secs", self.login_link_secs),
            ("max_failed_logins", u64::from(self.max_failed_logins)),
            ("failed_login_window_secs", self.failed_login_window_secs),
            (
                "login_links_per_address_per_hour",
                u64::from(self.login_links_per_address_per_hour),
            ),
            (
                "login_links_per_client_per_hour",
                u64::from(self.login_links_per_client_per_hour),
            ),
            ("audit_retention_days", u64::from(self.audit_retention_days)),
        ];
        for (key, v) in positive {
            if v == 0 {
                return Err(format!("accounts.{key}: must be at least 1"));
            }
        }
        if self.session_idle_secs > self.session_max_secs {
            return Err("accounts.session_idle_secs: must not exceed session_max_secs".into());
        }
        if self.login_link_secs > 24 * 3600 {
            return Err("accounts.login_link_secs: at most 86400 (a day)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_errors_name_the_key() {
        assert!(AccountsConfig::default().check().is_ok());
        let c = AccountsConfig {
            max_failed_logins: 0,
            ..AccountsConfig::default()
        };
        assert!(c
            .check()
            .expect_err("zero")
            .starts_with("accounts.max_failed_logins:"));
        let c = AccountsConfig {
            session_idle_secs: 10,
            session_max_secs: 5,
            ..AccountsConfig::default()
        };
        assert!(c
            .check()
            .expect_err("idle > max")
            .starts_with("accounts.session_idle_secs:"));
    }
}
