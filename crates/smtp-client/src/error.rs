//! Errors of the SMTP client boundary, with classifiers so that callers never match on text.
//!
//! * [`ConfigError`]: the client's configuration was refused.
//! * [`SessionError`]: one SMTP session failed. It names the host, the address and the [`Stage`],
//!   and its [`SessionErrorKind`] says what went wrong. [`SessionError::synthetic_reply`] turns it
//!   into the 4xx reply recorded for copies that were not delivered, e.g.
//!   `451 4.4.1 connect to mx.example.com[192.0.2.1]:25: timed out`.
//! * Resolution and routing setup errors live in `herald_routing` (`ResolveError`, `SetupError`).
//!
//! SECURITY: [`Reply`] values inside errors come from hostile servers; their text has had control
//! characters replaced by the reply reader, so it is safe to log.

use herald_types::{EnhancedStatus, LocalResource, Reply, ReplyError};
use std::fmt;
use std::io;
use std::net::SocketAddr;

/// The client's configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid configuration: {key} {reason}")]
    InvalidConfig {
        key: &'static str,
        reason: &'static str,
    },
    /// A routing setting embedded in `[delivery]` (TLS rules, MTA-STS, DANE) was refused.
    #[error(transparent)]
    Routing(#[from] herald_routing::SetupError),
    /// `[[delivery.egress]]`, `[[delivery.egress_pool]]` or `default_egress_pool` was refused
    /// (the message names the key).
    #[error("{0}")]
    Egress(String),
}

impl ConfigError {
    pub(crate) fn invalid(key: &'static str, reason: &'static str) -> ConfigError {
        ConfigError::InvalidConfig { key, reason }
    }
}

/// Where in the session something happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    Connect,
    Banner,
    Ehlo,
    Helo,
    StartTls,
    TlsHandshake,
    Rset,
    Mail,
    Rcpt,
    Data,
    /// The body and its terminating dot, and the final reply.
    DataEnd,
    Quit,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Connect => "connect",
            Stage::Banner => "initial greeting",
            Stage::Ehlo => "EHLO",
            Stage::Helo => "HELO",
            Stage::StartTls => "STARTTLS",
            Stage::TlsHandshake => "TLS handshake",
            Stage::Rset => "RSET",
            Stage::Mail => "MAIL FROM",
            Stage::Rcpt => "RCPT TO",
            Stage::Data => "DATA",
            Stage::DataEnd => "end of DATA",
            Stage::Quit => "QUIT",
        })
    }
}

/// The server broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("reply line longer than {} octets", crate::limits::MAX_LINE_LEN)]
    LineTooLong,
    #[error("reply longer than {} lines", crate::limits::MAX_LINES)]
    TooManyLines,
    #[error("malformed reply: {0}")]
    Malformed(#[from] ReplyError),
    #[error("unexpected reply: {0}")]
    Unexpected(Reply),
    #[error("accepted DATA although the transaction had failed: {0}")]
    DataAfterFailure(Reply),
    #[error("sent data that was not asked for")]
    Unsolicited,
}

/// STARTTLS could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS is required but the server does not offer STARTTLS")]
    NotOffered,
    #[error("TLS is required but STARTTLS was refused: {0}")]
    Refused(Reply),
    #[error("TLS handshake failed: {0}")]
    Handshake(#[source] io::Error),
    /// A `verify = true` policy rule, and the certificate does not verify for the MX name.
    #[error("TLS policy requires a verified certificate: {0}")]
    NotVerified(String),
    #[error("cannot build the TLS client configuration: {0}")]
    Config(#[source] rustls::Error),
    /// The recipient domain's MTA-STS policy (`enforce`) demanded what failed.
    #[error("MTA-STS policy requires verified TLS: {0}")]
    MtaSts(#[source] Box<TlsError>),
    /// The handshake failed because the MX host's TLSA records do not authenticate its
    /// certificate (said plainly, instead of rustls's nested error).
    #[error("{0}")]
    NotAuthenticated(crate::dane_verify::DaneError),
    /// The MX host's DANE TLSA records demanded what failed: TLS, and a certificate they
    /// authenticate (RFC 7672).
    #[error("DANE TLSA records require authenticated TLS: {0}")]
    Dane(#[source] Box<TlsError>),
}

/// What went wrong in a session.
#[derive(Debug, thiserror::Error)]
pub enum SessionErrorKind {
    /// Connection refused, host or network unreachable, …
    #[error("{0}")]
    Connect(#[source] io::Error),
    /// No complete reply (or write) within the stage's timeout, or a reply that stalled.
    #[error("timed out")]
    Timeout,
    /// The reply was arriving, slowly but steadily, past the first pass's patience: a tarpit.
    /// The host answers; it belongs in the slow lane, not in host health's down list.
    #[error("replies too slowly (tarpit)")]
    TooSlow,
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// End of stream or reset.
    #[error("lost connection")]
    ServerClosed,
    /// Another I/O error while talking.
    #[error("{0}")]
    Io(#[source] io::Error),
    /// The server refused the session: 4xx/5xx greeting, refused EHLO/HELO, or 421 (closing)
    /// at any point.
    #[error("host said: {0}")]
    Rejected(Reply),
    /// `send` on a connection that an earlier error (or a cancelled `send`) left unusable.
    #[error("connection is no longer usable")]
    Unusable,
    /// The local source address (an egress source) could not be bound: our
    /// configuration or this machine, never the remote host's doing.
    #[error("cannot bind local source address {source_ip}: {error}")]
    Bind {
        source_ip: std::net::IpAddr,
        #[source]
        error: io::Error,
    },
}

/// One SMTP session failed: where, with whom, and why. Boxed so that `Result`s on the hot path
/// stay one pointer wide.
#[derive(Debug)]
pub struct SessionError(Box<Inner>);

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.synthetic_reply().text)
    }
}

impl std::error::Error for SessionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0.kind)
    }
}

