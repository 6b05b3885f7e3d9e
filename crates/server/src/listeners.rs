//! The listening sockets (bound by the caller, or here from the config) and the wiring of the
//! SMTP, submissions and LMTP listeners to the enqueue path's `ListHandler`.
//!
//! The listeners share one buffer budget (`smtp_in.max_buffered_octets` bounds them together)
//! and one per-client and per-network table (a client's SMTP and submissions sessions count
//! together; LMTP is not counted). They do not share session slots: each has its own
//! `max_sessions`, so SMTP clients can never take the LMTP listener's slots, and LMTP is never
//! stressed nor shed.

use crate::ServerError;
use herald_config::Config;
use herald_enqueue::ListHandler;
use herald_inbound::{InboundError, InboundShared, Mode};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The three listening sockets, bound by the caller.
pub struct Listeners {
    pub smtp: TcpListener,
    pub lmtp: TcpListener,
    pub http: TcpListener,
}

impl Listeners {
    /// Binds the addresses from the configuration.
    pub async fn bind(cfg: &Config) -> Result<Listeners, ServerError> {
        Ok(Listeners {
            smtp: bind(cfg.listen.smtp, "SMTP").await?,
            lmtp: bind(cfg.listen.lmtp, "LMTP").await?,
            http: bind(cfg.listen.http, "HTTP").await?,
        })
    }

    /// Binds all three on 127.0.0.1 with ports chosen by the system (tests, the demo).
    pub async fn bind_ephemeral() -> Result<Listeners, ServerError> {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        Ok(Listeners {
            smtp: bind(any, "SMTP").await?,
            lmtp: bind(any, "LMTP").await?,
            http: bind(any, "HTTP").await?,
        })
    }

    /// (smtp, lmtp, http) local addresses.
    pub fn addrs(&self) -> std::io::Result<(SocketAddr, SocketAddr, SocketAddr)> {
        Ok((
            self.smtp.local_addr()?,
            self.lmtp.local_addr()?,
            self.http.local_addr()?,
        ))
    }
}

async fn bind(addr: SocketAddr, what: &'static str) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { what, addr, source })
}

/// The inbound TLS configuration and the implicit-TLS submissions socket, when configured.
pub(crate) type InboundTls = Option<(herald_inbound::ServedCert, Option<TcpListener>)>;

/// Loads the certificate and binds the submissions port (a bad certificate or an unbindable
/// port stops the start before anything is opened).
pub(crate) async fn bind_tls(config: &Config) -> Result<InboundTls, ServerError> {
    let Some(tls) = config.inbound_tls()? else {
        return Ok(None);
    };
    let submissions = match config.listen.submissions {
        Some(addr) => Some(bind(addr, "SMTP submissions (implicit TLS)").await?),
        None => None,
    };
    Ok(Some((tls, submissions)))
}

/// A running listener task and its name for the log.
pub(crate) type ListenerTask = (&'static str, JoinHandle<Result<(), InboundError>>);

/// Starts the SMTP and LMTP listeners (and submissions with TLS). `tls` makes SMTP offer
/// STARTTLS; the implicit-TLS listener is started only with it. Returns the tasks and what
/// the listeners share (readiness asks it whether they can accept).
pub(crate) fn spawn(
    config: &Config,
    smtp: TcpListener,
    lmtp: TcpListener,
    tls: InboundTls,
    handler: Arc<ListHandler>,
    shutdown: &CancellationToken,
) -> (Vec<ListenerTask>, Arc<InboundShared>) {
    let inbound = config.smtp_in.inbound_config(&config.hostname);
    let shared = InboundShared::new(&inbound);
    let mut tasks = Vec::with_capacity(3);
    let starttls = tls.as_ref().map(|(cert, _)| herald_inbound::InboundTls {
        config: cert.config.clone(),
        implicit: false,
    });
    let listen = |listener, mode, tls| {
        tokio::spawn(herald_inbound::serve_shared(
            listener,
            mode,
            inbound.clone(),
            tls,
            shared.clone(),
            handler.clone(),
            shutdown.clone(),
        ))
    };
    if let Some((cert, Some(listener))) = tls {
        let implicit = herald_inbound::InboundTls {
            config: cert.config,
            implicit: true,
        };
        tasks.push(("SMTPS", listen(listener, Mode::Smtp, Some(implicit))));
    }
    tasks.push(("SMTP", listen(smtp, Mode::Smtp, starttls)));
    tasks.push(("LMTP", listen(lmtp, Mode::Lmtp, None)));
    (tasks, shared)
}
