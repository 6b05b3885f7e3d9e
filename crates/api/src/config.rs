//! The server's `[http]` table: the public URL in every copy's links and the admin token. Every
//! key has a default and unknown keys are refused; [`HttpConfig::check`] runs when the server's
//! configuration is loaded, so its errors name their key.

use crate::auth::LocalClients;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The HTTP side: the public URL that unsubscribe links point to.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Base of the one-click unsubscribe URLs put in every copy. Empty: `http://<listen.http>`.
    pub public_base_url: String,
    /// Archive URL put in List-Archive (empty: no List-Archive header).
    pub archive_url: String,
    /// Bearer token for the admin API and the dashboard (`Authorization: Bearer …` or the
    /// dashboard's login cookie). Empty: admin pages and API answer loopback clients only.
    /// The `HERALD_ADMIN_TOKEN` environment variable, when set, overrides it.
    pub admin_token: String,
    /// Which clients count as "local" when no admin token is set: loopback networks or
    /// addresses (`"127.0.0.1"`, `"127.0.0.0/8"`, `"::1"`). Empty: every loopback address.
    /// Only loopback networks are accepted, so this key can narrow who is trusted without a
    /// token, never widen it to the network.
    pub local_clients: Vec<String>,
    /// HTTPS for the API and dashboard with this PEM certificate chain (leaf first) and
    /// `tls_key_file`. Unset (and `tls_from_inbound` false): plain HTTP.
    pub tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) for `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// HTTPS with the `[tls]` certificate inbound SMTP uses, instead of a certificate of its own.
    pub tls_from_inbound: bool,
}

impl HttpConfig {
    /// The configured admin token, `HERALD_ADMIN_TOKEN` first; `None` when empty.
    pub fn admin_token(&self) -> Option<String> {
        std::env::var("HERALD_ADMIN_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| Some(self.admin_token.clone()).filter(|t| !t.is_empty()))
    }

    /// The token must survive a cookie and an `Authorization` header unquoted, and be long
    /// enough not to be guessed; the URL must be one a mail client can open.
    pub fn check(&self) -> Result<(), String> {
        let t = &self.admin_token;
        if !t.is_empty()
            && (t.len() < 16
                || !t
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && !b";,\"\\".contains(&b)))
        {
            return Err(
                "http.admin_token: must be at least 16 printable ASCII characters without ; , \" \\"
                    .into(),
            );
        }
        if !self.public_base_url.is_empty()
            && !self.public_base_url.starts_with("http://")
            && !self.public_base_url.starts_with("https://")
        {
            return Err("http.public_base_url: must start with http:// or https://".into());
        }
        self.local_clients()?;
        match (
            &self.tls_cert_file,
            &self.tls_key_file,
            self.tls_from_inbound,
        ) {
            (Some(_), None, _) | (None, Some(_), _) => {
                return Err(
                    "http.tls_cert_file: needs http.tls_key_file too (and the other way round)"
                        .into(),
                )
            }
            (Some(_), Some(_), true) => {
                return Err("http.tls_from_inbound: set it or http.tls_cert_file, not both".into())
            }
            _ => {}
        }
        Ok(())
    }

    /// True when the API listener speaks HTTPS.
    pub fn tls_enabled(&self) -> bool {
        self.tls_from_inbound || self.tls_cert_file.is_some()
    }

    /// `local_clients` parsed; the error names the key and the entry at fault.
    pub fn local_clients(&self) -> Result<LocalClients, String> {
        LocalClients::parse(&self.local_clients).map_err(|e| format!("http.local_clients: {e}"))
    }

    /// The base URL for unsubscribe links: `public_base_url` without a trailing slash, or the
    /// HTTP listener's own address when it is empty.
    pub fn public_base_url(&self, listen_http: SocketAddr) -> String {
        if self.public_base_url.is_empty() {
            let scheme = if self.tls_enabled() { "https" } else { "http" };
            format!("{scheme}://{listen_http}")
        } else {
            self.public_base_url.trim_end_matches('/').to_string()
        }
    }

    /// The List-Archive URL, `None` when not configured.
    pub fn archive_url(&self) -> Option<String> {
        Some(self.archive_url.clone()).filter(|u| !u.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_falls_back_to_the_listener_and_loses_its_trailing_slash() {
        let listen = SocketAddr::from(([127, 0, 0, 1], 8025));
        let mut h = HttpConfig::default();
        assert_eq!(h.public_base_url(listen), "http://127.0.0.1:8025");
        assert_eq!(h.archive_url(), None);
        h.public_base_url = "https://lists.example.org/".into();
        assert_eq!(h.public_base_url(listen), "https://lists.example.org");
    }

    #[test]
    fn check_names_the_key_at_fault() {
        let bad_url = HttpConfig {
            public_base_url: "ftp://x".into(),
            ..HttpConfig::default()
        };
        let e = bad_url.check().expect_err("not http(s)");
        assert!(e.starts_with("http.public_base_url:"), "{e}");
        for token in ["short", "sixteen-chars-but;semicolon"] {
            let h = HttpConfig {
                admin_token: token.into(),
                ..HttpConfig::default()
            };
            let e = h.check().expect_err(token);
            assert!(e.starts_with("http.admin_token:"), "{token}: {e}");
        }
        let good = HttpConfig {
            admin_token: "0123456789abcdef".into(),
            ..HttpConfig::default()
        };
        assert!(good.check().is_ok());
    }

    #[test]
    fn tls_keys_come_in_pairs_and_switch_the_base_url_to_https() {
        let listen = SocketAddr::from(([127, 0, 0, 1], 8025));
        let half = HttpConfig {
            tls_cert_file: Some("cert.pem".into()),
            ..HttpConfig::default()
        };
        assert!(half
            .check()
            .expect_err("half")
            .starts_with("http.tls_cert_file:"));
        let both = HttpConfig {
            tls_cert_file: Some("cert.pem".into()),
            tls_key_file: Some("key.pem".into()),
            tls_from_inbound: true,
            ..HttpConfig::default()
        };
        assert!(both
            .check()
            .expect_err("both")
            .starts_with("http.tls_from_inbound:"));
        let inbound = HttpConfig {
            tls_from_inbound: true,
            ..HttpConfig::default()
        };
        assert!(inbound.check().is_ok());
        assert_eq!(inbound.public_base_url(listen), "https://127.0.0.1:8025");
    }

    #[test]
    fn local_clients_accept_loopback_only_and_name_the_key() {
        let mut h = HttpConfig {
            local_clients: vec!["127.0.0.1".into(), "127.0.1.0/24".into(), "::1".into()],
            ..HttpConfig::default()
        };
        assert!(h.check().is_ok());
        for bad in [
            "10.0.0.1",
            "0.0.0.0/0",
            "127.0.0.0/4",
            "not an address",
            "127.0.0.1/33",
            "",
        ] {
            h.local_clients = vec![bad.into()];
            let e = h.check().expect_err(bad);
            assert!(e.starts_with("http.local_clients:"), "{bad}: {e}");
        }
    }
}
