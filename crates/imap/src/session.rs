//! One IMAP session: bytes in, framed by imap-codec's `Fragmentizer` (lines and literals under
//! `max_command_bytes`), decoded by its `CommandCodec`, answered with responses encoded by its
//! `ResponseCodec`. The archive is read on tokio's blocking threads through the session's own
//! SQLite connection (WAL: readers never wait for the writer).
//!
//! States (RFC 9051 §3): not authenticated → authenticated → selected → logout. STARTTLS ends
//! [`Session::run`] with [`End::StartTls`]; the caller wraps the socket in TLS and calls `run`
//! again, with a fresh framer: bytes a client pipelined after STARTTLS are dropped (the
//! command-injection attack of RFC 9051 §11.1).
//!
//! Limits: a command (its literals included) over `max_command_bytes` is refused when its
//! literal is announced, and ends the session when it arrives without one; `max_bad_commands`
//! BADs in a row end it; a client that does not read its answers is dropped after
//! [`WRITE_TIMEOUT`]; an idle one after `idle_timeout_secs` (`login_timeout_secs` before it has
//! logged in).
//!
//! Where things are: this file holds the session's state and its I/O loop (framing, literals,
//! timeouts, IDLE's wake-ups, output buffering); `dispatch` which handler answers a command
//! in which state; `login` the capabilities, LOGIN and AUTHENTICATE; `commands` the commands
//! that read the archive; `decode` what the codec cannot parse alone.
//!
//! SECURITY: everything read here is untrusted. The codec parses; this file only dispatches.
//! Before the codec, [`crate::rev2::prepare`] reads what the codec lacks (SEARCH RETURN
//! options, `$`), bounded there; a `$` becomes the session's own saved UIDs, nothing more.
//! LOGIN and AUTHENTICATE PLAIN are refused on a plaintext connection when TLS is available
//! (`LOGINDISABLED`); AUTHENTICATE ANONYMOUS is allowed there (no secret crosses). Failed
//! logins cost the client a second each, so guessing is slow.

use crate::access::{Authenticator, Who};
use crate::config::ImapSection;
use crate::mailbox::Selected;
use crate::rev2;
use herald_archive::{Archive, ArchiveError, Privacy};
use herald_directory::Directory;
use herald_telemetry::imap::ImapMetrics;
use imap_codec::fragmentizer::{FragmentInfo, Fragmentizer, LiteralAnnouncement};
use imap_codec::imap_types::core::{LiteralMode, Tag, Text};
use imap_codec::imap_types::response::{
    Bye, Code, CodeOther, CommandContinuationRequest, Greeting, GreetingKind, Response, Status,
    StatusBody, StatusKind, Tagged,
};
use imap_codec::imap_types::IntoStatic;
use imap_codec::{encode::Encoder, GreetingCodec, IdleDoneCodec, ResponseCodec};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
mod commands;
mod decode;
mod dispatch;
mod login;

/// A client that has not read its answers for this long is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// An idle session re-checks the archive this often (removals and imports by `herald
/// archive`, which the writer's notification does not cover).
const IDLE_RECHECK: Duration = Duration::from_secs(60);
/// Output buffered before it is written to the socket.
const FLUSH_AT: usize = 64 * 1024;

/// A byte stream a session runs over (TCP, or TLS over TCP).
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What every session shares.
pub struct Shared {
    pub cfg: ImapSection,
    pub archive_path: PathBuf,
    pub default_privacy: Privacy,
    pub auth: Authenticator,
    pub metrics: Option<ImapMetrics>,
    /// Changes when the archive writer stored new messages (IDLE wakes on it).
    pub committed: watch::Receiver<u64>,
    /// The `[tls]` configuration: STARTTLS is offered with it.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Shared {
    fn directory(&self) -> &Directory {
        &self.auth.directory
    }
}

/// Why [`Session::run`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Close,
    StartTls,
}

/// An I/O failure or a client gone: the session ends.
#[derive(Debug)]
struct Gone;

type Step<T = ()> = Result<T, Gone>;

