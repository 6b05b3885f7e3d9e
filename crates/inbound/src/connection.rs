//! One connection: reads bytes, feeds the [`Session`], runs the handler for the actions that need
//! it, and writes each batch of replies in one write.
//!
//! Loop: feed everything buffered (answering every complete pipelined command, RFC 2920 §3.1),
//! then flush the batch, then read once more. Replies are therefore written only when the
//! session needs input, after a handler call has returned: the 250 after DATA always follows the
//! handler's fsync.
//!
//! Invariants: at most [`READ_CHUNK`] octets are read at a time, and the session keeps less than
//! one line of them, so the read buffer stays under `READ_CHUNK` + one line. Every wait on the
//! peer (read or write) is bounded by the session's current timeout; on expiry the peer gets
//! `421 4.4.2` and the connection is closed.
//!
//! Deadlines: besides the idle limit per read, the input the peer owes has a deadline counted
//! from our last reply: a whole command line within `command_timeout_secs`, the whole DATA body
//! within `data_deadline_secs` of the 354. From our last reply rather than from the first byte
//! of the line: it is the RFC 5321 §4.5.3.2.7 server timeout (the wait for the next command),
//! a peer cannot add an idle period before its first byte to a trickled line, and it needs no
//! state about partial lines. Pipelined commands are answered in one batch, and each batch
//! restarts the clock, so a pipelining peer is never cut off early. A DATA phase cut off this
//! way drops the body (and its share of the buffer budget) without handing it over.
//!
//! Stress (see `board.rs`): while the listener is under stress and the session has no
//! transaction, the command deadline is at most `stress_command_timeout_secs` from our last
//! reply; a change of the flag wakes a waiting session, so one already waiting when stress
//! begins gets the short deadline too (and is cut at once if it has waited longer). A session
//! shed by the board gets `421 4.7.0` if it can be written without waiting and is closed
//! without the lingering drain: its slot already belongs to a newcomer. A session that was
//! shed just as it gave MAIL closes before any handler call of that transaction.
//!
//! Shutdown: once the token is cancelled, a session between transactions gets `421 4.3.2` at
//! once; one inside a transaction may finish it (and gets `421 4.3.2` right after), but only
//! until the grace period ends. Handler calls in progress are never interrupted.
//!
//! TLS: on [`Action::StartTls`] the queued replies (ending with `220 2.0.0`) are flushed, the
//! read buffer is emptied (CVE-2011-0411: plaintext pipelined after STARTTLS is never
//! interpreted), the handshake runs within the command timeout, and the session restarts in the
//! greeting state. On an implicit-TLS listener the handshake precedes the banner. A failed
//! handshake ends the connection.
//!
//! SECURITY: the peer controls timing and volume only; every byte is interpreted by the
//! `smtp` session. Closing drains unread input briefly (bounded in time and octets) so the kernel
//! does not reset the connection and destroy our last reply.

use bytes::BytesMut;
use herald_smtp::{replies, Action, BufferBudget, Canned, Envelope, Limits, Mode, Session};
use herald_types::Reply;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{sleep_until, timeout, timeout_at, Instant};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::answers::Answers;
use crate::board::SessionSlot;
use crate::tls::{InboundTls, Stream};
use crate::{received, InboundHandler, InboundMessage, Refusal};

/// Octets read per read call.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// How long a closing connection drains the peer's unread input.
const LINGER: Duration = Duration::from_secs(2);
/// How much unread input a closing connection drains before giving up.
const LINGER_MAX_OCTETS: usize = 64 * 1024;

/// What every session of one listener shares.
#[derive(Debug)]
pub(crate) struct SessionContext {
    pub mode: Mode,
    pub hostname: Arc<str>,
    pub limits: Limits,
    pub shutdown_grace: Duration,
    /// TLS for this listener, when a certificate is configured (never for LMTP).
    pub tls: Option<InboundTls>,
    /// The global budget message bodies are buffered against (shared by listeners).
    pub budget: Arc<BufferBudget>,
    /// The command deadline of an idle session with no MAIL yet while under stress.
    pub stress_command_timeout: Duration,
}

/// A session's place on its listener's board: its slot, and the listener's stress flag.
#[derive(Debug)]
pub(crate) struct Seat {
    pub slot: SessionSlot,
    pub stress: watch::Receiver<bool>,
}