#[derive(Debug)]
struct Inner {
    host: String,
    addr: SocketAddr,
    stage: Stage,
    kind: SessionErrorKind,
}

impl SessionError {
    pub(crate) fn new(host: &str, addr: SocketAddr, stage: Stage, kind: SessionErrorKind) -> Self {
        SessionError(Box::new(Inner {
            host: host.to_string(),
            addr,
            stage,
            kind,
        }))
    }

    /// What went wrong.
    pub fn kind(&self) -> &SessionErrorKind {
        &self.0.kind
    }

    /// Where in the session it went wrong.
    pub fn stage(&self) -> Stage {
        self.0.stage
    }

    /// The MX name the session was for.
    pub fn host(&self) -> &str {
        &self.0.host
    }

    pub fn addr(&self) -> SocketAddr {
        self.0.addr
    }

    /// Applies `f` to the TLS error inside, if that is what this is.
    pub(crate) fn map_tls(mut self, f: impl FnOnce(TlsError) -> TlsError) -> SessionError {
        let kind = std::mem::replace(&mut self.0.kind, SessionErrorKind::Unusable);
        self.0.kind = match kind {
            SessionErrorKind::Tls(t) => SessionErrorKind::Tls(f(t)),
            other => other,
        };
        self
    }

    /// True when the host (not this one conversation) is the problem and it should count against
    /// the host in host health: unreachable, hung, broken or refusing sessions. A 421 in the
    /// middle of a transaction (typically a per-session limit) is not: the host answers. Nor is
    /// a host falling short of one recipient domain's MTA-STS policy: it may serve other domains
    /// well, and marking it down would hold their mail too. The same holds for DANE: domains
    /// whose MX answers are not signed still reach the host without it.
    ///
    /// Never a shortage on this machine ([`SessionError::local_resource`]): out of descriptors,
    /// memory or local ports, every connect fails whoever the peer is.
    pub fn is_host_problem(&self) -> bool {
        if self.local_resource().is_some() {
            return false;
        }
        match self.kind() {
            SessionErrorKind::Tls(TlsError::MtaSts(_) | TlsError::Dane(_)) => false,
            SessionErrorKind::Rejected(_) => matches!(
                self.stage(),
                Stage::Banner | Stage::Ehlo | Stage::Helo | Stage::StartTls
            ),
            SessionErrorKind::Unusable
            | SessionErrorKind::Bind { .. }
            | SessionErrorKind::TooSlow => false,
            _ => true,
        }
    }

    /// The local resource this machine ran out of, when that is why the session failed
    /// (EMFILE, ENFILE, ENOMEM, ENOBUFS, EADDRNOTAVAIL on connect, bind or a write): a local
    /// condition to back off from globally, never a verdict on the peer.
    ///
    /// An egress source address that cannot be bound (EADDRNOTAVAIL at bind: the address is not
    /// on this host) is not one: it is that source's configuration, and stays a
    /// [`SessionErrorKind::Bind`] failure of that connection only.
    pub fn local_resource(&self) -> Option<LocalResource> {
        match self.kind() {
            SessionErrorKind::Connect(e) | SessionErrorKind::Io(e) => LocalResource::of(e),
            SessionErrorKind::Bind { error, .. } => {
                LocalResource::of(error).filter(|r| *r != LocalResource::LocalAddress)
            }
            _ => None,
        }
    }

    /// True when the host answered, but slower than the first pass waits (a tarpit): it should
    /// be served by the slow lane, which reads its replies to the end.
    pub fn is_tarpit(&self) -> bool {
        matches!(self.kind(), SessionErrorKind::TooSlow)
    }