enum State {
    Command,
    Authenticate { tag: Tag<'static>, plain: bool },
    Idle { tag: Tag<'static> },
}

/// The state of one connection.
pub struct Session {
    shared: Arc<Shared>,
    peer: SocketAddr,
    tls: bool,
    who: Option<Who>,
    db: Option<Archive>,
    selected: Option<Selected>,
    out: Vec<u8>,
    bad_in_a_row: u32,
    greeted: bool,
    stop: CancellationToken,
    committed: watch::Receiver<u64>,
    /// The archive writer's notification ended (its sender was dropped).
    writer_gone: bool,
    /// The client sent `ENABLE IMAP4rev2` (RFC 9051 Appendix E rules from then on: SEARCH
    /// answered with ESEARCH, no RECENT, CLOSED and LIST at SELECT). Off, the session is
    /// IMAP4rev1 exactly as before.
    rev2: bool,
    /// The SEARCHRES result (`SAVE`, used as `$`), as UIDs; empty until a SEARCH saves and
    /// again after each SELECT/EXAMINE/CLOSE/UNSELECT (RFC 5182 §2.1).
    saved: Vec<u32>,
}

/// What a handler decided about the session.
enum Next {
    Continue,
    Close,
    StartTls,
    Authenticate { tag: Tag<'static>, plain: bool },
    Idle { tag: Tag<'static> },
}

/// Where [`Session::wait`] puts what the client sent: the framer, the read buffer, and the
/// time of the last input (the idle timeout counts from it).
struct Input<'a> {
    frag: &'a mut Fragmentizer,
    buf: &'a mut [u8],
    last: &'a mut Instant,
}

fn text(s: &str) -> Text<'static> {
    Text::try_from(s.to_string()).unwrap_or_else(|_| Text::unvalidated("."))
}

fn tagged(
    tag: &Tag<'_>,
    kind: StatusKind,
    code: Option<Code<'static>>,
    msg: &str,
) -> Response<'static> {
    Response::Status(Status::Tagged(Tagged {
        tag: tag.clone().into_static(),
        body: StatusBody {
            kind,
            code,
            text: text(msg),
        },
    }))
}

fn untagged(kind: StatusKind, code: Option<Code<'static>>, msg: &str) -> Response<'static> {
    Response::Status(Status::Untagged(StatusBody {
        kind,
        code,
        text: text(msg),
    }))
}

fn other_code(word: &'static str) -> Code<'static> {
    Code::Other(CodeOther::unvalidated(word.as_bytes()))
}

impl Session {
    pub fn new(shared: Arc<Shared>, peer: SocketAddr, tls: bool, stop: CancellationToken) -> Self {
        let committed = shared.committed.clone();
        Session {
            shared,
            peer,
            tls,
            who: None,
            db: None,
            selected: None,
            out: Vec::with_capacity(4096),
            bad_in_a_row: 0,
            greeted: false,
            stop,
            committed,
            writer_gone: false,
            rev2: false,
            saved: Vec::new(),
        }
    }

    /// Marks the connection as TLS from here on (after STARTTLS).
    pub fn tls_started(&mut self) {
        self.tls = true;
    }

    /// Runs the session until it ends or asks for TLS.
    pub async fn run(&mut self, io: &mut (dyn Io + '_)) -> End {
        match self.run_inner(io).await {
            Ok(end) => end,
            Err(Gone) => End::Close,
        }
    }

    async fn run_inner(&mut self, io: &mut (dyn Io + '_)) -> Step<End> {
        let mut frag = Fragmentizer::new(self.shared.cfg.max_command_bytes);
        let mut state = State::Command;
        let mut buf = vec![0u8; 16 * 1024];
        if !self.greeted {
            self.greeted = true;
            let g = Greeting {
                kind: GreetingKind::Ok,
                code: Some(Code::Capability(self.capabilities())),
                text: text("Herald archive IMAP ready (read-only)"),
            };
            self.out.extend(GreetingCodec::default().encode(&g).dump());
        }
        let mut last_input = Instant::now();
        loop {
            while let Some(info) = frag.progress() {
                if let FragmentInfo::Line {
                    announcement: Some(announced),
                    ..
                } = info
                {
                    if let Some(end) = self.on_literal(io, &mut frag, announced).await? {
                        return Ok(end);
                    }
                    continue;
                }
                if !frag.is_message_complete() {
                    continue;
                }
                if let Some(end) = self.on_message(io, &frag, &mut state).await? {
                    return Ok(end);
                }
            }
            if frag.is_max_message_size_exceeded() {
                return self.close(io, "command too long").await;
            }
            self.flush(io).await?;
            let input = Input {
                frag: &mut frag,
                buf: &mut buf,
                last: &mut last_input,
            };
            if let Some(end) = self.wait(io, input, &state).await? {
                return Ok(end);
            }
        }
    }

    /// A literal announced in a command line: refused when the command would grow past
    /// `max_command_bytes` (a non-synchronizing one ends the session: its bytes come anyway),
    /// else a synchronizing one is invited with a continuation.
    async fn on_literal(
        &mut self,
        io: &mut (dyn Io + '_),
        frag: &mut Fragmentizer,
        announced: LiteralAnnouncement,
    ) -> Step<Option<End>> {
        let LiteralAnnouncement { mode, length } = announced;
        if length > self.shared.cfg.max_command_bytes {
            if mode == LiteralMode::NonSync {
                // The bytes are coming anyway: nothing sensible can follow.
                return self.close(io, "command too long").await.map(Some);
            }
            match frag.decode_tag() {
                Some(tag) => {
                    let tag = tag.into_static();
                    self.bad(&tag, "literal too long").await?;
                    frag.skip_message();
                }
                None => frag.poison_message(),
            }
            return Ok(None);
        }
        if mode == LiteralMode::Sync {
            if let Ok(cont) = CommandContinuationRequest::basic(None, "Ready for literal") {
                self.send(io, &Response::CommandContinuationRequest(cont))
                    .await?;
                self.flush(io).await?;
            }
        }
        Ok(None)
    }

    /// One complete message, read in the session's `state` (a command, SASL data, or the
    /// DONE that ends IDLE); the state the handler leaves the session in; `Some` when the
    /// session ends (or turns to TLS) here.
    async fn on_message(
        &mut self,
        io: &mut (dyn Io + '_),
        frag: &Fragmentizer,
        state: &mut State,
    ) -> Step<Option<End>> {
        let next = match &*state {
            State::Command => self.on_command(io, frag).await?,
            State::Authenticate { tag, plain } => {
                let (tag, plain) = (tag.clone(), *plain);
                self.on_auth_data(frag, tag, plain).await?
            }
            State::Idle { tag } => {
                let tag = tag.clone();
                match frag.decode_message(&IdleDoneCodec::default()) {
                    Ok(_) => self.push(&tagged(&tag, StatusKind::Ok, None, "IDLE done")),
                    Err(_) => self.push(&tagged(&tag, StatusKind::Bad, None, "expected DONE")),
                }
                Next::Continue
            }
        };
        *state = State::Command;
        match next {
            Next::Continue => {}
            Next::Close => {
                self.flush(io).await?;
                return Ok(Some(End::Close));
            }
            Next::StartTls => {
                self.flush(io).await?;
                return Ok(Some(End::StartTls));
            }
            Next::Authenticate { tag, plain } => *state = State::Authenticate { tag, plain },
            Next::Idle { tag } => *state = State::Idle { tag },
        }
        if self.bad_in_a_row >= self.shared.cfg.max_bad_commands {
            return self.close(io, "too many bad commands").await.map(Some);
        }
        Ok(None)
    }

    /// Waits for the client's next bytes, the idle or login timeout, the archive's news while
    /// idling (the writer's notification, or the periodic re-check), or the server stopping.
    async fn wait(
        &mut self,
        io: &mut (dyn Io + '_),
        input: Input<'_>,
        state: &State,
    ) -> Step<Option<End>> {
        let idling = matches!(state, State::Idle { .. });
        let limit = match self.who {
            None => self.shared.cfg.login_timeout_secs,
            Some(_) => self.shared.cfg.idle_timeout_secs,
        };
        let deadline = *input.last + Duration::from_secs(limit);
        tokio::select! {
            r = io.read(input.buf) => match r {
                Ok(0) | Err(_) => return Ok(Some(End::Close)),
                Ok(n) => {
                    *input.last = Instant::now();
                    input.frag.enqueue_bytes(&input.buf[..n]);
                }
            },
            _ = tokio::time::sleep_until(deadline) => {
                return self.close(io, "autologout: idle too long").await.map(Some);
            }
            changed = self.committed.changed(), if idling && !self.writer_gone => {
                // The writer stopped (the server is shutting down): the timer alone
                // re-checks until `stop` ends the session.
                self.writer_gone = changed.is_err();
                self.poll_updates().await?;
            }
            _ = tokio::time::sleep(IDLE_RECHECK), if idling => {
                self.poll_updates().await?;
            }
            _ = self.stop.cancelled() => {
                return self.close(io, "server shutting down").await.map(Some);
            }
        }
        Ok(None)
    }

    /// Says BYE with `why`, writes out what is queued, and ends the session.
    async fn close(&mut self, io: &mut (dyn Io + '_), why: &str) -> Step<End> {
        self.bye(why).await?;
        self.flush(io).await?;
        Ok(End::Close)
    }

    fn push(&mut self, r: &Response<'_>) {
        self.out.extend(ResponseCodec::default().encode(r).dump());
    }

    /// Queues a response and writes the buffer out when it is large.
    async fn send(&mut self, io: &mut (dyn Io + '_), r: &Response<'_>) -> Step {
        self.push(r);
        if self.out.len() >= FLUSH_AT {
            self.flush(io).await?;
        }
        Ok(())
    }

    async fn flush(&mut self, io: &mut (dyn Io + '_)) -> Step {
        if self.out.is_empty() {
            return Ok(());
        }
        let out = std::mem::take(&mut self.out);
        let write = async {
            io.write_all(&out).await?;
            io.flush().await
        };
        match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(Ok(())) => {
                self.out = out;
                self.out.clear();
                Ok(())
            }
            _ => Err(Gone),
        }
    }

    async fn bye(&mut self, why: &str) -> Step {
        self.push(&Response::Status(Status::Bye(Bye {
            code: None,
            text: text(why),
        })));
        Ok(())
    }

    async fn bad(&mut self, tag: &Tag<'_>, why: &str) -> Step {
        self.bad_in_a_row += 1;
        self.push(&tagged(tag, StatusKind::Bad, None, why));
        Ok(())
    }

    fn count(&self, name: &'static str) {
        if let Some(m) = &self.shared.metrics {
            m.count_command(name);
        }
    }

    async fn on_command(&mut self, io: &mut (dyn Io + '_), frag: &Fragmentizer) -> Step<Next> {
        let decoded = match frag.is_message_poisoned() || frag.is_max_message_size_exceeded() {
            true => Err(None),
            false => self.decode(frag.message_bytes()),
        };
        let (command, ext) = match decoded {
            Ok(c) => c,
            Err(refused) => {
                let why = match refused {
                    Some(rev2::Malformed(why)) => why,
                    None => "unknown command or bad syntax",
                };
                self.count("invalid");
                match frag.decode_tag() {
                    Some(tag) => {
                        let tag = tag.into_static();
                        self.bad(&tag, why).await?
                    }
                    None => {
                        self.bad_in_a_row += 1;
                        self.push(&untagged(StatusKind::Bad, None, "no tag, no command"));
                    }
                }
                return Ok(Next::Continue);
            }
        };
        self.count(command.name());
        self.bad_in_a_row = 0;
        let tag = command.tag;
        self.dispatch(io, tag, command.body, ext).await
    }

    /// Runs `f` on the session's archive connection on a blocking thread (opening it first).
    async fn with_db<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&Archive) -> Result<R, ArchiveError> + Send + 'static,
    ) -> Result<R, ArchiveError> {
        let db = self.db.take();
        let path = self.shared.archive_path.clone();
        let privacy = self.shared.default_privacy;
        let joined = tokio::task::spawn_blocking(move || {
            let db = match db {
                Some(db) => db,
                None => match Archive::open(&path) {
                    Ok(db) => db.with_default_privacy(privacy),
                    Err(e) => return (None, Err(e)),
                },
            };
            let r = f(&db);
            (Some(db), r)
        })
        .await;
        match joined {
            Ok((db, r)) => {
                self.db = db;
                r
            }
            Err(_) => Err(ArchiveError::Io {
                path: self.shared.archive_path.clone(),
                source: std::io::Error::other("archive read task failed"),
            }),
        }
    }

    fn store_failed(&mut self, tag: &Tag<'_>, e: ArchiveError) -> Step<Next> {
        tracing::error!(error = %e, "IMAP: archive read failed");
        self.push(&tagged(
            tag,
            StatusKind::No,
            Some(other_code("SERVERBUG")),
            "archive unavailable",
        ));
        Ok(Next::Continue)
    }
}
