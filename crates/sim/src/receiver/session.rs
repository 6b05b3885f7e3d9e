//! One SMTP session of a receiver: command handling, the host's behaviour profile, DATA, and
//! the STARTTLS upgrade.
//!
//! Written here rather than borrowed from herald-smtp (which is Herald's inbound side): the
//! receivers must be far faster than the sender they measure, and must misbehave on purpose.
//!
//! Pipelining: every complete command or message in the input buffer is handled before
//! anything is written; the replies collect in one output buffer and go out in one write when
//! the input runs dry (RFC 2920 batching). The `slow` profile instead writes each reply on its
//! own after its delay, as a slow server would; the `tarpit` profile writes every byte of its
//! replies on its own, each after its delay.
//!
//! Bounds: command lines ≤ [`MAX_COMMAND_LINE`] octets; messages ≤ `max_message_bytes` (beyond
//! that the rest is discarded as it arrives and the message refused with 552); at most
//! [`MAX_ERRORS`] bad commands per session; an idle session is closed after
//! `idle_timeout_secs`.
//!
//! SECURITY: input is untrusted; after STARTTLS anything the client pipelined in plaintext is
//! discarded (the STARTTLS command-injection attack, CVE-2011-0411).

use crate::recorder::PeerGuard;
use bytes::{Buf, Bytes, BytesMut};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::data;
use super::reply::{self, Reply};
use super::HostState;
use crate::config::{is_unknown, Profile};
use crate::recorder::{self, mime, CopyRecord, MimeVerdict, Rejection};

/// Longest command line accepted (RFC 5321 says 512; extensions make real ones longer).
pub const MAX_COMMAND_LINE: usize = 4096;
/// Bad commands tolerated before the session is closed.
pub const MAX_ERRORS: u32 = 20;
/// Read size: large enough for many pipelined transactions per read.
const READ_CHUNK: usize = 64 * 1024;
/// How long a closing session waits for the client to close (see `linger_close`).
const LINGER: Duration = Duration::from_secs(1);
/// Most input discarded while lingering.
const LINGER_MAX_BYTES: usize = 1 << 20;
/// Greylist entries kept per host; when full the table is cleared (pairs seen before are simply
/// greylisted again — harmless, senders retry).
const MAX_GREYLIST_ENTRIES: usize = 1_000_000;

/// How `serve` ended.
enum End {
    /// QUIT, EOF, error reply that closes, or idle timeout.
    Closed,
    /// STARTTLS accepted: the caller upgrades the stream and serves again.
    StartTls,
    /// drop_mid_data: the connection is closed without a reply to the message.
    Dropped,
}

/// What handling one item of input asks for next.
enum Step {
    Continue,
    NeedMore,
    Close,
    StartTls,
    Drop,
}

/// How a misbehaving host paces its writes.
#[derive(Clone, Copy)]
enum Pace {
    /// `slow`: the whole reply after a delay.
    Reply(Duration),
    /// `tarpit`: one byte at a time, each after a delay.
    Byte(Duration),
}

enum Mode {
    Command,
    /// Receiving a message: where to resume the end search, whether the buffer still starts
    /// at the first line, and whether the message already exceeded the size limit.
    Data {
        scan_from: usize,
        at_start: bool,
        too_big: bool,
    },
}

struct Session {
    host: Arc<HostState>,
    inbuf: BytesMut,
    out: Vec<u8>,
    mode: Mode,
    greeted: bool,
    tls: bool,
    /// The client's address, recorded with each copy (egress source checks).
    peer: Option<std::net::IpAddr>,
    /// Counts this connection as open from its client until the session answers QUIT (then
    /// it is over for the client, which may open its next connection as soon as it reads
    /// the 221), or ends otherwise. Counting until the socket's linger ends instead showed a
    /// client keeping `max_connections = 1` two connections open, under load.
    open: Option<PeerGuard>,
    mail_from: Option<Box<str>>,
    /// MAIL carried SMTPUTF8.
    smtputf8: bool,
    /// MAIL's DSN parameters, as sent.
    mail_dsn: String,
    rcpts: Vec<Box<str>>,
    /// Each of `rcpts`' DSN parameters, as sent.
    rcpt_dsn: Vec<String>,
    msgs_on_conn: u32,
    errors: u32,
    copies: Vec<CopyRecord>,
    rejections: Vec<Rejection>,
    last_message_id: Option<Arc<str>>,
}

