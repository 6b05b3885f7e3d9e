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
use imap_codec::imap_types::auth::{AuthMechanism, AuthenticateData};
use imap_codec::imap_types::command::CommandBody;
use imap_codec::imap_types::core::{IString, LiteralMode, QuotedChar, Tag, Text, Vec1};
use imap_codec::imap_types::extensions::enable::CapabilityEnable;
use imap_codec::imap_types::extensions::namespace::Namespace;
use imap_codec::imap_types::fetch::MacroOrMessageDataItemNames;
use imap_codec::imap_types::response::{
    Bye, Capability, Code, CodeOther, CommandContinuationRequest, Data, Greeting, GreetingKind,
    Response, Status, StatusBody, StatusKind, Tagged,
};
use imap_codec::imap_types::search::SearchKey;
use imap_codec::imap_types::IntoStatic;
use imap_codec::{
    encode::Encoder, AuthenticateDataCodec, GreetingCodec, IdleDoneCodec, ResponseCodec,
};
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

use decode::Extras;

/// A client that has not read its answers for this long is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// An idle session re-checks the archive this often (removals and imports by `herald
/// archive`, which the writer's notification does not cover).
const IDLE_RECHECK: Duration = Duration::from_secs(60);
/// Output buffered before it is written to the socket.
const FLUSH_AT: usize = 64 * 1024;
/// What a failed login costs the client.
const LOGIN_FAILURE_DELAY: Duration = Duration::from_secs(1);

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

    fn login_allowed(&self) -> bool {
        self.tls || self.shared.tls.is_none()
    }

    fn capabilities(&self) -> Vec1<Capability<'static>> {
        let mut caps = vec![Capability::Imap4Rev1];
        if self.who.is_none() {
            if !self.tls && self.shared.tls.is_some() {
                caps.push(Capability::StartTls);
                caps.push(Capability::LoginDisabled);
            } else {
                caps.push(Capability::Auth(AuthMechanism::Plain));
            }
            if let Ok(anon) = "ANONYMOUS".parse::<AuthMechanism<'static>>() {
                caps.push(Capability::Auth(anon));
            }
            caps.push(Capability::SaslIr);
        }
        caps.extend([
            Capability::Idle,
            Capability::Namespace,
            Capability::Unselect,
            Capability::Enable,
            Capability::LiteralMinus,
            Capability::Binary,
            Capability::StatusSize,
        ]);
        // IMAP4rev2 and the extensions it includes that imap-codec cannot parse (ESEARCH,
        // SEARCHRES, LIST-EXTENDED, LIST-STATUS: `rev2.rs` reads them), after IMAP4rev1.
        for (at, other) in [
            "IMAP4rev2",
            "ESEARCH",
            "SEARCHRES",
            "LIST-EXTENDED",
            "LIST-STATUS",
            "SPECIAL-USE",
        ]
        .iter()
        .enumerate()
        {
            if let Ok(c) = Capability::try_from(*other) {
                caps.insert(1 + at, c);
            }
        }
        Vec1::try_from(caps).unwrap_or_else(|_| Vec1::from(Capability::Imap4Rev1))
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
                    announcement: Some(LiteralAnnouncement { mode, length }),
                    ..
                } = info
                {
                    if length > self.shared.cfg.max_command_bytes {
                        if mode == LiteralMode::NonSync {
                            // The bytes are coming anyway: nothing sensible can follow.
                            self.bye("command too long").await?;
                            self.flush(io).await?;
                            return Ok(End::Close);
                        }
                        match frag.decode_tag() {
                            Some(tag) => {
                                let tag = tag.into_static();
                                self.bad(&tag, "literal too long").await?;
                                frag.skip_message();
                            }
                            None => frag.poison_message(),
                        }
                        continue;
                    }
                    if mode == LiteralMode::Sync {
                        if let Ok(cont) =
                            CommandContinuationRequest::basic(None, "Ready for literal")
                        {
                            self.send(io, &Response::CommandContinuationRequest(cont))
                                .await?;
                            self.flush(io).await?;
                        }
                    }
                    continue;
                }
                if !frag.is_message_complete() {
                    continue;
                }
                let next = match &state {
                    State::Command => self.on_command(io, &frag).await?,
                    State::Authenticate { tag, plain } => {
                        let (tag, plain) = (tag.clone(), *plain);
                        self.on_auth_data(&frag, tag, plain).await?
                    }
                    State::Idle { tag } => {
                        let tag = tag.clone();
                        match frag.decode_message(&IdleDoneCodec::default()) {
                            Ok(_) => {
                                self.push(&tagged(&tag, StatusKind::Ok, None, "IDLE done"));
                                Next::Continue
                            }
                            Err(_) => {
                                self.push(&tagged(&tag, StatusKind::Bad, None, "expected DONE"));
                                Next::Continue
                            }
                        }
                    }
                };
                state = State::Command;
                match next {
                    Next::Continue => {}
                    Next::Close => {
                        self.flush(io).await?;
                        return Ok(End::Close);
                    }
                    Next::StartTls => {
                        self.flush(io).await?;
                        return Ok(End::StartTls);
                    }
                    Next::Authenticate { tag, plain } => state = State::Authenticate { tag, plain },
                    Next::Idle { tag } => state = State::Idle { tag },
                }
                if self.bad_in_a_row >= self.shared.cfg.max_bad_commands {
                    self.bye("too many bad commands").await?;
                    self.flush(io).await?;
                    return Ok(End::Close);
                }
            }
            if frag.is_max_message_size_exceeded() {
                self.bye("command too long").await?;
                self.flush(io).await?;
                return Ok(End::Close);
            }
            self.flush(io).await?;
            let idling = matches!(state, State::Idle { .. });
            let limit = match self.who {
                None => self.shared.cfg.login_timeout_secs,
                Some(_) => self.shared.cfg.idle_timeout_secs,
            };
            let deadline = last_input + Duration::from_secs(limit);
            tokio::select! {
                r = io.read(&mut buf) => match r {
                    Ok(0) | Err(_) => return Ok(End::Close),
                    Ok(n) => {
                        last_input = Instant::now();
                        frag.enqueue_bytes(&buf[..n]);
                    }
                },
                _ = tokio::time::sleep_until(deadline) => {
                    self.bye("autologout: idle too long").await?;
                    self.flush(io).await?;
                    return Ok(End::Close);
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
                    self.bye("server shutting down").await?;
                    self.flush(io).await?;
                    return Ok(End::Close);
                }
            }
        }
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

    async fn dispatch(
        &mut self,
        io: &mut (dyn Io + '_),
        tag: Tag<'static>,
        body: CommandBody<'static>,
        ext: Extras,
    ) -> Step<Next> {
        use CommandBody as C;
        let ok = |s: &mut Self, tag: &Tag<'_>, msg: &str| {
            s.push(&tagged(tag, StatusKind::Ok, None, msg));
            Ok(Next::Continue)
        };
        match body {
            C::Capability => {
                self.push(&Response::Data(Data::Capability(self.capabilities())));
                ok(self, &tag, "CAPABILITY done")
            }
            C::Noop | C::Check => {
                self.poll_updates().await?;
                ok(self, &tag, "NOOP done")
            }
            C::Logout => {
                self.bye("logging out").await?;
                ok(self, &tag, "LOGOUT done")?;
                Ok(Next::Close)
            }
            C::StartTLS => {
                // RFC 9051 §6.2.1: only before authentication, only once.
                if self.tls || self.shared.tls.is_none() || self.who.is_some() {
                    self.push(&tagged(
                        &tag,
                        StatusKind::Bad,
                        None,
                        "TLS not available here",
                    ));
                    return Ok(Next::Continue);
                }
                self.push(&tagged(
                    &tag,
                    StatusKind::Ok,
                    None,
                    "begin TLS negotiation now",
                ));
                Ok(Next::StartTls)
            }
            C::Login { username, password } => {
                let user = String::from_utf8_lossy(username.as_ref()).into_owned();
                let pass = String::from_utf8_lossy(password.declassify().as_ref()).into_owned();
                self.login(tag, user, pass, false).await
            }
            C::Authenticate {
                mechanism,
                initial_response,
            } => {
                let initial = initial_response.map(|d| d.declassify().to_vec());
                self.authenticate(tag, mechanism, initial).await
            }
            _ if self.who.is_none() => {
                self.bad(&tag, "log in first").await?;
                Ok(Next::Continue)
            }
            C::Enable { capabilities } => {
                // IMAP4rev2 is the one extension that can be enabled; RFC 5161 §3.2: ENABLED
                // names only what this command enabled (unknown names are ignored).
                let mut enabled = Vec::new();
                let asked_rev2 = capabilities
                    .as_ref()
                    .iter()
                    .any(|c| c.to_string().eq_ignore_ascii_case("IMAP4rev2"));
                if asked_rev2 && !self.rev2 {
                    self.rev2 = true;
                    if let Ok(c) = CapabilityEnable::try_from("IMAP4rev2") {
                        enabled.push(c);
                    }
                }
                self.push(&Response::Data(Data::Enabled {
                    capabilities: enabled,
                }));
                ok(self, &tag, "ENABLE done")
            }
            C::Namespace => {
                let ns = Namespace {
                    prefix: IString::try_from("").unwrap_or_else(|_| unreachable!("empty quoted")),
                    delimiter: QuotedChar::try_from('/').ok(),
                    extensions: Vec::new(),
                };
                self.push(&Response::Data(Data::Namespace {
                    personal: Vec::new(),
                    other: Vec::new(),
                    shared: vec![ns],
                }));
                ok(self, &tag, "NAMESPACE done")
            }
            C::List {
                reference,
                mailbox_wildcard,
            } => {
                self.list(tag, reference, mailbox_wildcard, false, ext.list)
                    .await
            }
            // Every readable list counts as subscribed (nothing is stored per user).
            C::Lsub {
                reference,
                mailbox_wildcard,
            } => {
                self.list(tag, reference, mailbox_wildcard, true, None)
                    .await
            }
            C::Status {
                mailbox,
                item_names,
            } => self.status(tag, mailbox, item_names.to_vec()).await,
            C::Select { mailbox, .. } | C::Examine { mailbox, .. } => {
                self.select(tag, mailbox).await
            }
            C::Idle => {
                if let Ok(c) = CommandContinuationRequest::basic(None, "idling") {
                    self.push(&Response::CommandContinuationRequest(c));
                }
                Ok(Next::Idle { tag })
            }
            C::Create { .. }
            | C::Delete { .. }
            | C::Rename { .. }
            | C::Subscribe { .. }
            | C::Unsubscribe { .. }
            | C::Append { .. } => {
                self.push(&tagged(
                    &tag,
                    StatusKind::No,
                    Some(other_code("CANNOT")),
                    "the archive is read-only",
                ));
                Ok(Next::Continue)
            }
            _ if self.selected.is_none() => {
                self.bad(&tag, "select a mailbox first").await?;
                Ok(Next::Continue)
            }
            C::Close | C::Unselect => {
                // Read-only: CLOSE expunges nothing.
                self.selected = None;
                self.saved.clear();
                ok(self, &tag, "closed")
            }
            C::Fetch {
                sequence_set,
                macro_or_item_names,
                uid,
            } => {
                let names = match macro_or_item_names {
                    MacroOrMessageDataItemNames::Macro(m) => commands::macro_items(m),
                    MacroOrMessageDataItemNames::MessageDataItemNames(n) => n,
                };
                let target = match ext.saved_set {
                    true => commands::Target::Saved,
                    false => commands::Target::Set(sequence_set),
                };
                self.fetch(io, tag, target, names, uid).await
            }
            C::Search {
                charset,
                criteria,
                uid,
            } => {
                let charset = charset.map(|c| c.as_ref().to_ascii_uppercase());
                if charset.is_some_and(|cs| cs != "UTF-8" && cs != "US-ASCII") {
                    if ext.search_return.is_some_and(|r| r.save) {
                        // RFC 5182 §2.1: a SEARCH SAVE that fails leaves `$` empty.
                        self.saved.clear();
                    }
                    let code = Code::BadCharset {
                        allowed: Vec::new(),
                    };
                    self.push(&tagged(
                        &tag,
                        StatusKind::No,
                        Some(code),
                        "UTF-8 or US-ASCII only",
                    ));
                    return Ok(Next::Continue);
                }
                let key = match criteria.as_ref().len() {
                    1 => criteria.as_ref()[0].clone(),
                    _ => SearchKey::And(criteria),
                };
                self.search(tag, key, uid, ext.search_return).await
            }
            C::Store { .. }
            | C::Copy { .. }
            | C::Move { .. }
            | C::Expunge
            | C::ExpungeUid { .. } => {
                self.push(&tagged(
                    &tag,
                    StatusKind::No,
                    Some(other_code("CANNOT")),
                    "the archive is read-only",
                ));
                Ok(Next::Continue)
            }
            _ => {
                self.bad(&tag, "command not supported").await?;
                Ok(Next::Continue)
            }
        }
    }

    /// AUTHENTICATE: PLAIN or ANONYMOUS, with the initial response (SASL-IR) or after a
    /// continuation.
    async fn authenticate(
        &mut self,
        tag: Tag<'static>,
        mechanism: AuthMechanism<'static>,
        initial: Option<Vec<u8>>,
    ) -> Step<Next> {
        if self.who.is_some() {
            self.push(&tagged(&tag, StatusKind::Bad, None, "already logged in"));
            return Ok(Next::Continue);
        }
        let plain = match mechanism {
            AuthMechanism::Plain => true,
            m if m.as_ref().eq_ignore_ascii_case("ANONYMOUS") => false,
            _ => {
                self.push(&tagged(
                    &tag,
                    StatusKind::No,
                    None,
                    "mechanism not supported",
                ));
                return Ok(Next::Continue);
            }
        };
        match initial {
            Some(data) => self.sasl(tag, plain, data).await,
            None => {
                if let Ok(c) = CommandContinuationRequest::basic(None, " ") {
                    self.push(&Response::CommandContinuationRequest(c));
                }
                Ok(Next::Authenticate { tag, plain })
            }
        }
    }

    async fn on_auth_data(
        &mut self,
        frag: &Fragmentizer,
        tag: Tag<'static>,
        plain: bool,
    ) -> Step<Next> {
        match frag.decode_message(&AuthenticateDataCodec::default()) {
            Ok(AuthenticateData::Continue(data)) => {
                let data = data.declassify().to_vec();
                self.sasl(tag, plain, data).await
            }
            Ok(AuthenticateData::Cancel) => {
                self.push(&tagged(
                    &tag,
                    StatusKind::Bad,
                    None,
                    "authentication cancelled",
                ));
                Ok(Next::Continue)
            }
            Err(_) => self
                .bad(&tag, "bad authentication data")
                .await
                .map(|_| Next::Continue),
        }
    }

    /// One SASL exchange: PLAIN (RFC 4616: `authzid NUL authcid NUL passwd`, split here by
    /// hand — three fields, no grammar worth a crate) or ANONYMOUS (RFC 4505: the trace
    /// string is ignored).
    async fn sasl(&mut self, tag: Tag<'static>, plain: bool, data: Vec<u8>) -> Step<Next> {
        if !plain {
            self.who = Some(Who::Anonymous);
            self.push(&tagged(
                &tag,
                StatusKind::Ok,
                Some(Code::Capability(self.capabilities())),
                "anonymous read access",
            ));
            return Ok(Next::Continue);
        }
        let mut parts = data.split(|b| *b == 0);
        let (_authz, user, pass) = (parts.next(), parts.next(), parts.next());
        match (user, pass, parts.next()) {
            (Some(user), Some(pass), None) => {
                let user = String::from_utf8_lossy(user).into_owned();
                let pass = String::from_utf8_lossy(pass).into_owned();
                self.login(tag, user, pass, true).await
            }
            _ => {
                self.push(&tagged(
                    &tag,
                    StatusKind::No,
                    Some(other_code("AUTHENTICATIONFAILED")),
                    "malformed PLAIN response",
                ));
                Ok(Next::Continue)
            }
        }
    }

    async fn login(
        &mut self,
        tag: Tag<'static>,
        user: String,
        pass: String,
        sasl: bool,
    ) -> Step<Next> {
        if self.who.is_some() {
            self.push(&tagged(&tag, StatusKind::Bad, None, "already logged in"));
            return Ok(Next::Continue);
        }
        let anonymous = user.eq_ignore_ascii_case(crate::access::ANONYMOUS_USER);
        if !self.login_allowed() && !anonymous {
            let what = if sasl { "PLAIN" } else { "LOGIN" };
            self.push(&tagged(
                &tag,
                StatusKind::No,
                Some(other_code("PRIVACYREQUIRED")),
                &format!("{what} needs TLS: STARTTLS first"),
            ));
            return Ok(Next::Continue);
        }
        let auth = self.shared.auth.clone();
        let who = tokio::task::spawn_blocking(move || auth.login(&user, &pass))
            .await
            .ok()
            .flatten();
        match who {
            Some(who) => {
                tracing::debug!(peer = %self.peer, who = %who.describe(), "IMAP login");
                self.who = Some(who);
                self.push(&tagged(
                    &tag,
                    StatusKind::Ok,
                    Some(Code::Capability(self.capabilities())),
                    "logged in",
                ));
            }
            None => {
                tokio::time::sleep(LOGIN_FAILURE_DELAY).await;
                self.push(&tagged(
                    &tag,
                    StatusKind::No,
                    Some(other_code("AUTHENTICATIONFAILED")),
                    "login failed",
                ));
            }
        }
        Ok(Next::Continue)
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
