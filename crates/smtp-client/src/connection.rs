//! One outbound SMTP session: connect, greeting, EHLO (or HELO), STARTTLS, EHLO again; then
//! transactions ([`Connection::send`], in `transaction.rs`) until [`Connection::quit`].
//!
//! Every step is bounded by the [`ClientConfig`] timeouts — connect, the whole greeting, each
//! reply, the TLS handshake — so a hung or dead host costs a worker at most those seconds
//! (seeds/000: a hung host must not hold a worker for minutes per step). The reply reader bounds
//! reply size ([`crate::reply_reader`]).
//!
//! TLS policy ([`TlsMode`], per MX host from [`ClientConfig::tls_for`], made stricter by an
//! enforced MTA-STS policy in [`Connection::connect_with`], or required and authenticated by
//! DANE TLSA records in [`Connection::connect_dane`]): `Disabled` never sends STARTTLS;
//! `Opportunistic` uses it when offered, continues in plaintext when the server refuses it with a
//! 4xx/5xx, and reconnects once in plaintext when the handshake itself fails; `Required` turns all
//! of those into errors, and with `verify` so is a certificate that does not verify (checked
//! right after the handshake, before anything else is sent).
//!
//! SECURITY: the server is hostile. After the `220` to STARTTLS nothing may be buffered
//! (plaintext injected ahead of the handshake would otherwise be read as if it came over TLS),
//! so buffered octets there are a protocol error. The HELO name is validated by the config.

use crate::command::{hello, read_error, write_all};
use crate::config::ClientConfig;
use crate::error::{ProtocolError, SessionError, SessionErrorKind, Stage, TlsError};
use crate::extensions::Extensions;
use crate::reply_reader::{Patience, ReplyReader};
use crate::starttls::{secure, Policy, Secured};
use crate::stream::Stream;
use crate::tls::TlsInfo;
use herald_routing::TlsaSet;
use herald_routing::{TlsMode, TlsPolicy};
use herald_types::{RcptOutcome, Reply};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

/// One personalized copy to deliver: one return path, one recipient, one DATA payload.
#[derive(Debug, Clone)]
pub struct OutgoingCopy<'a> {
    /// The envelope sender (VERP); empty for the null sender `<>`.
    pub return_path: &'a str,
    pub rcpt: &'a str,
    /// The DATA payload: CRLF line endings, dot-stuffed, without the final `.\r\n`.
    pub data: &'a [u8],
    /// DSN parameters (RFC 3461) of a message Herald relays on: written only when the server
    /// offers DSN, dropped otherwise (§4).
    pub dsn: Option<&'a herald_types::Dsn>,
    /// Set by [`Connection::send`]; `None` afterwards means "not (certainly) delivered, retry".
    pub outcome: Option<RcptOutcome>,
    /// Time from writing this copy's MAIL FROM to its last reply (the delivery log's `xdelay`).
    pub xdelay: Option<Duration>,
}

impl<'a> OutgoingCopy<'a> {
    /// With DSN parameters to pass on (see [`OutgoingCopy::dsn`]).
    pub fn with_dsn(mut self, dsn: Option<&'a herald_types::Dsn>) -> Self {
        self.dsn = dsn;
        self
    }

    /// True when the envelope needs SMTPUTF8 (RFC 6531): the return path or the recipient has
    /// UTF-8 beyond ASCII (domains are A-labels, so only a local part can).
    pub fn needs_smtputf8(&self) -> bool {
        !self.return_path.is_ascii() || !self.rcpt.is_ascii()
    }

    pub fn new(return_path: &'a str, rcpt: &'a str, data: &'a [u8]) -> Self {
        OutgoingCopy {
            return_path,
            rcpt,
            data,
            dsn: None,
            outcome: None,
            xdelay: None,
        }
    }
}

