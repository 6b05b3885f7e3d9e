//! `[imap]`: where the archive is served over IMAP and the limits every session lives under.
//! Off when `listen` and `tls_listen` are both absent.

use serde::Deserialize;
use std::net::SocketAddr;

/// The `[imap]` section.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ImapSection {
    /// Plain IMAP (port 143 style). With `[tls]` set it offers STARTTLS and refuses LOGIN and
    /// AUTHENTICATE PLAIN until the client has started TLS (RFC 9051 §6.2.3: LOGINDISABLED);
    /// anonymous reading (AUTHENTICATE ANONYMOUS) stays open, it carries no secret.
    pub listen: Option<SocketAddr>,
    /// Implicit TLS (port 993 style, RFC 8314) with the `[tls]` certificate; needs `[tls]`.
    pub tls_listen: Option<SocketAddr>,
    /// Sessions open at once over both listeners; beyond, a newcomer gets `* BYE` and is closed.
    pub max_connections: usize,
    /// Sessions one client address may hold at once.
    pub max_connections_per_client: usize,
    /// An authenticated session (IDLE included) that sends nothing for this long is logged out.
    /// RFC 9051 §5.4: at least 30 minutes.
    pub idle_timeout_secs: u64,
    /// A session that has not logged in within this long is closed.
    pub login_timeout_secs: u64,
    /// Longest command, literals included (bytes). A longer one is refused (`BAD`) when its
    /// literal is announced, or ends the session when it arrives without one.
    pub max_command_bytes: u32,
    /// Commands answered `BAD` in a row before the session is closed.
    pub max_bad_commands: u32,
}

impl Default for ImapSection {
    fn default() -> Self {
        ImapSection {
            listen: None,
            tls_listen: None,
            max_connections: 256,
            max_connections_per_client: 16,
            idle_timeout_secs: 30 * 60,
            login_timeout_secs: 60,
            max_command_bytes: 64 * 1024,
            max_bad_commands: 16,
        }
    }
}

impl ImapSection {
    /// Whether any IMAP listener is configured.
    pub fn enabled(&self) -> bool {
        self.listen.is_some() || self.tls_listen.is_some()
    }

    /// Checks what serde cannot: a problem names its key.
    pub fn check(&self, tls_configured: bool) -> Result<(), (String, String)> {
        let bad = |key: &str, why: &str| Err((format!("imap.{key}"), why.to_string()));
        if self.tls_listen.is_some() && !tls_configured {
            return bad(
                "tls_listen",
                "implicit TLS needs [tls] cert_file and key_file",
            );
        }
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1");
        }
        if self.max_connections_per_client == 0 {
            return bad("max_connections_per_client", "must be at least 1");
        }
        if self.idle_timeout_secs < 30 * 60 {
            return bad(
                "idle_timeout_secs",
                "RFC 9051 asks for at least 1800 (30 minutes) so IDLE clients are not cut off",
            );
        }
        if self.max_command_bytes < 1024 {
            return bad("max_command_bytes", "must be at least 1024");
        }
        Ok(())
    }
}