/// How a session ended: expected outcomes, not errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionEnd {
    /// QUIT, or the error limit.
    Closed,
    /// The peer closed the connection.
    PeerGone,
    TimedOut,
    ShutDown,
    /// Shed by the board to admit a newcomer.
    Shed,
}

/// A connection that failed; logged, never propagated.
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    #[error("peer did not read our replies within the timeout")]
    WriteTimeout,
    #[error("TLS handshake failed: {0}")]
    Handshake(io::Error),
    #[error("TLS handshake timed out")]
    HandshakeTimeout,
    /// Shed while writing or in a TLS handshake (not a failure: see [`SessionEnd::Shed`]).
    #[error("shed to admit a newcomer")]
    Shed,
}

/// Where [`Connection::process`] stopped.
enum Processed {
    /// Every complete command is answered; read more.
    NeedInput,
    /// The session asked for a TLS handshake.
    StartTls,
    Closed,
    /// Shed just as it began a transaction: close before running it.
    Shed,
}

/// Why [`Connection::wait_for_input`] returned.
enum Wake {
    Input,
    Eof,
    /// The deadline passed; which one is the refusal reported.
    TimedOut(Refusal),
    ShutdownStarted,
    GraceExpired,
    /// Stress mode began or ended: the deadline is recomputed.
    StressChanged,
    Shed,
}

struct Connection<H: InboundHandler> {
    stream: Stream,
    peer: SocketAddr,
    ctx: Arc<SessionContext>,
    handler: Arc<H>,
    session: Session,
    buf: BytesMut,
    /// Replies waiting for the next flush.
    out: Vec<u8>,
    shutdown: CancellationToken,
    /// Set once shutdown has been seen: the session must be gone by then.
    drain_deadline: Option<Instant>,
    /// When the input the peer owes (a command line, or the DATA body) must be complete;
    /// restarted by every reply we write (see the module docs).
    input_deadline: Instant,
    /// When we last wrote a reply (the stress deadline counts from it).
    last_reply: Instant,
    seat: Seat,
    /// The handler's answers at RCPT, handed back with the message (no second lookup).
    answers: Answers<H::Recipient>,
}

/// Runs one session to its end, then closes the connection.
pub(crate) async fn run<H: InboundHandler>(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<SessionContext>,
    handler: Arc<H>,
    shutdown: CancellationToken,
    seat: Seat,
) {
    let mut session =
        Session::new(ctx.mode, ctx.limits, ctx.hostname.clone()).with_budget(ctx.budget.clone());
    let stream = match &ctx.tls {
        Some(tls) if tls.implicit => {
            // Under stress a handshake idler gets the short timeout like any idler.
            let limit = match *seat.stress.borrow() {
                true => ctx.stress_command_timeout,
                false => ctx.limits.command_timeout(),
            };
            let shaking = handshake(stream, tls, limit);
            match unless_shed(seat.slot.shed_signal(), shaking)
                .await
                .and_then(|r| r)
            {
                Ok(stream) => {
                    session = session.with_tls_active();
                    stream
                }
                Err(ConnectionError::Shed) => {
                    // Nothing to say in plaintext to a TLS client; just close.
                    handler.refused(Refusal::Shed, peer);
                    debug!("shed during the implicit TLS handshake");
                    return;
                }
                Err(error) => {
                    debug!(%error, "implicit TLS handshake failed");
                    return;
                }
            }
        }
        Some(_) => {
            session = session.with_starttls(true);
            Stream::Plain(stream)
        }
        None => Stream::Plain(stream),
    };
    let ctx_command_timeout = ctx.limits.command_timeout();
    let ctx_max_recipients = ctx.limits.max_recipients;
    let now = Instant::now();
    let mut conn = Connection {
        stream,
        peer,
        ctx,
        handler,
        session,
        buf: BytesMut::with_capacity(READ_CHUNK),
        out: Vec::new(),
        shutdown,
        drain_deadline: None,
        input_deadline: now + ctx_command_timeout,
        last_reply: now,
        seat,
        answers: Answers::new(ctx_max_recipients),
    };
    match conn.drive().await {
        Ok(SessionEnd::Shed) | Err(ConnectionError::Shed) => conn.close_shed().await,
        Ok(end) => {
            debug!(?end, "session ended");
            conn.linger_close().await;
        }
        Err(error) => {
            debug!(%error, "session failed");
            conn.linger_close().await;
        }
    }
}