/// How long the session set-up took (for the delivery log's `delays=` breakdown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionTimings {
    /// TCP connect.
    pub connect: Duration,
    /// From connected to the complete greeting.
    pub banner: Duration,
    /// EHLO/HELO, both of them when STARTTLS was used.
    pub helo: Duration,
    /// STARTTLS command and handshake.
    pub tls: Option<Duration>,
}

/// An open SMTP client session.
#[derive(Debug)]
pub struct Connection {
    pub(crate) stream: Stream,
    pub(crate) reader: ReplyReader,
    pub(crate) host: String,
    pub(crate) addr: SocketAddr,
    pub(crate) command_timeout: Duration,
    pub(crate) data_timeout: Duration,
    /// How patient to be with a reply that trickles (the lane's; see `reply_reader`).
    pub(crate) patience: Patience,
    greeting: Reply,
    pub(crate) ext: Extensions,
    tls: Option<TlsInfo>,
    timings: ConnectionTimings,
    /// False once anything left the session in an unknown state (an error, a 421, a cancelled
    /// `send`); such a connection is only dropped.
    pub(crate) reusable: bool,
    /// The last transaction ended without a final reply: RSET before the next MAIL.
    pub(crate) need_rset: bool,
    /// Reused for every command group so a copy costs no allocation.
    pub(crate) wbuf: Vec<u8>,
    pub(crate) transactions: u64,
}

impl Connection {
    /// Opens a session with `mx_name` at `addr` (the port in `addr` is used as given).
    pub async fn connect(
        addr: SocketAddr,
        mx_name: &str,
        cfg: &ClientConfig,
    ) -> Result<Connection, SessionError> {
        Self::connect_with(addr, mx_name, cfg, false).await
    }

    /// Like [`Connection::connect`], for a recipient domain whose MTA-STS policy is enforced
    /// (`mta_sts_enforce`): TLS is then required and its certificate must verify for `mx_name`
    /// whatever the configured rules say (the stricter applies), and a failure of either names
    /// MTA-STS ([`TlsError::MtaSts`]).
    pub async fn connect_with(
        addr: SocketAddr,
        mx_name: &str,
        cfg: &ClientConfig,
        mta_sts_enforce: bool,
    ) -> Result<Connection, SessionError> {
        Self::connect_from(None, addr, mx_name, cfg, mta_sts_enforce).await
    }

    /// Like [`Connection::connect_with`], from the local address `source` (an egress source:
    /// the socket is bound to it before it connects); `None` lets the system choose.
    /// A source that cannot be bound is [`SessionErrorKind::Bind`], not a host problem.
    pub async fn connect_from(
        source: Option<IpAddr>,
        addr: SocketAddr,
        mx_name: &str,
        cfg: &ClientConfig,
        mta_sts_enforce: bool,
    ) -> Result<Connection, SessionError> {
        let mut policy = cfg.tls_for(mx_name);
        if mta_sts_enforce {
            policy = policy.stricter(TlsPolicy::VERIFIED);
        }
        let policy = Policy {
            tls: policy,
            mta_sts: mta_sts_enforce,
            dane: None,
        };
        Self::open_with_fallback(source, addr, mx_name, cfg, policy).await
    }

    /// Like [`Connection::connect`], for an MX host whose DANE TLSA records apply (RFC 7672):
    /// TLS is required whatever the configured rules say, and the handshake succeeds only when
    /// `tlsa` authenticates the server's certificate ([`crate::dane_verify::DaneVerifier`]). Failures
    /// name DANE ([`TlsError::Dane`]); there is no plaintext fallback. A `verify = true` rule
    /// for the host still applies on top (the stricter applies).
    pub async fn connect_dane(
        addr: SocketAddr,
        mx_name: &str,
        cfg: &ClientConfig,
        tlsa: Arc<TlsaSet>,
    ) -> Result<Connection, SessionError> {
        Self::connect_dane_from(None, addr, mx_name, cfg, tlsa).await
    }

