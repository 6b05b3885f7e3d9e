//! The accept loop: one listening socket, a session slot per connection (from the listener's
//! own board, see `board.rs`), a task per session, and the graceful drain on shutdown
//! (mini-redis style).
//!
//! Invariants: a slot is taken before a session task is spawned and released when it ends, so
//! at most `max_sessions` sessions hold one. In SMTP mode a full board first sheds the session
//! idle longest with no MAIL yet; when there is none, the connection gets
//! `421 4.3.2` with a single non-blocking write (no task, no wait) and is closed. Before that,
//! in SMTP mode, a client slot is taken from [`InboundShared`]: an address already at
//! `max_sessions_per_client`, or a /24 (/48) at `max_sessions_per_network`, gets `421 4.7.0`
//! the same way, without touching the session slots. Both slots move into the session task
//! and are released when it ends, however it ends (RAII). Each listener has its own board:
//! SMTP clients can never take the LMTP listener's slots. [`serve`] returns only after every
//! session it started has ended.
//!
//! Limits: accept errors that concern one connection are skipped; others (e.g. out of file
//! descriptors) back off from 10 ms to ~1.3 s and end the listener after 64 in a row.
//!
//! SECURITY: the only work done before a slot is held is `accept`, one short lock of the
//! client table, one short lock of the board (a scan of at most `max_sessions` slots when it
//! is full) and, when refused, one write.

use herald_smtp::{replies, Canned, Mode};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn, Instrument};

use crate::board::{BoardPolicy, SessionBoard, StressBand};
use crate::connection::{self, SessionContext};
use crate::shared::{ClientLimits, ClientSlot, InboundShared};
use crate::tls::InboundTls;
use crate::{InboundConfig, InboundError, InboundHandler, Refusal};

/// Consecutive listener-level accept failures before giving up.
const MAX_ACCEPT_FAILURES: u32 = 64;

/// Serves `mode` on `listener` until `shutdown` is cancelled, then drains the sessions (see the
/// crate docs) and returns. Returns early with an error only for an invalid `config` or a
/// listener that keeps failing (its sessions are drained first).
pub async fn serve<H: InboundHandler>(
    listener: TcpListener,
    mode: Mode,
    config: InboundConfig,
    handler: Arc<H>,
    shutdown: CancellationToken,
) -> Result<(), InboundError> {
    serve_with_tls(listener, mode, config, None, handler, shutdown).await
}

/// [`serve`] with TLS: STARTTLS offered in EHLO (`tls.implicit == false`, SMTP only), or TLS
/// from the first byte (`tls.implicit == true`, RFC 8314 submissions). LMTP never offers
/// STARTTLS; implicit TLS in LMTP mode is refused as a configuration error.
pub async fn serve_with_tls<H: InboundHandler>(
    listener: TcpListener,
    mode: Mode,
    config: InboundConfig,
    tls: Option<InboundTls>,
    handler: Arc<H>,
    shutdown: CancellationToken,
) -> Result<(), InboundError> {
    let shared = InboundShared::new(&config);
    serve_shared(listener, mode, config, tls, shared, handler, shutdown).await
}

/// [`serve_with_tls`] with state shared with other listeners: the buffer budget and the
/// per-client session counts (see [`InboundShared`]). `config.max_buffered_octets` is ignored
/// here; the budget is the one `shared` was made with.
pub async fn serve_shared<H: InboundHandler>(
    listener: TcpListener,
    mode: Mode,
    config: InboundConfig,
    tls: Option<InboundTls>,
    shared: Arc<InboundShared>,
    handler: Arc<H>,
    shutdown: CancellationToken,
) -> Result<(), InboundError> {
    config.validate()?;
    if mode == Mode::Lmtp && tls.as_ref().is_some_and(|t| t.implicit) {
        return Err(InboundError::TlsInLmtp);
    }
    let ctx = Arc::new(SessionContext {
        mode,
        hostname: config.hostname.as_str().into(),
        limits: config.limits,
        shutdown_grace: config.shutdown_grace(),
        tls,
        budget: shared.budget().clone(),
        stress_command_timeout: config.stress_command_timeout(),
    });
    // LMTP is not limited per client, stressed nor shed: its peer is the MTA in front, one
    // trusted address (see `InboundConfig::max_sessions_per_client`).
    let (per_client, policy) = match mode {
        Mode::Smtp => (
            Some(ClientLimits {
                per_client: config.max_sessions_per_client,
                per_network: config.max_sessions_per_network,
            }),
            BoardPolicy {
                max_sessions: config.max_sessions,
                stress: StressBand::new(config.max_sessions, config.stress_threshold_percent),
                shed_idle: config.shed_idle_sessions,
            },
        ),
        Mode::Lmtp => (
            None,
            BoardPolicy {
                max_sessions: config.max_sessions,
                stress: None,
                shed_idle: false,
            },
        ),
    };
    let board = SessionBoard::new(policy);
    let sessions = TaskTracker::new();
    // A child token, so a failing listener can drain its own sessions without cancelling the
    // caller's token.
    let drain = shutdown.child_token();
    info!(?mode, addr = ?listener.local_addr().ok(), max_sessions = config.max_sessions, "listening");
    let mut accepting = Acceptor {
        listener: &listener,
        stress: board.stress(),
        board,
        shared,
        per_client,
        ctx,
        handler,
        sessions: &sessions,
        drain: &drain,
    };
    let result = accepting.run().await;
    drop(listener);
    drain.cancel();
    sessions.close();
    sessions.wait().await;
    info!(?mode, "listener stopped");
    result
}