/// Serves one accepted connection to the end, including a STARTTLS upgrade.
pub(crate) async fn run(host: Arc<HostState>, mut stream: TcpStream, open: PeerGuard) {
    let mut s = Session::new(host.clone());
    s.open = Some(open);
    s.peer = stream.peer_addr().ok().map(|a| a.ip());
    s.push(host.banner.as_bytes());
    match s.serve(&mut stream).await {
        Ok(End::StartTls) => {}
        Ok(End::Dropped) => {
            host.recorder.count(&host.name, |c| c.dropped_mid_data += 1);
            return;
        }
        Ok(End::Closed) => return linger_close(&mut stream).await,
        Err(_) => return,
    }
    let Some(tls) = host.tls.clone() else {
        return;
    };
    // SECURITY: nothing sent before the handshake may be taken as a command after it.
    s.inbuf.clear();
    let idle = host.idle_timeout();
    let Ok(Ok(mut stream)) = tokio::time::timeout(idle, tls.accept(stream)).await else {
        return;
    };
    let resumed = stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    host.recorder.count(&host.name, |c| match resumed {
        true => c.tls_resumed += 1,
        false => c.tls_full += 1,
    });
    s.tls = true;
    s.greeted = false;
    s.reset_transaction();
    match s.serve(&mut stream).await {
        Ok(End::Dropped) => host.recorder.count(&host.name, |c| c.dropped_mid_data += 1),
        Ok(_) => linger_close(&mut stream).await,
        Err(_) => {}
    }
}

/// Closes after a final reply without losing it: closing a socket with unread input makes the
/// kernel send RST, which can destroy the reply before the client reads it. So: shut down the
/// write side (FIN after the reply), then read and discard until the client closes, for at most
/// [`LINGER`] and [`LINGER_MAX_BYTES`].
async fn linger_close<S: AsyncRead + AsyncWrite + Unpin>(io: &mut S) {
    if io.shutdown().await.is_err() {
        return;
    }
    let mut scratch = [0u8; 4096];
    let mut total = 0;
    let deadline = Instant::now() + LINGER;
    while total < LINGER_MAX_BYTES {
        match tokio::time::timeout_at(deadline, io.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => total += n,
            _ => return,
        }
    }
}