    /// The 4xx reply recorded for copies this error left undelivered. Always transient: one
    /// failed session says nothing final about a recipient.
    pub fn synthetic_reply(&self) -> Reply {
        let peer = self.peer();
        let stage = self.stage();
        let (status, text) = match self.kind() {
            SessionErrorKind::Connect(e) if LocalResource::of(e).is_some() => (
                (4, 3, 0),
                format!("connect to {peer}: short of a local resource here: {e}"),
            ),
            SessionErrorKind::Connect(e) => ((4, 4, 1), format!("connect to {peer}: {e}")),
            SessionErrorKind::Timeout if stage == Stage::Connect => {
                ((4, 4, 1), format!("connect to {peer}: timed out"))
            }
            SessionErrorKind::Timeout => (
                (4, 4, 2),
                format!("conversation with {peer} timed out during {stage}"),
            ),
            SessionErrorKind::TooSlow => (
                (4, 4, 2),
                format!(
                    "{peer} replies too slowly (tarpit) during {stage}: moved to the slow lane"
                ),
            ),
            SessionErrorKind::ServerClosed => (
                (4, 4, 2),
                format!("lost connection with {peer} during {stage}"),
            ),
            SessionErrorKind::Io(e) => (
                (4, 4, 2),
                format!("error talking to {peer} during {stage}: {e}"),
            ),
            SessionErrorKind::Protocol(p) => (
                (4, 5, 0),
                format!("protocol error with {peer} after {stage}: {p}"),
            ),
            SessionErrorKind::Tls(t) => ((4, 7, 5), format!("TLS with {peer}: {t}")),
            SessionErrorKind::Rejected(r) => (
                (4, 4, 0),
                format!("host {peer} said: {r} (in reply to {stage})"),
            ),
            SessionErrorKind::Unusable => ((4, 4, 0), format!("connection to {peer} unusable")),
            SessionErrorKind::Bind { source_ip, error } => (
                (4, 3, 5),
                format!(
                    "connect to {peer} from {source_ip}: cannot bind the source address: {error}"
                ),
            ),
        };
        let (c, s, d) = status;
        Reply::new(451, Some(EnhancedStatus::new(c, s, d)), text)
    }

    fn peer(&self) -> String {
        format!(
            "{}[{}]:{}",
            self.0.host,
            self.0.addr.ip(),
            self.0.addr.port()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(stage: Stage, kind: SessionErrorKind) -> SessionError {
        let addr: SocketAddr = "192.0.2.1:25".parse().expect("addr");
        SessionError::new("mx.example.com", addr, stage, kind)
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_local_shortage_is_never_the_hosts_problem() {
        // EMFILE, ENFILE, ENOMEM, ENOBUFS, EADDRNOTAVAIL (Linux numbers).
        for errno in [24, 23, 12, 105, 99] {
            let e = std::io::Error::from_raw_os_error(errno);
            let local = LocalResource::of(&e).expect("a local shortage");
            let err = err(Stage::Connect, SessionErrorKind::Connect(e));
            assert_eq!(err.local_resource(), Some(local));
            assert!(!err.is_host_problem(), "errno {errno}");
            assert!(err.synthetic_reply().to_string().starts_with("451 4.3.0 "));
        }
        let source_ip = "192.0.2.9".parse().expect("ip");
        let unbound = SessionErrorKind::Bind {
            source_ip,
            error: std::io::Error::from(std::io::ErrorKind::AddrNotAvailable),
        };
        let e = err(Stage::Connect, unbound);
        assert!(
            e.local_resource().is_none(),
            "a misconfigured source is not a shortage"
        );
        assert!(!e.is_host_problem());
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let err = err(Stage::Connect, SessionErrorKind::Connect(refused));
        assert!(err.local_resource().is_none() && err.is_host_problem());
    }

    #[test]
    fn synthetic_reply_for_connect_timeout() {
        let r = err(Stage::Connect, SessionErrorKind::Timeout).synthetic_reply();
        assert_eq!(
            r.to_string(),
            "451 4.4.1 connect to mx.example.com[192.0.2.1]:25: timed out"
        );
        assert!(r.is_transient());
    }

    #[test]
    fn host_problem_classification() {
        let reply = Reply::new(421, None, "busy");
        assert!(err(Stage::Banner, SessionErrorKind::Rejected(reply.clone())).is_host_problem());
        assert!(!err(Stage::Rcpt, SessionErrorKind::Rejected(reply)).is_host_problem());
        assert!(err(Stage::Banner, SessionErrorKind::Timeout).is_host_problem());
        assert!(!err(Stage::Mail, SessionErrorKind::Unusable).is_host_problem());
        let tarpit = err(Stage::Banner, SessionErrorKind::TooSlow);
        assert!(!tarpit.is_host_problem(), "a tarpit answers: not down");
        assert!(tarpit.is_tarpit());
        assert!(tarpit.synthetic_reply().is_transient());
    }
}