impl<H: InboundHandler> Connection<H> {
    async fn drive(&mut self) -> Result<SessionEnd, ConnectionError> {
        let greeting = self.session.greeting();
        self.queue(&greeting);
        loop {
            match self.process().await {
                Processed::Closed => {
                    self.flush().await?;
                    return Ok(SessionEnd::Closed);
                }
                Processed::StartTls => {
                    self.flush().await?;
                    self.start_tls().await?;
                    continue;
                }
                Processed::Shed => return Ok(SessionEnd::Shed),
                Processed::NeedInput => {}
            }
            if self.draining() && !self.session.in_transaction() {
                return self
                    .close_with(replies::SERVICE_UNAVAILABLE, SessionEnd::ShutDown)
                    .await;
            }
            self.flush().await?;
            match self.wait_for_input().await? {
                Wake::Input => {}
                Wake::Eof => return Ok(SessionEnd::PeerGone),
                Wake::StressChanged => {}
                Wake::Shed => return Ok(SessionEnd::Shed),
                Wake::TimedOut(refusal) => {
                    self.handler.refused(refusal, self.peer);
                    match refusal {
                        // Debug: under a flood this is every idler; the counter shows it.
                        Refusal::StressTimeout => debug!("idle under stress; closing"),
                        _ => info!(reason = refusal.word(), "peer too slow; closing"),
                    }
                    return self
                        .close_with(replies::TIMEOUT, SessionEnd::TimedOut)
                        .await;
                }
                Wake::ShutdownStarted => {
                    self.draining();
                }
                Wake::GraceExpired => {
                    return self
                        .close_with(replies::SERVICE_UNAVAILABLE, SessionEnd::ShutDown)
                        .await
                }
            }
        }
    }

    /// Feeds the session until it needs input, carrying out its actions.
    async fn process(&mut self) -> Processed {
        loop {
            let actions = self.session.feed(&mut self.buf);
            // Before any handler call of a transaction: from MAIL on the session may not be
            // shed, unless the board shed it first (then it closes without running it).
            if self.session.in_transaction() && !self.seat.slot.begin_transaction() {
                return Processed::Shed;
            }
            if actions.is_empty() {
                return match self.session.is_closed() {
                    true => Processed::Closed,
                    false => Processed::NeedInput,
                };
            }
            let mut pending = VecDeque::from(actions);
            while let Some(action) = pending.pop_front() {
                match action {
                    Action::Reply(reply) => {
                        if replies::INSUFFICIENT_STORAGE.matches(&reply) {
                            self.handler.refused(Refusal::BufferBudget, self.peer);
                            info!(
                                buffered = self.ctx.budget.used(),
                                "buffer budget spent; transaction refused with 452"
                            );
                        }
                        self.queue(&reply);
                    }
                    Action::CheckRecipient(rcpt) => {
                        let sender = self.session.mail_from().cloned();
                        let verdict = self.handler.check_recipient(&rcpt, sender.as_ref()).await;
                        debug!(%rcpt, accepted = verdict.is_ok(), "recipient checked");
                        let verdict = verdict.map(|answer| self.answers.keep(rcpt, answer));
                        pending.extend(self.session.recipient_checked(verdict));
                    }
                    Action::Message(envelope) => {
                        let verdicts = self.accept(envelope).await;
                        pending.extend(self.session.message_done(verdicts));
                    }
                    Action::StartTls => return Processed::StartTls,
                    Action::Close => return Processed::Closed,
                }
            }
        }
    }

    /// Upgrades the plaintext stream after `220 2.0.0` was written, then restarts the session.
    async fn start_tls(&mut self) -> Result<(), ConnectionError> {
        // CVE-2011-0411: nothing read in plaintext after STARTTLS is ever interpreted.
        self.buf.clear();
        let Some(tls) = self.ctx.tls.clone() else {
            return Err(ConnectionError::Handshake(io::Error::other(
                "TLS not configured",
            )));
        };
        let Stream::Plain(tcp) = std::mem::replace(&mut self.stream, Stream::Gone) else {
            return Err(ConnectionError::Handshake(io::Error::other(
                "already encrypted",
            )));
        };
        let limit = self.wait_limit();
        let shaking = handshake(tcp, &tls, limit);
        self.stream = unless_shed(self.seat.slot.shed_signal(), shaking).await??;
        self.session.tls_started();
        // The handshake was the peer's answer to our 220: the EHLO it owes starts now.
        self.last_reply = Instant::now();
        self.input_deadline = self.last_reply + self.session.input_deadline();
        Ok(())
    }