impl Session {
    fn new(host: Arc<HostState>) -> Session {
        Session {
            host,
            inbuf: BytesMut::with_capacity(READ_CHUNK),
            out: Vec::with_capacity(4096),
            mode: Mode::Command,
            greeted: false,
            tls: false,
            peer: None,
            open: None,
            mail_from: None,
            smtputf8: false,
            mail_dsn: String::new(),
            rcpts: Vec::new(),
            rcpt_dsn: Vec::new(),
            msgs_on_conn: 0,
            errors: 0,
            copies: Vec::new(),
            rejections: Vec::new(),
            last_message_id: None,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    fn reply(&mut self, r: Reply) {
        self.out.extend_from_slice(r.line.as_bytes());
    }

    /// Replies with a refusal and records it.
    fn refuse(&mut self, r: Reply, recipient: Option<Box<str>>) {
        self.reply(r);
        self.record_refusal(r, recipient);
    }

    fn record_refusal(&mut self, r: Reply, recipient: Option<Box<str>>) {
        self.rejections.push(Rejection {
            host: self.host.name.clone(),
            at_ms: self.host.recorder.elapsed_ms(),
            code: r.code,
            status: r.status,
            sender: self.mail_from.clone(),
            recipient,
        });
    }

    fn reset_transaction(&mut self) {
        self.mail_from = None;
        self.smtputf8 = false;
        self.mail_dsn.clear();
        self.rcpts.clear();
        self.rcpt_dsn.clear();
    }

    /// Checks a path's characters and a command's parameters against the extensions this host
    /// offers: the reply to refuse with, or the DSN parameters to record. `utf8_ok`: the
    /// transaction declared SMTPUTF8 (for MAIL: its own parameters say so).
    fn check_extensions(&self, path: &str, params: &[u8], utf8_ok: bool) -> Result<String, Reply> {
        let ext = self.host.spec.extensions;
        let mut dsn = Vec::new();
        for p in params.split(|b| *b == b' ').filter(|p| !p.is_empty()) {
            let key = p.split(|b| *b == b'=').next().unwrap_or_default();
            let is = |k: &str| key.eq_ignore_ascii_case(k.as_bytes());
            if is("SMTPUTF8") && !ext.smtputf8 {
                return Err(reply::UNKNOWN_PARAMETER);
            }
            if is("RET") || is("ENVID") || is("NOTIFY") || is("ORCPT") {
                if !ext.dsn {
                    return Err(reply::UNKNOWN_PARAMETER);
                }
                dsn.push(String::from_utf8_lossy(p).into_owned());
            }
        }
        let utf8_taken = ext.smtputf8 && utf8_ok;
        if !utf8_taken && !path.is_ascii() {
            return Err(reply::NEEDS_SMTPUTF8);
        }
        Ok(dsn.join(" "))
    }

    /// Handles input and writes replies until the session ends.
    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(&mut self, io: &mut S) -> io::Result<End> {
        let idle = self.host.idle_timeout();
        let slow = match self.host.spec.profile {
            Profile::Slow { delay } => Some(Pace::Reply(delay)),
            Profile::Tarpit { byte_delay, .. } => Some(Pace::Byte(byte_delay)),
            _ => None,
        };
        loop {
            loop {
                if slow.is_some() && !self.out.is_empty() {
                    self.flush(io, slow).await?;
                }
                match self.step() {
                    Step::Continue => {}
                    Step::NeedMore => break,
                    Step::Close => {
                        // Closed before the 221 is written: the client cannot act on it sooner.
                        self.open = None;
                        return self.flush(io, slow).await.map(|_| End::Closed);
                    }
                    Step::StartTls => return self.flush(io, slow).await.map(|_| End::StartTls),
                    Step::Drop => return self.flush(io, slow).await.map(|_| End::Dropped),
                }
            }
            self.flush(io, slow).await?;
            if self.inbuf.capacity() - self.inbuf.len() < READ_CHUNK / 4 {
                self.inbuf.reserve(READ_CHUNK);
            }
            match tokio::time::timeout(idle, io.read_buf(&mut self.inbuf)).await {
                Err(_) => {
                    self.reply(reply::IDLE_TIMEOUT);
                    return self.flush(io, None).await.map(|_| End::Closed);
                }
                Ok(Ok(0)) => return Ok(End::Closed),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e),
            }
        }
    }

    /// Hands pending records to the recorder (before the replies, so a client that sees 250
    /// finds its copy recorded), then writes the replies.
    async fn flush<S: AsyncWrite + Unpin>(
        &mut self,
        io: &mut S,
        pace: Option<Pace>,
    ) -> io::Result<()> {
        if !self.copies.is_empty() || !self.rejections.is_empty() {
            let copies = std::mem::take(&mut self.copies);
            let rejections = std::mem::take(&mut self.rejections);
            self.host.recorder.record(copies, rejections);
        }
        if self.out.is_empty() {
            return Ok(());
        }
        match pace {
            None => io.write_all(&self.out).await?,
            Some(Pace::Reply(d)) => {
                tokio::time::sleep(d).await;
                io.write_all(&self.out).await?;
            }
            Some(Pace::Byte(d)) => {
                // A tarpit: each byte its own write (and segment: the socket has no Nagle),
                // so the client sees progress, never a whole line.
                for i in 0..self.out.len() {
                    tokio::time::sleep(d).await;
                    io.write_all(&self.out[i..=i]).await?;
                    io.flush().await?;
                }
            }
        }
        self.out.clear();
        Ok(())
    }

    fn step(&mut self) -> Step {
        match self.mode {
            Mode::Command => self.step_command(),
            Mode::Data { .. } => self.step_data(),
        }
    }

    fn step_command(&mut self) -> Step {
        let Some(nl) = memchr::memchr(b'\n', &self.inbuf) else {
            if self.inbuf.len() > MAX_COMMAND_LINE {
                self.reply(reply::LINE_TOO_LONG);
                return Step::Close;
            }
            return Step::NeedMore;
        };
        if nl > MAX_COMMAND_LINE {
            self.reply(reply::LINE_TOO_LONG);
            return Step::Close;
        }
        let line = self.inbuf.split_to(nl + 1);
        let line = line.strip_suffix(b"\n").unwrap_or(&line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let step = self.command(line);
        if self.errors > MAX_ERRORS {
            return Step::Close;
        }
        step
    }

    fn command(&mut self, line: &[u8]) -> Step {
        let verb: [u8; 4] = match line.get(..4) {
            Some(v) => [v[0], v[1], v[2], v[3]].map(|b| b.to_ascii_uppercase()),
            None => [0; 4],
        };
        let args = line.get(4..).unwrap_or_default();
        match &verb {
            b"EHLO" | b"HELO" => {
                self.reset_transaction();
                self.greeted = true;
                let text = match (&verb, self.tls) {
                    (b"HELO", _) => &self.host.helo,
                    (_, false) => &self.host.ehlo_plain,
                    (_, true) => &self.host.ehlo_tls,
                };
                let text = text.clone();
                self.push(text.as_bytes());
            }
            b"MAIL" => return self.mail(args),
            b"RCPT" => self.rcpt(args),
            b"DATA" => return self.data_command(),
            b"RSET" => {
                self.reset_transaction();
                self.reply(reply::OK);
            }
            b"NOOP" => self.reply(reply::OK),
            b"VRFY" => self.reply(reply::CANNOT_VRFY),
            b"QUIT" => {
                self.reply(reply::BYE);
                return Step::Close;
            }
            b"STAR" if line.eq_ignore_ascii_case(b"STARTTLS") => return self.starttls(),
            _ => self.error(reply::UNRECOGNIZED),
        }
        Step::Continue
    }

    fn error(&mut self, r: Reply) {
        self.errors += 1;
        self.reply(r);
    }

    fn starttls(&mut self) -> Step {
        if self.tls || self.host.tls.is_none() {
            self.error(reply::NO_STARTTLS);
            return Step::Continue;
        }
        self.reply(reply::TLS_READY);
        Step::StartTls
    }

    fn mail(&mut self, args: &[u8]) -> Step {
        if !self.greeted || self.mail_from.is_some() {
            self.error(reply::BAD_SEQUENCE);
            return Step::Continue;
        }
        let Some((sender, params)) = parse_path(args, b" FROM:") else {
            self.error(reply::SYNTAX);
            return Step::Continue;
        };
        let smtputf8 = params
            .split(|b| *b == b' ')
            .any(|p| p.eq_ignore_ascii_case(b"SMTPUTF8"));
        let mail_dsn = match self.check_extensions(&sender, params, smtputf8) {
            Ok(dsn) => dsn,
            Err(r) => {
                self.error(r);
                return Step::Continue;
            }
        };
        if let Profile::Throttle {
            max_msgs_per_conn: Some(max),
            ..
        }
        | Profile::RateLimited {
            max_msgs_per_conn: Some(max),
            ..
        } = self.host.spec.profile
        {
            if self.msgs_on_conn >= max {
                self.mail_from = Some(sender);
                self.refuse(reply::THROTTLED_CONN, None);
                return Step::Close;
            }
        }
        if self.host.rate.as_ref().is_some_and(|b| !b.take()) {
            // Recorded with the sender, so reports count refused MAILs per provider.
            self.mail_from = Some(sender);
            self.refuse(reply::RATE_LIMITED, None);
            self.mail_from = None;
            return Step::Continue;
        }
        if declared_size(params).is_some_and(|s| s > self.host.settings.max_message_bytes) {
            self.refuse(reply::TOO_BIG, None);
            return Step::Continue;
        }
        self.mail_from = Some(sender);
        self.smtputf8 = smtputf8;
        self.mail_dsn = mail_dsn;
        self.reply(reply::MAIL_OK);
        Step::Continue
    }

    fn rcpt(&mut self, args: &[u8]) {
        if self.mail_from.is_none() {
            self.error(reply::BAD_SEQUENCE);
            return;
        }
        let Some((rcpt, params)) = parse_path(args, b" TO:").filter(|(r, _)| !r.is_empty()) else {
            self.error(reply::SYNTAX);
            return;
        };
        let dsn = match self.check_extensions(&rcpt, params, self.smtputf8) {
            Ok(dsn) => dsn,
            Err(r) => {
                self.error(r);
                return;
            }
        };
        if self.rcpts.len() >= self.host.settings.max_recipients {
            self.refuse(reply::TOO_MANY_RCPTS, Some(rcpt));
            return;
        }
        match self.rcpt_verdict(&rcpt) {
            None => {
                self.rcpts.push(rcpt);
                self.rcpt_dsn.push(dsn);
                self.reply(reply::RCPT_OK);
            }
            Some(r) => match self.host.spec.profile {
                Profile::Greylist {
                    retry_after,
                    announce: true,
                } if r == reply::GREYLISTED => {
                    // The interval in the text, as e.g. Exim's greylistd and Postgrey's
                    // "--greylist-text" setups say it. Only the host's own setting is echoed.
                    let secs = retry_after.as_secs_f64().ceil() as u64;
                    let line = format!("451 4.7.1 Greylisted, please retry in {secs} seconds\r\n");
                    self.push(line.as_bytes());
                    self.record_refusal(r, Some(rcpt));
                }
                _ => self.refuse(r, Some(rcpt)),
            },
        }
    }

    /// The profile's answer to a recipient: `None` accepts it.
    fn rcpt_verdict(&self, rcpt: &str) -> Option<Reply> {
        match &self.host.spec.profile {
            Profile::UnknownUsers { users, fraction } => {
                let local = rcpt.rsplit_once('@').map_or(rcpt, |(l, _)| l);
                is_unknown(local, users, *fraction).then_some(reply::USER_UNKNOWN)
            }
            Profile::Greylist { retry_after, .. } => {
                let sender = self.mail_from.as_deref().unwrap_or_default();
                self.greylisted(sender, rcpt, *retry_after)
                    .then_some(reply::GREYLISTED)
            }
            Profile::Throttle {
                max_msgs_per_min: Some(max),
                ..
            } => (!self.host.take_minute_slot(*max)).then_some(reply::THROTTLED_RATE),
            _ => None,
        }
    }

    /// True while the pair is within its greylisting interval (the first attempt starts it).
    fn greylisted(&self, sender: &str, rcpt: &str, retry_after: Duration) -> bool {
        let now = Instant::now();
        let mut table = self.host.lock_greylist();
        if table.len() >= MAX_GREYLIST_ENTRIES {
            table.clear();
        }
        let first = *table
            .entry((sender.into(), rcpt.to_ascii_lowercase().into()))
            .or_insert(now);
        now.duration_since(first) < retry_after
    }

    fn data_command(&mut self) -> Step {
        if self.mail_from.is_none() {
            self.error(reply::BAD_SEQUENCE);
            return Step::Continue;
        }
        if self.rcpts.is_empty() {
            self.reset_transaction();
            self.reply(reply::NO_VALID_RCPTS);
            return Step::Continue;
        }
        self.reply(reply::START_DATA);
        if let Profile::DropMidData { after_msgs } = self.host.spec.profile {
            if self.msgs_on_conn >= after_msgs {
                return Step::Drop;
            }
        }
        if self.host.spec.profile == Profile::DropFirstAttempt
            && self.host.first_attempt(&self.rcpts)
        {
            return Step::Drop;
        }
        self.mode = Mode::Data {
            scan_from: 0,
            at_start: true,
            too_big: false,
        };
        Step::Continue
    }

    fn step_data(&mut self) -> Step {
        let Mode::Data {
            scan_from,
            at_start,
            too_big,
        } = self.mode
        else {
            return Step::Continue;
        };
        let Some((msg_len, consumed)) = data::find_end(&self.inbuf, scan_from, at_start) else {
            let len = self.inbuf.len();
            let over = too_big || len > self.host.settings.max_message_bytes;
            if over && len > 4 {
                // Keep only what may be the start of a split end marker.
                self.inbuf.advance(len - 4);
            }
            self.mode = Mode::Data {
                scan_from: self.inbuf.len().saturating_sub(4),
                at_start: at_start && !over,
                too_big: over,
            };
            return Step::NeedMore;
        };
        let raw = self.inbuf.split_to(consumed).freeze();
        self.mode = Mode::Command;
        if too_big || msg_len > self.host.settings.max_message_bytes {
            // One reply to the message (SMTP, not LMTP), one record per recipient refused.
            self.reply(reply::TOO_BIG);
            for rcpt in std::mem::take(&mut self.rcpts) {
                self.record_refusal(reply::TOO_BIG, Some(rcpt));
            }
            self.reset_transaction();
            return Step::Continue;
        }
        self.accept_message(raw.slice(..msg_len));
        Step::Continue
    }

    /// Records one copy per accepted recipient and replies 250.
    fn accept_message(&mut self, raw: Bytes) {
        let msg = data::unstuff(raw);
        let message_id = data::message_id(&msg).map(|id| self.intern_message_id(id));
        let mime = self.mime_verdict(&msg);
        let digest = recorder::digest(&msg);
        let at_ms = self.host.recorder.elapsed_ms();
        let keep = self.host.settings.keep_messages.then(|| msg.clone());
        let sender = self.mail_from.take().unwrap_or_default();
        let (smtputf8, mail_dsn) = (self.smtputf8, std::mem::take(&mut self.mail_dsn));
        let rcpt_dsn = std::mem::take(&mut self.rcpt_dsn);
        for (i, rcpt) in self.rcpts.drain(..).enumerate() {
            let rcpt_dsn = rcpt_dsn.get(i).map(String::as_str).unwrap_or_default();
            let dsn = [mail_dsn.as_str(), rcpt_dsn]
                .iter()
                .filter(|s| !s.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
            self.copies.push(CopyRecord {
                host: self.host.name.clone(),
                sender: sender.clone(),
                recipient: rcpt,
                size: msg.len(),
                digest,
                at_ms,
                message_id: message_id.clone(),
                mime,
                tls: self.tls,
                duplicate: false,
                message: keep.clone(),
                smtputf8,
                dsn: dsn.into(),
                peer: self.peer,
            });
        }
        self.msgs_on_conn += 1;
        self.reply(reply::QUEUED);
    }

    /// Copies of one post share a Message-ID: share one allocation too.
    fn intern_message_id(&mut self, id: String) -> Arc<str> {
        match &self.last_message_id {
            Some(last) if **last == *id => last.clone(),
            _ => {
                let id: Arc<str> = Arc::from(id);
                self.last_message_id = Some(id.clone());
                id
            }
        }
    }

    fn mime_verdict(&self, msg: &[u8]) -> MimeVerdict {
        let every = u64::from(self.host.settings.check_mime_every);
        if every == 0 {
            return MimeVerdict::NotChecked;
        }
        let n = self.host.mime_counter.fetch_add(1, Ordering::Relaxed);
        if n % every == 0 {
            mime::check(msg)
        } else {
            mime::check_lines_only(msg)
        }
    }
}

/// Parses `<path> params` after `keyword` (" FROM:" / " TO:", case-insensitive, spaces allowed
/// after the colon). The path must be printable ASCII without angle brackets inside, or UTF-8
/// beyond ASCII (whether the host takes that is `check_extensions`' call).
fn parse_path<'a>(args: &'a [u8], keyword: &[u8]) -> Option<(Box<str>, &'a [u8])> {
    let head = args.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    let rest = args[keyword.len()..].trim_ascii_start();
    let (path, params) = match rest.strip_prefix(b"<") {
        Some(r) => {
            let end = memchr::memchr(b'>', r)?;
            (&r[..end], &r[end + 1..])
        }
        None => {
            let end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        }
    };
    if !path
        .iter()
        .all(|b| (33..=126).contains(b) && *b != b'<' || *b >= 0x80)
    {
        return None;
    }
    let path = std::str::from_utf8(path).ok()?;
    if path.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return None;
    }
    Some((path.into(), params))
}

/// The SIZE=n parameter of MAIL, if given and numeric.
fn declared_size(params: &[u8]) -> Option<usize> {
    params.split(|b| *b == b' ').find_map(|p| {
        let v = p
            .get(..5)?
            .eq_ignore_ascii_case(b"SIZE=")
            .then(|| &p[5..])?;
        std::str::from_utf8(v).ok()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_and_size() {
        let (p, params) = parse_path(b" FROM:<a@b.example> SIZE=100", b" FROM:").unwrap();
        assert_eq!(&*p, "a@b.example");
        assert_eq!(declared_size(params), Some(100));
        let (p, _) = parse_path(b" from: <>", b" FROM:").unwrap();
        assert_eq!(&*p, "");
        let (p, _) = parse_path(b" TO:c@d.example", b" TO:").unwrap();
        assert_eq!(&*p, "c@d.example");
        assert!(parse_path(b" TO:<a b@c>", b" TO:").is_none());
        assert!(parse_path(b" TO:<a@c", b" TO:").is_none());
        assert!(parse_path(b"XTO:<a@c>", b" TO:").is_none());
        assert_eq!(declared_size(b" BODY=8BITMIME"), None);
        let (p, _) = parse_path(" TO:<jörg@x.example>".as_bytes(), b" TO:").unwrap();
        assert_eq!(&*p, "jörg@x.example");
        assert!(parse_path(b" TO:<a\xc0\xaf@x>", b" TO:").is_none());
        assert!(parse_path(" TO:<a\u{85}@x>".as_bytes(), b" TO:").is_none());
    }
}