    /// [`Connection::connect_dane`] from the local address `source` (see
    /// [`Connection::connect_from`]).
    pub async fn connect_dane_from(
        source: Option<IpAddr>,
        addr: SocketAddr,
        mx_name: &str,
        cfg: &ClientConfig,
        tlsa: Arc<TlsaSet>,
    ) -> Result<Connection, SessionError> {
        let required = TlsPolicy {
            mode: TlsMode::Required,
            verify: false,
        };
        let policy = Policy {
            tls: cfg.tls_for(mx_name).stricter(required),
            mta_sts: false,
            dane: Some(tlsa),
        };
        Self::open_with_fallback(source, addr, mx_name, cfg, policy).await
    }

    /// Opens the session; under an opportunistic policy a failed handshake is retried once in
    /// plaintext.
    async fn open_with_fallback(
        source: Option<IpAddr>,
        addr: SocketAddr,
        mx_name: &str,
        cfg: &ClientConfig,
        policy: Policy,
    ) -> Result<Connection, SessionError> {
        let try_tls = policy.tls.mode != TlsMode::Disabled;
        let first = Self::open(source, addr, mx_name, cfg, &policy, try_tls).await;
        match first {
            Err(e)
                if policy.tls.mode == TlsMode::Opportunistic
                    && matches!(e.kind(), SessionErrorKind::Tls(TlsError::Handshake(_))) =>
            {
                tracing::info!(host = mx_name, %addr, error = %e, "TLS handshake failed, retrying in plaintext");
                Self::open(source, addr, mx_name, cfg, &policy, false).await
            }
            other => other,
        }
    }

    async fn open(
        source: Option<IpAddr>,
        addr: SocketAddr,
        mx_name: &str,
        cfg: &ClientConfig,
        policy: &Policy,
        try_tls: bool,
    ) -> Result<Connection, SessionError> {
        let fail = |stage, kind| SessionError::new(mx_name, addr, stage, kind);
        let started = Instant::now();
        let mut tcp = tcp_connect(source, addr, cfg.connect_timeout)
            .await
            .map_err(|k| fail(Stage::Connect, k))?;
        let mut timings = ConnectionTimings {
            connect: started.elapsed(),
            ..ConnectionTimings::default()
        };
        let mut reader = ReplyReader::new();
        let banner_start = Instant::now();
        let greeting = reader
            .read_reply(
                &mut tcp,
                cfg.patience().deadline(banner_start + cfg.banner_timeout),
            )
            .await
            .map_err(|e| fail(Stage::Banner, read_error(e)))?;
        check_greeting(&greeting).map_err(|k| fail(Stage::Banner, k))?;
        timings.banner = banner_start.elapsed();
        let helo_start = Instant::now();
        let ext = hello(&mut tcp, &mut reader, cfg)
            .await
            .map_err(|(stage, k)| fail(stage, k))?;
        timings.helo = helo_start.elapsed();

        let secured = secure(tcp, &mut reader, ext, mx_name, addr, cfg, policy, try_tls)
            .await
            .map_err(|e| policy.attribute(e))?;
        let Secured {
            stream,
            ext,
            tls,
            tls_time,
            helo_time,
        } = secured;
        timings.tls = tls_time;
        timings.helo += helo_time;
        Ok(Connection {
            stream,
            reader,
            host: mx_name.to_string(),
            addr,
            command_timeout: cfg.command_timeout,
            data_timeout: cfg.data_timeout,
            patience: cfg.patience(),
            greeting,
            ext,
            tls,
            timings,
            reusable: true,
            need_rset: false,
            wbuf: Vec::with_capacity(16 * 1024),
            transactions: 0,
        })
    }

    /// Ends the session politely (QUIT, bounded by the command timeout) when it is still in a
    /// known state; otherwise just closes it.
    pub async fn quit(mut self) {
        if self.reusable {
            let deadline = Instant::now() + self.command_timeout;
            if write_all(&mut self.stream, b"QUIT\r\n", deadline)
                .await
                .is_ok()
            {
                // The 221 is read only so the server sees an orderly close; it changes nothing.
                let _ = self.reader.read_reply(&mut self.stream, deadline).await;
            }
        }
        let _ = tokio::time::timeout(self.command_timeout, self.stream.shutdown()).await;
    }