    /// Prepends the trace header and hands the message to the handler.
    async fn accept(&mut self, mut envelope: Envelope) -> Vec<Reply> {
        let received_at_ms = herald_types::unix_ms_now();
        let tls = self.stream.tls_description();
        let header = received::header(
            &envelope,
            self.peer,
            &self.ctx.hostname,
            received_at_ms,
            tls.as_ref(),
        );
        let mut body = BytesMut::with_capacity(header.len() + envelope.body.len());
        body.extend_from_slice(header.as_bytes());
        body.extend_from_slice(&envelope.body);
        envelope.body = body.freeze();
        info!(
            from = ?envelope.mail_from.as_ref().map(ToString::to_string),
            rcpts = envelope.rcpts.len(),
            octets = envelope.body.len(),
            "message received"
        );
        let recipients = match self.answers.take(&envelope.rcpts) {
            Some(answers) => answers.into_iter().map(Ok).collect(),
            // Ruled out by how the session adds recipients (see `answers.rs`); asking again
            // is the safe way out should that ever change.
            None => {
                let mut again = Vec::with_capacity(envelope.rcpts.len());
                for rcpt in &envelope.rcpts {
                    again.push(
                        self.handler
                            .check_recipient(rcpt, envelope.mail_from.as_ref())
                            .await,
                    );
                }
                again
            }
        };
        let message = InboundMessage {
            envelope,
            peer: self.peer,
            received_at_ms,
            recipients,
        };
        self.handler.accept_message(message).await
    }

    /// True once shutdown has started; the first call after it fixes the grace deadline.
    fn draining(&mut self) -> bool {
        if self.drain_deadline.is_none() && self.shutdown.is_cancelled() {
            self.drain_deadline = Some(Instant::now() + self.ctx.shutdown_grace);
        }
        self.drain_deadline.is_some()
    }

    /// True while the listener is under stress and this session has no transaction: the short
    /// command deadline applies. Marks the flag seen, so only a later change wakes the session.
    fn stressed_idle(&mut self) -> bool {
        let stressed = *self.seat.stress.borrow_and_update();
        stressed && !self.session.in_transaction()
    }

    /// How long one wait on the peer (a write, a handshake) may take.
    fn wait_limit(&mut self) -> Duration {
        match self.stressed_idle() {
            true => self.ctx.stress_command_timeout,
            false => self.ctx.limits.command_timeout(),
        }
    }

