//! The server's `[http]` table: the public URL in every copy's links, the admin token and the
//! listener's bounds (connections in all and per client, header-read and idle timeouts). Every
//! key has a default and unknown keys are refused; [`HttpConfig::check`] runs when the server's
//! configuration is loaded, so its errors name their key.

use crate::auth::LocalClients;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// The HTTP side: the public URL that unsubscribe links point to.
#[derive(Debug, Clone, Deserialize)]
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
    /// Longest a client may take to send a complete request head, counted from the accept (or
    /// from the first byte of a later request on a kept-alive connection); then the connection
    /// is closed. Slow-header clients (slowloris) hold a connection this long at most.
    pub header_read_timeout_secs: u64,
    /// A kept-alive connection with no request for this long is closed, and so is one whose
    /// request body stops arriving for this long (a stalled upload).
    pub idle_timeout_secs: u64,
    /// Connections open at most. A newcomer beyond it takes the place of the connection idle
    /// longest with no request under way; with none idle it gets 503 and is closed. Counted in
    /// the descriptor budget checked at start.
    pub max_connections: usize,
    /// Connections from one client address (IPv6: one /64) at most, handled as above within
    /// that client's own connections. 0: no limit. Behind a reverse proxy on this host every
    /// client is the proxy's address: raise it (or 0) and let the proxy limit clients.
    pub max_connections_per_client: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            public_base_url: String::new(),
            archive_url: String::new(),
            admin_token: String::new(),
            local_clients: Vec::new(),
            tls_cert_file: None,
            tls_key_file: None,
            tls_from_inbound: false,
            header_read_timeout_secs: 10,
            idle_timeout_secs: 60,
            max_connections: 512,
            max_connections_per_client: 64,
        }
    }
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
        self.check_limits()?;
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

    fn check_limits(&self) -> Result<(), String> {
        if !(1..=3600).contains(&self.header_read_timeout_secs) {
            return Err("http.header_read_timeout_secs: must be 1 to 3600".into());
        }
        if !(1..=86400).contains(&self.idle_timeout_secs) {
            return Err("http.idle_timeout_secs: must be 1 to 86400".into());
        }
        if self.max_connections == 0 {
            return Err("http.max_connections: must be at least 1".into());
        }
        if self.max_connections_per_client > self.max_connections {
            return Err(
                "http.max_connections_per_client: must not exceed http.max_connections (0: no limit)"
                    .into(),
            );
        }
        Ok(())
    }

    /// The listener's bounds.
    pub fn limits(&self) -> crate::conn_table::Limits {
        crate::conn_table::Limits {
            header_read_timeout: std::time::Duration::from_secs(self.header_read_timeout_secs),
            idle_timeout: std::time::Duration::from_secs(self.idle_timeout_secs),
            max_connections: self.max_connections,
            max_per_client: self.max_connections_per_client,
        }
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
    fn listener_bounds_have_operator_defaults_and_name_their_key() {
        let d = HttpConfig::default();
        assert_eq!((d.header_read_timeout_secs, d.idle_timeout_secs), (10, 60));
        assert_eq!((d.max_connections, d.max_connections_per_client), (512, 64));
        assert!(d.check().is_ok());
        let bad = [
            (
                HttpConfig {
                    header_read_timeout_secs: 0,
                    ..HttpConfig::default()
                },
                "http.header_read_timeout_secs:",
            ),
            (
                HttpConfig {
                    idle_timeout_secs: 0,
                    ..HttpConfig::default()
                },
                "http.idle_timeout_secs:",
            ),
            (
                HttpConfig {
                    max_connections: 0,
                    ..HttpConfig::default()
                },
                "http.max_connections:",
            ),
            (
                HttpConfig {
                    max_connections: 10,
                    max_connections_per_client: 11,
                    ..HttpConfig::default()
                },
                "http.max_connections_per_client:",
            ),
        ];
        for (h, key) in bad {
            let e = h.check().expect_err(key);
            assert!(e.starts_with(key), "{e}");
        }
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