    /// True while more transactions may be sent on this connection.
    pub fn is_reusable(&self) -> bool {
        self.reusable
    }

    /// Resolves once the server has closed the connection, or broken the silence an idle
    /// session owes us (anything sent unasked, typically a 421 at its idle timeout), and marks
    /// the session unusable; pending while the server stays silent. A worker waiting between
    /// batches (for the journal, for copies) watches this so that a peer's close is answered
    /// by ours at once: otherwise the socket sits in CLOSE-WAIT holding a descriptor for as
    /// long as the wait lasts, and a paused spool lasts far longer than any server waits.
    /// Cancel-safe: it only waits for the socket to be readable, then reads what is there.
    pub async fn peer_closed(&mut self) {
        let mut unasked = [0u8; 64];
        // EOF, bytes nobody asked for, or an error: in every case the session is over.
        let _ = self.stream.read(&mut unasked).await;
        self.reusable = false;
    }

    /// What the server announced after the (last) EHLO.
    pub fn extensions(&self) -> &Extensions {
        &self.ext
    }

    /// The negotiated TLS parameters, None for a plaintext session.
    pub fn tls_info(&self) -> Option<&TlsInfo> {
        self.tls.as_ref()
    }

    pub fn timings(&self) -> ConnectionTimings {
        self.timings
    }

    /// The server's 220 greeting.
    pub fn greeting(&self) -> &Reply {
        &self.greeting
    }

    /// The MX name this session was opened for.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Transactions that reached a final reply on this connection.
    pub fn transactions(&self) -> u64 {
        self.transactions
    }

    pub(crate) fn fail(&self, stage: Stage, kind: SessionErrorKind) -> SessionError {
        SessionError::new(&self.host, self.addr, stage, kind)
    }

    /// Reads the next reply, which must be complete within `timeout` (and the lane's patience).
    pub(crate) async fn read(
        &mut self,
        stage: Stage,
        timeout: Duration,
    ) -> Result<Reply, SessionError> {
        let deadline = self.patience.deadline(Instant::now() + timeout);
        match self.reader.read_reply(&mut self.stream, deadline).await {
            Ok(reply) => Ok(reply),
            Err(e) => Err(self.fail(stage, read_error(e))),
        }
    }
}

/// The socket for `addr`, bound to `source` first when one is given (the port is left to the
/// system).
fn socket_from(source: IpAddr, addr: SocketAddr) -> Result<TcpSocket, SessionErrorKind> {
    let bind = |error| SessionErrorKind::Bind {
        source_ip: source,
        error,
    };
    if source.is_ipv4() != addr.is_ipv4() {
        return Err(bind(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the source and the destination are of different address families",
        )));
    }
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(bind)?;
    socket.bind(SocketAddr::new(source, 0)).map_err(bind)?;
    Ok(socket)
}

async fn tcp_connect(
    source: Option<IpAddr>,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream, SessionErrorKind> {
    let connect = async {
        match source {
            Some(ip) => socket_from(ip, addr)?
                .connect(addr)
                .await
                .map_err(SessionErrorKind::Connect),
            None => TcpStream::connect(addr)
                .await
                .map_err(SessionErrorKind::Connect),
        }
    };
    let tcp = match tokio::time::timeout(timeout, connect).await {
        Err(_elapsed) => return Err(SessionErrorKind::Timeout),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(tcp)) => tcp,
    };
    // Commands are written in whole groups; Nagle would only delay the group's last segment.
    tcp.set_nodelay(true).map_err(SessionErrorKind::Io)?;
    Ok(tcp)
}

fn check_greeting(greeting: &Reply) -> Result<(), SessionErrorKind> {
    match greeting.code {
        220 => Ok(()),
        400..=599 => Err(SessionErrorKind::Rejected(greeting.clone())),
        _ => Err(ProtocolError::Unexpected(greeting.clone()).into()),
    }
}