    async fn wait_for_input(&mut self) -> Result<Wake, ConnectionError> {
        // The idle limit for this read, but never past the deadline for the whole input, nor,
        // idle under stress, past the short stress deadline.
        let mut deadline_for_input = self.input_deadline;
        let mut timed_out = match self.session.in_data() {
            true => Refusal::DataTimeout,
            false => Refusal::CommandTimeout,
        };
        let watch_stress = !self.session.in_transaction();
        if self.stressed_idle() {
            let stress_deadline = self.last_reply + self.ctx.stress_command_timeout;
            if stress_deadline < deadline_for_input {
                deadline_for_input = stress_deadline;
                timed_out = Refusal::StressTimeout;
            }
        }
        let wake_by = (Instant::now() + self.session.read_timeout()).min(deadline_for_input);
        let deadline = self.drain_deadline;
        let grace = async move {
            match deadline {
                Some(at) => sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        self.buf.reserve(READ_CHUNK);
        // `take` caps one read at READ_CHUNK whatever the buffer's spare capacity.
        let mut reader = (&mut self.stream).take(READ_CHUNK as u64);
        let stress = &mut self.seat.stress;
        let stress_changed = async move {
            // An error means the board is gone, which cannot happen while our slot holds it;
            // never wake for it.
            if stress.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            read = timeout_at(wake_by, reader.read_buf(&mut self.buf)) => match read {
                Err(_elapsed) => Ok(Wake::TimedOut(timed_out)),
                Ok(Ok(0)) => Ok(Wake::Eof),
                Ok(Ok(_)) => Ok(Wake::Input),
                Ok(Err(e)) => Err(e.into()),
            },
            () = self.shutdown.cancelled(), if deadline.is_none() => Ok(Wake::ShutdownStarted),
            () = grace => Ok(Wake::GraceExpired),
            () = self.seat.slot.shed_signal().cancelled() => Ok(Wake::Shed),
            () = stress_changed, if watch_stress => Ok(Wake::StressChanged),
        }
    }

    fn queue(&mut self, reply: &Reply) {
        self.out.extend_from_slice(reply.to_wire().as_bytes());
    }

    /// Writes the queued replies in one write, bounded by the command timeout (the stress
    /// timeout when it applies), and given up if the session is shed meanwhile.
    async fn flush(&mut self) -> Result<(), ConnectionError> {
        if self.out.is_empty() {
            return Ok(());
        }
        let limit = self.wait_limit();
        let writing = timeout(limit, self.stream.write_all(&self.out));
        match unless_shed(self.seat.slot.shed_signal(), writing).await {
            Ok(Ok(written)) => written?,
            Ok(Err(_elapsed)) => return Err(ConnectionError::WriteTimeout),
            Err(shed) => return Err(shed),
        }
        self.out.clear();
        // Our reply is written: the peer's next input is due within the phase's deadline.
        self.last_reply = Instant::now();
        self.input_deadline = self.last_reply + self.session.input_deadline();
        if !self.session.in_transaction() {
            // Idle (again) from this reply: the board sheds the longest idle first.
            self.seat.slot.idle_from_now();
        }
        Ok(())
    }

    async fn close_with(
        &mut self,
        last: Canned,
        end: SessionEnd,
    ) -> Result<SessionEnd, ConnectionError> {
        self.queue(&last.reply());
        self.flush().await?;
        Ok(end)
    }

    /// The end of a shed session: `421 4.7.0` and a half-close if they can be done without
    /// waiting, and what the peer already sent is discarded if it is already here (so the close
    /// is a FIN rather than a reset where possible). No lingering: the slot is someone else's.
    async fn close_shed(mut self) {
        self.handler.refused(Refusal::Shed, self.peer);
        debug!("shed: every slot taken and this session idle longest");
        self.out.clear();
        // In plaintext or inside TLS, whichever the stream is now (shed during a STARTTLS
        // handshake leaves no stream: the write just fails).
        self.queue(&replies::SHED_IDLE.reply());
        let out = std::mem::take(&mut self.out);
        // Zero: tokio's `timeout` polls the operation once before it looks at the clock, so
        // this does exactly what can be done without waiting.
        let _ = timeout(Duration::ZERO, async {
            self.stream.write_all(&out).await?;
            self.stream.shutdown().await?;
            let mut sink = [0u8; 4096];
            while self.stream.read(&mut sink).await? > 0 {}
            Ok::<(), io::Error>(())
        })
        .await;
    }

    /// Half-closes, then discards what the peer already sent (bounded), so the close is a FIN
    /// and not a reset that could destroy our last reply in the peer's receive buffer.
    async fn linger_close(mut self) {
        let drained = timeout(LINGER, async {
            self.stream.shutdown().await?;
            let mut sink = [0u8; 4096];
            let mut total = 0;
            while total < LINGER_MAX_OCTETS {
                match self.stream.read(&mut sink).await? {
                    0 => break,
                    n => total += n,
                }
            }
            Ok::<(), io::Error>(())
        })
        .await;
        if let Ok(Err(error)) = drained {
            debug!(%error, "error while closing");
        }
    }
}

/// `work`, unless the board sheds the session first.
async fn unless_shed<T>(
    shed: &CancellationToken,
    work: impl std::future::Future<Output = T>,
) -> Result<T, ConnectionError> {
    tokio::select! {
        done = work => Ok(done),
        () = shed.cancelled() => Err(ConnectionError::Shed),
    }
}

/// The server side of a TLS handshake on `tcp`, bounded by `limit`.
async fn handshake(
    tcp: TcpStream,
    tls: &InboundTls,
    limit: Duration,
) -> Result<Stream, ConnectionError> {
    let acceptor = TlsAcceptor::from(tls.config.clone());
    let stream = match timeout(limit, acceptor.accept(tcp)).await {
        Err(_elapsed) => return Err(ConnectionError::HandshakeTimeout),
        Ok(Err(e)) => return Err(ConnectionError::Handshake(e)),
        Ok(Ok(stream)) => Stream::Tls(Box::new(stream)),
    };
    if let Some((version, cipher)) = stream.tls_description() {
        info!(%version, %cipher, implicit = tls.implicit, "TLS established");
    }
    Ok(stream)
}