struct Acceptor<'a, H> {
    listener: &'a TcpListener,
    board: Arc<SessionBoard>,
    /// The board's stress flag, to report its changes.
    stress: watch::Receiver<bool>,
    shared: Arc<InboundShared>,
    /// Per-client and per-network limits; `None`: clients are not counted (LMTP).
    per_client: Option<ClientLimits>,
    ctx: Arc<SessionContext>,
    handler: Arc<H>,
    sessions: &'a TaskTracker,
    drain: &'a CancellationToken,
}

impl<H: InboundHandler> Acceptor<'_, H> {
    async fn run(&mut self) -> Result<(), InboundError> {
        let mut failures = 0u32;
        loop {
            let accepted = tokio::select! {
                () = self.drain.cancelled() => return Ok(()),
                accepted = self.listener.accept() => accepted,
                Ok(()) = self.stress.changed() => {
                    self.report_stress();
                    continue;
                }
            };
            match accepted {
                Ok((stream, peer)) => {
                    failures = 0;
                    self.shared.accepted();
                    self.start_session(stream, peer);
                }
                Err(e) if concerns_one_connection(&e) => debug!(error = %e, "accept skipped"),
                Err(e) => {
                    failures += 1;
                    let what = match self.ctx.mode {
                        Mode::Smtp => "SMTP",
                        Mode::Lmtp => "LMTP",
                    };
                    self.shared.accept_failed(what, &e);
                    if failures >= MAX_ACCEPT_FAILURES {
                        return Err(InboundError::Accept(e));
                    }
                    let pause = Duration::from_millis(10 << failures.min(7));
                    warn!(error = %e, ?pause, "accept failed; backing off");
                    tokio::select! {
                        () = self.drain.cancelled() => return Ok(()),
                        () = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    }

    fn report_stress(&mut self) {
        let stressed = *self.stress.borrow_and_update();
        let open = self.board.open();
        match stressed {
            true => {
                warn!(mode = ?self.ctx.mode, open, "stress mode on: idle sessions get the short command timeout")
            }
            false => info!(mode = ?self.ctx.mode, open, "stress mode off"),
        }
        self.handler.stress_changed(self.ctx.mode, stressed);
    }

    fn start_session(&self, stream: TcpStream, peer: SocketAddr) {
        // The client slot first: a refused client must not hold, even briefly, a session slot
        // that another client could have had (nor shed anyone for it).
        let slot: Option<ClientSlot> = match self.per_client {
            None => None,
            Some(limits) => match self.shared.admit(peer.ip(), limits) {
                Ok(slot) => Some(slot),
                Err(refusal) => {
                    self.handler.refused(refusal, peer);
                    // Debug, not info: this is what a flood looks like; the counter shows it.
                    debug!(%peer, reason = refusal.word(), "session limit of a client reached; connection refused");
                    let reply = match refusal {
                        Refusal::TooManyFromNetwork => replies::TOO_MANY_FROM_NETWORK,
                        _ => replies::TOO_MANY_CONNECTIONS,
                    };
                    return self.refuse(&stream, peer, reply);
                }
            },
        };
        let Some(admitted) = self.board.admit() else {
            info!(%peer, "session limit reached; connection refused");
            return self.refuse(&stream, peer, replies::SERVICE_UNAVAILABLE);
        };
        if admitted.shed_one {
            debug!(%peer, "all session slots taken: the longest-idle session was shed");
        }
        let session_slot = admitted.slot;
        let stress = self.board.stress();
        // We batch replies ourselves; Nagle would only add a delayed-ACK wait per batch.
        if let Err(error) = stream.set_nodelay(true) {
            debug!(%error, %peer, "could not set TCP_NODELAY");
        }
        let implicit_tls = self.ctx.tls.as_ref().is_some_and(|t| t.implicit);
        let span = tracing::info_span!("session", %peer, mode = ?self.ctx.mode, implicit_tls);
        let (ctx, handler, drain) = (self.ctx.clone(), self.handler.clone(), self.drain.clone());
        self.sessions.spawn(
            async move {
                let seat = connection::Seat {
                    slot: session_slot,
                    stress,
                };
                connection::run(stream, peer, ctx, handler, drain, seat).await;
                drop(slot);
            }
            .instrument(span),
        );
    }
}

impl<H> Acceptor<'_, H> {
    /// One best-effort, non-blocking write of `reply` (a 421), then close. A fresh socket's send
    /// buffer always has room for one reply line. On an implicit-TLS listener nothing is
    /// written: a plaintext 421 means nothing to a TLS client.
    fn refuse(&self, stream: &TcpStream, peer: SocketAddr, reply: Canned) {
        if self.ctx.tls.as_ref().is_some_and(|t| t.implicit) {
            return;
        }
        let wire = reply.reply().to_wire();
        if let Err(error) = stream.try_write(wire.as_bytes()) {
            debug!(%error, %peer, "could not send 421 to refused connection");
        }
    }
}

/// Accept errors caused by one connection (it was reset before we took it), not the listener.
fn concerns_one_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}
