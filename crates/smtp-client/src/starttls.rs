//! STARTTLS for one session under its TLS policy (see `connection.rs` for the rules): whether to
//! send it, the upgrade itself, and what a refusal, a failed handshake or an unverified
//! certificate means for the session.
//!
//! SECURITY: after the `220` to STARTTLS nothing may be buffered (plaintext injected ahead of the
//! handshake would otherwise be read as if it came over TLS), so buffered octets there are a
//! protocol error. Under a `verify` policy the certificate is checked right after the handshake,
//! before the second EHLO, so nothing of the session goes to an unverified peer; under DANE it
//! is checked in the handshake itself (`crate::dane_verify`).

use crate::command::{exchange, hello};
use crate::config::ClientConfig;
use crate::error::{ProtocolError, SessionError, SessionErrorKind, Stage, TlsError};
use crate::extensions::Extensions;
use crate::reply_reader::ReplyReader;
use crate::stream::Stream;
use crate::tls::TlsInfo;
use herald_routing::TlsaSet;
use herald_routing::{TlsMode, TlsPolicy};
use herald_types::Reply;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;

/// What came of a STARTTLS command.
enum StartTls {
    Upgraded(Box<TlsStream<TcpStream>>, TlsInfo),
    /// The server answered with something other than 220; the session stays in plaintext.
    Refused(TcpStream, Reply),
}

/// The TLS policy of one connection and whether MTA-STS or DANE is behind it.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub tls: TlsPolicy,
    pub mta_sts: bool,
    /// The MX host's usable DANE TLSA records: the handshake must be authenticated by them.
    pub dane: Option<Arc<TlsaSet>>,
}

impl Policy {
    /// TLS failures under DANE or an enforced MTA-STS policy say so (the operator reading the
    /// deferral needs to know the recipient's DNS asked for it).
    pub fn attribute(&self, e: SessionError) -> SessionError {
        if self.dane.is_some() {
            e.map_tls(|t| TlsError::Dane(Box::new(t)))
        } else if self.mta_sts {
            e.map_tls(|t| TlsError::MtaSts(Box::new(t)))
        } else {
            e
        }
    }
}

/// The session after the STARTTLS decision.
pub(crate) struct Secured {
    pub stream: Stream,
    /// From the EHLO after the handshake when TLS is on, the first EHLO otherwise.
    pub ext: Extensions,
    pub tls: Option<TlsInfo>,
    pub tls_time: Option<Duration>,
    /// The second EHLO, when there was one.
    pub helo_time: Duration,
}

/// Applies the TLS policy: STARTTLS when offered and allowed, then EHLO again.
#[allow(clippy::too_many_arguments)] // the session's parts, passed once from `open`
pub(crate) async fn secure(
    tcp: TcpStream,
    reader: &mut ReplyReader,
    ext: Extensions,
    mx_name: &str,
    addr: SocketAddr,
    cfg: &ClientConfig,
    policy: &Policy,
    try_tls: bool,
) -> Result<Secured, SessionError> {
    let fail = |stage, kind| SessionError::new(mx_name, addr, stage, kind);
    let dane = policy.dane.clone();
    let policy = policy.tls;
    let plain = |tcp, ext| Secured {
        stream: Stream::Plain(tcp),
        ext,
        tls: None,
        tls_time: None,
        helo_time: Duration::ZERO,
    };
    if !(try_tls && ext.starttls) {
        if policy.mode == TlsMode::Required {
            return Err(fail(Stage::StartTls, TlsError::NotOffered.into()));
        }
        return Ok(plain(tcp, ext));
    }
    let tls_start = Instant::now();
    match start_tls(tcp, reader, mx_name, addr, cfg, dane).await? {
        StartTls::Upgraded(_, info) if policy.verify && !info.verified => {
            let why = info.verify_error.unwrap_or_else(|| "not verified".into());
            Err(fail(Stage::StartTls, TlsError::NotVerified(why).into()))
        }
        StartTls::Upgraded(mut s, info) => {
            let tls_time = Some(tls_start.elapsed());
            let helo_start = Instant::now();
            let ext = hello(s.as_mut(), reader, cfg)
                .await
                .map_err(|(stage, k)| fail(stage, k))?;
            Ok(Secured {
                stream: Stream::Tls(s),
                ext,
                tls: Some(info),
                tls_time,
                helo_time: helo_start.elapsed(),
            })
        }
        StartTls::Refused(_, reply) if policy.mode == TlsMode::Required => {
            Err(fail(Stage::StartTls, TlsError::Refused(reply).into()))
        }
        StartTls::Refused(tcp, _) => Ok(plain(tcp, ext)),
    }
}

async fn start_tls(
    mut tcp: TcpStream,
    reader: &mut ReplyReader,
    mx_name: &str,
    addr: SocketAddr,
    cfg: &ClientConfig,
    dane: Option<Arc<TlsaSet>>,
) -> Result<StartTls, SessionError> {
    let fail = |stage, kind| SessionError::new(mx_name, addr, stage, kind);
    let reply = exchange(&mut tcp, reader, b"STARTTLS\r\n", cfg)
        .await
        .map_err(|k| fail(Stage::StartTls, k))?;
    if reply.code == 421 {
        return Err(fail(Stage::StartTls, SessionErrorKind::Rejected(reply)));
    }
    if reply.code != 220 {
        return Ok(StartTls::Refused(tcp, reply));
    }
    if reader.buffered() > 0 {
        return Err(fail(Stage::StartTls, ProtocolError::Unsolicited.into()));
    }
    let ctx = cfg
        .tls_cache
        .get(cfg.tls_ca_file.as_deref())
        .map_err(|e| fail(Stage::TlsHandshake, e.into()))?;
    let handshake = async {
        match dane {
            Some(tlsa) => ctx.handshake_dane(tcp, mx_name, addr, tlsa).await,
            None => ctx.handshake(tcp, mx_name, addr).await,
        }
    };
    match tokio::time::timeout(cfg.command_timeout, handshake).await {
        Err(_elapsed) => Err(fail(Stage::TlsHandshake, SessionErrorKind::Timeout)),
        Ok(Err(e)) => Err(fail(Stage::TlsHandshake, e.into())),
        Ok(Ok((stream, info))) => Ok(StartTls::Upgraded(Box::new(stream), info)),
    }
}
