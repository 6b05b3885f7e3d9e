//! The server-side SMTP/LMTP session as a state machine: bytes in, [`Action`]s out, no I/O.
//!
//! The driver (the `inbound` crate, or a test) owns the socket and loops:
//! 1. [`Session::feed`] with the bytes read so far. It consumes every complete command (and DATA
//!    line) and returns the actions in order. It stops early after an action that needs the
//!    driver: [`Action::CheckRecipient`] (answer with [`Session::recipient_checked`]) or
//!    [`Action::Message`] (answer with [`Session::message_done`]); their returned actions follow
//!    in order, then the driver calls `feed` again on the same buffer.
//! 2. When `feed` returns nothing, every complete command has been answered: the driver writes
//!    the batch of replies in one write (RFC 2920 §3.1 lets a server batch replies to pipelined
//!    commands) and reads more, waiting at most [`Session::read_timeout`] per read and at most
//!    [`Session::input_deadline`] in all since its last reply.
//! 3. After [`Action::Close`] it writes what it has and closes the connection.
//!
//! 4. After [`Action::StartTls`] it writes the queued replies (ending with `220 2.0.0`), runs the
//!    TLS handshake on the socket and calls [`Session::tls_started`] (or closes on failure).
//!
//! States: `Command` ⇄ `AwaitRecipient`; `Command` → `Data` → `AwaitMessage` → `Command`;
//! `Command` → `AwaitTls` → `Command` (greeting forgotten, RFC 3207 §4.2); any → `Closed`. A transaction (MAIL … DATA) needs a greeting first; EHLO/HELO/LHLO and RSET abort it.
//!
//! Invariants: after `feed` returns, the buffer holds less than one command line (or one DATA
//! line) of unconsumed input, unless the session is waiting on the driver or closed. Every
//! command gets exactly one reply, in order; in LMTP the end of DATA gets one reply per
//! successful RCPT (RFC 2033 §4.2). Recipients handed over are distinct.
//!
//! International addresses (RFC 6531): a UTF-8 reverse path needs `SMTPUTF8` on its MAIL, and
//! a UTF-8 forward path a transaction whose MAIL had it; otherwise `553 5.6.7`. DSN parameters
//! (RFC 3461) reach the handler with the envelope (`MailParams`, `Envelope::rcpt_params`).
//!
//! Limits: see [`Limits`]; with [`Session::with_budget`] message bodies are also bounded by the
//! global [`BufferBudget`] (`452 4.3.1` when it is spent); `max_errors` counts permanent (5xx) replies to commands, refused
//! recipients and refused message contents, not the handler's verdicts on a finished message.
//!
//! SECURITY (STARTTLS, RFC 3207 §4.2 and CVE-2011-0411): bytes the peer pipelined after
//! STARTTLS arrived in plaintext and could have been injected by a man in the middle; `feed`
//! discards them with the command, and nothing learned before the handshake (greeting,
//! transaction) survives it. STARTTLS is offered only when the driver can upgrade, never twice,
//! and never in LMTP.
//!
//! SECURITY: all input is hostile until parsed. A peer cannot make the session buffer more than
//! the limits allow, cannot get a message with a bare CR/LF accepted or split (see [`crate::data`]),
//! and is disconnected after `max_errors` errors, which stops a pipeline full of garbage.

use bytes::{Bytes, BytesMut};
use herald_types::{Address, Reply};
use std::sync::Arc;
use std::time::Duration;

use crate::budget::{BufferBudget, Reservation, GRANT_STEP};
use crate::command::{self, Command, ForwardPath, HeloVerb, MailParams, RcptParams};
use crate::data::{DataProblem, DataReader, DataStep};
use crate::replies::{self, Canned};
use crate::Limits;

/// Which protocol the listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// RFC 5321, greeted with EHLO/HELO; one reply at the end of DATA.
    Smtp,
    /// RFC 2033, greeted with LHLO; one reply per recipient at the end of DATA.
    Lmtp,
}

impl Mode {
    fn banner_protocol(self) -> &'static str {
        match self {
            Mode::Smtp => "ESMTP",
            Mode::Lmtp => "LMTP",
        }
    }
}

/// The greeting the peer gave (validated domain or address literal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Helo {
    pub verb: HeloVerb,
    pub domain: String,
}

/// A complete, acceptable message and its envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub mode: Mode,
    pub helo: Helo,
    /// `None` is the null reverse path `<>` (a bounce or other notification).
    pub mail_from: Option<Address>,
    /// Distinct accepted recipients, in the order first accepted. The handler answers with one
    /// reply per entry, in this order.
    pub rcpts: Vec<Address>,
    /// The DSN parameters (RFC 3461) each of `rcpts` came with, same order.
    pub rcpt_params: Vec<RcptParams>,
    pub params: MailParams,
    /// The message: dot-unstuffed, CRLF line endings, no terminating `.` line.
    pub body: Bytes,
}

/// What the driver must do next, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Queue this reply for the next write.
    Reply(Reply),
    /// Ask whether this recipient is ours, then call [`Session::recipient_checked`].
    CheckRecipient(Address),
    /// Store this message durably, then call [`Session::message_done`].
    Message(Envelope),
    /// Write the queued replies (the last is `220 2.0.0 Ready to start TLS`), run the server
    /// side of a TLS handshake, then call [`Session::tls_started`]. Any unread input was already
    /// discarded by `feed`; the driver must drop whatever else it read in plaintext too.
    StartTls,
    /// Write the queued replies and close the connection.
    Close,
}

enum Phase {
    Command,
    Data(DataReader),
    AwaitRecipient(Address, RcptParams),
    /// `accepted[i]` is the index in `Envelope::rcpts` of the i-th successful RCPT.
    /// `_held` keeps the body's share of the budget until the handler has stored it.
    AwaitMessage {
        accepted: Vec<usize>,
        distinct: usize,
        _held: Option<Reservation>,
    },
    /// STARTTLS was accepted: nothing is read until [`Session::tls_started`].
    AwaitTls,
    Closed,
}

/// One mail transaction, from MAIL to the end of DATA.
struct Transaction {
    helo: Helo,
    mail_from: Option<Address>,
    params: MailParams,
    /// Distinct accepted recipients.
    rcpts: Vec<Address>,
    /// The RCPT parameters of each of `rcpts` (those of its first successful RCPT).
    rcpt_params: Vec<RcptParams>,
    /// One entry per successful RCPT command (duplicates included): LMTP replies per command.
    accepted: Vec<usize>,
    /// RCPT commands that reached a verdict, to tell "no RCPT yet" (503) from "all refused" (554).
    attempts: usize,
}

/// One SMTP or LMTP session. Cheap to create; owns no I/O.
pub struct Session {
    mode: Mode,
    limits: Limits,
    hostname: Arc<str>,
    phase: Phase,
    helo: Option<Helo>,
    txn: Option<Transaction>,
    errors: u32,
    /// In the middle of a command line longer than the limit: drop bytes until its LF.
    discarding_line: bool,
    /// The driver can run a TLS handshake (a certificate is configured).
    starttls_available: bool,
    /// The connection is already encrypted (after STARTTLS, or an implicit-TLS listener).
    tls_active: bool,
    /// The global budget message bodies are buffered against; `None`: unbounded.
    budget: Option<Arc<BufferBudget>>,
}

impl Session {
    /// `hostname` is our name in the banner and replies; it must be a validated domain.
    pub fn new(mode: Mode, limits: Limits, hostname: impl Into<Arc<str>>) -> Session {
        Session {
            mode,
            limits,
            hostname: hostname.into(),
            phase: Phase::Command,
            helo: None,
            txn: None,
            errors: 0,
            discarding_line: false,
            starttls_available: false,
            tls_active: false,
            budget: None,
        }
    }

    /// Buffers message bodies against `budget`, shared with other sessions: when it is spent,
    /// DATA (or `MAIL … SIZE=`) gets `452 4.3.1`, or the body is read to its end and refused
    /// with it.
    pub fn with_budget(mut self, budget: Arc<BufferBudget>) -> Session {
        self.budget = Some(budget);
        self
    }

    /// Offers STARTTLS (SMTP only; ignored in LMTP): the driver promises to handle
    /// [`Action::StartTls`].
    pub fn with_starttls(mut self, available: bool) -> Session {
        self.starttls_available = available && self.mode == Mode::Smtp;
        self
    }

    /// Marks the connection as encrypted from the start (implicit TLS, RFC 8314): STARTTLS is
    /// not offered.
    pub fn with_tls_active(mut self) -> Session {
        self.tls_active = true;
        self
    }

    /// True once the connection is encrypted.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// The handshake after [`Action::StartTls`] succeeded: the session starts over from the
    /// greeting state (RFC 3207 §4.2: the client must EHLO again), STARTTLS is no longer offered.
    pub fn tls_started(&mut self) {
        if matches!(self.phase, Phase::AwaitTls) {
            self.phase = Phase::Command;
            self.helo = None;
            self.txn = None;
            self.discarding_line = false;
            self.tls_active = true;
        }
    }

    fn starttls_offered(&self) -> bool {
        self.starttls_available && !self.tls_active
    }

    /// The 220 banner to send first.
    pub fn greeting(&self) -> Reply {
        replies::greeting(&self.hostname, self.mode.banner_protocol())
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How long the driver may wait for the peer's next bytes.
    pub fn read_timeout(&self) -> Duration {
        match self.phase {
            Phase::Data(_) => self.limits.data_timeout(),
            _ => self.limits.command_timeout(),
        }
    }

    /// How long the peer has, from our last reply, for all the input it owes now: one command
    /// line, or in DATA the whole body up to its final `.` (a deadline that trickled bytes do
    /// not extend; the driver also applies [`Session::read_timeout`] to each read).
    pub fn input_deadline(&self) -> Duration {
        match self.phase {
            Phase::Data(_) => self.limits.data_deadline(),
            _ => self.limits.command_timeout(),
        }
    }

    /// True while a DATA body is being read (for the driver's timeout accounting).
    pub fn in_data(&self) -> bool {
        matches!(self.phase, Phase::Data(_))
    }

    /// True between MAIL and the reply to the end of DATA: a graceful shutdown lets it finish.
    pub fn in_transaction(&self) -> bool {
        self.txn.is_some()
            || matches!(
                self.phase,
                Phase::Data(_) | Phase::AwaitRecipient(..) | Phase::AwaitMessage { .. }
            )
    }

    /// The reverse path of the open transaction (`None` outside one, or for the null sender
    /// `<>`): the handler's recipient check may refuse a banned sender at RCPT.
    pub fn mail_from(&self) -> Option<&Address> {
        self.txn.as_ref().and_then(|t| t.mail_from.as_ref())
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// Consumes complete input from `buf` and returns what to do, in order. Returns an empty list
    /// when more input is needed (or while waiting on the driver, or once closed).
    pub fn feed(&mut self, buf: &mut BytesMut) -> Vec<Action> {
        let mut out = Vec::new();
        loop {
            match &mut self.phase {
                Phase::Command => match self.next_command_line(buf) {
                    Some(Ok(line)) => self.on_line(&line, &mut out),
                    Some(Err(canned)) => self.respond(canned.reply(), &mut out),
                    None => break,
                },
                Phase::Data(reader) => match reader.consume(buf) {
                    DataStep::NeedMore => break,
                    DataStep::Done(result) => {
                        let held = reader.take_reservation();
                        self.on_data_end(result, held, &mut out);
                    }
                },
                Phase::AwaitTls => {
                    // CVE-2011-0411: plaintext pipelined after STARTTLS is never interpreted.
                    buf.clear();
                    break;
                }
                Phase::AwaitRecipient(..) | Phase::AwaitMessage { .. } | Phase::Closed => break,
            }
        }
        out
    }

    /// The handler's verdict on the recipient of the last [`Action::CheckRecipient`]. A positive
    /// reply passed as `Err` is treated as a local error, so it can never look like acceptance.
    pub fn recipient_checked(&mut self, verdict: Result<(), Reply>) -> Vec<Action> {
        let mut out = Vec::new();
        let (addr, params) = match std::mem::replace(&mut self.phase, Phase::Command) {
            Phase::AwaitRecipient(addr, params) => (addr, params),
            other => {
                self.phase = other; // not waiting for a verdict: nothing to do
                return out;
            }
        };
        let Some(txn) = self.txn.as_mut() else {
            self.respond(replies::NEED_MAIL.reply(), &mut out);
            return out;
        };
        txn.attempts += 1;
        let reply = match verdict {
            Ok(()) => {
                txn.rcpts.push(addr);
                txn.rcpt_params.push(params);
                txn.accepted.push(txn.rcpts.len() - 1);
                replies::RECIPIENT_OK.reply()
            }
            Err(reply) if reply.is_positive() => replies::LOCAL_ERROR.reply(),
            Err(reply) => reply,
        };
        self.respond(reply, &mut out);
        out
    }

    /// The handler's replies for the last [`Action::Message`]: one per `Envelope::rcpts` entry,
    /// in order (missing ones count as `451 4.3.0`, extra ones are ignored).
    ///
    /// LMTP sends one reply per successful RCPT. SMTP sends one: the first reply when all are
    /// positive, else the first transient one (the sender retries: a duplicate beats a loss),
    /// else the first permanent one. A handler should therefore be all-or-nothing in SMTP mode.
    /// A 421 among the replies closes the session after them.
    pub fn message_done(&mut self, verdicts: Vec<Reply>) -> Vec<Action> {
        // The body's reservation is dropped here: the handler has stored (or refused) it.
        let (accepted, distinct) = match std::mem::replace(&mut self.phase, Phase::Command) {
            Phase::AwaitMessage {
                accepted, distinct, ..
            } => (accepted, distinct),
            other => {
                self.phase = other;
                return Vec::new();
            }
        };
        let mut per_rcpt = verdicts;
        per_rcpt.truncate(distinct);
        per_rcpt.resize_with(distinct, || replies::LOCAL_ERROR.reply());
        let replies = match self.mode {
            Mode::Lmtp => accepted.iter().map(|&i| per_rcpt[i].clone()).collect(),
            Mode::Smtp => vec![aggregate(per_rcpt)],
        };
        let closing = replies.iter().any(|r| r.code == 421);
        let mut out: Vec<Action> = replies.into_iter().map(Action::Reply).collect();
        if closing {
            self.close(&mut out);
        }
        out
    }

    /// The next complete command line, or the fact that one was too long (reported when its end
    /// arrives, so replies stay in command order).
    fn next_command_line(&mut self, buf: &mut BytesMut) -> Option<Result<BytesMut, Canned>> {
        let max = self.limits.max_command_line_octets;
        match buf.iter().position(|&b| b == b'\n') {
            Some(lf) => {
                let line = buf.split_to(lf + 1);
                if std::mem::take(&mut self.discarding_line) || line.len() > max {
                    return Some(Err(replies::LINE_TOO_LONG));
                }
                Some(Ok(line))
            }
            None => {
                // A legal line without its LF is shorter than `max`; drop longer ones unbuffered.
                if self.discarding_line || buf.len() >= max {
                    buf.clear();
                    self.discarding_line = true;
                }
                None
            }
        }
    }

    fn on_line(&mut self, line: &[u8], out: &mut Vec<Action>) {
        let Some(text) = line.strip_suffix(b"\r\n") else {
            return self.respond(replies::BARE_LF_IN_COMMAND.reply(), out);
        };
        match command::parse(text) {
            Ok(cmd) => self.dispatch(cmd, out),
            Err(e) => self.respond(e.reply(), out),
        }
    }

    fn dispatch(&mut self, cmd: Command, out: &mut Vec<Action>) {
        let reply = match cmd {
            Command::Hello { verb, domain } => self.on_hello(verb, domain),
            Command::Mail { from, params } => self.on_mail(from, params),
            Command::Rcpt { to, params } => match self.on_rcpt(to, &params) {
                Ok(addr) => {
                    self.phase = Phase::AwaitRecipient(addr.clone(), params);
                    return out.push(Action::CheckRecipient(addr));
                }
                Err(reply) => reply,
            },
            Command::Data => self.on_data(),
            Command::Rset => {
                self.txn = None;
                replies::OK.reply()
            }
            Command::Noop => replies::OK.reply(),
            Command::Vrfy => replies::CANNOT_VRFY.reply(),
            Command::Help => replies::HELP.reply(),
            Command::StartTls => {
                if !self.starttls_offered() {
                    replies::NOT_IMPLEMENTED.reply()
                } else if self.txn.is_some() {
                    // RFC 3207 §4: not in the middle of a mail transaction.
                    replies::BAD_SEQUENCE.reply()
                } else {
                    out.push(Action::Reply(replies::READY_TO_START_TLS.reply()));
                    out.push(Action::StartTls);
                    self.phase = Phase::AwaitTls;
                    return;
                }
            }
            Command::Quit => {
                out.push(Action::Reply(replies::BYE.reply()));
                return self.close(out);
            }
        };
        self.respond(reply, out);
    }

    fn on_hello(&mut self, verb: HeloVerb, domain: String) -> Reply {
        let allowed = matches!(
            (self.mode, verb),
            (Mode::Lmtp, HeloVerb::Lhlo) | (Mode::Smtp, HeloVerb::Helo | HeloVerb::Ehlo)
        );
        if !allowed {
            return replies::UNKNOWN_COMMAND.reply();
        }
        // RFC 5321 §4.1.4: a new greeting aborts any transaction, like RSET.
        self.txn = None;
        self.helo = Some(Helo { verb, domain });
        match verb {
            HeloVerb::Helo => replies::helo(&self.hostname),
            HeloVerb::Ehlo | HeloVerb::Lhlo => {
                replies::ehlo_with(&self.hostname, &self.limits, self.starttls_offered())
            }
        }
    }

    fn on_mail(&mut self, from: Option<Address>, params: MailParams) -> Reply {
        let Some(helo) = &self.helo else {
            return self.need_greeting();
        };
        if self.txn.is_some() {
            return replies::NESTED_MAIL.reply();
        }
        // RFC 1869 §4: parameters belong to the extensions EHLO advertised; HELO has none.
        if helo.verb == HeloVerb::Helo && params != MailParams::default() {
            return replies::UNKNOWN_PARAMETER.reply();
        }
        // RFC 6531 §3.4: a UTF-8 reverse path needs the SMTPUTF8 parameter.
        if from.as_ref().is_some_and(Address::needs_smtputf8) && !params.smtputf8 {
            return replies::NEEDS_SMTPUTF8.reply();
        }
        if params
            .size
            .is_some_and(|s| s > self.limits.max_message_octets)
        {
            return replies::MESSAGE_TOO_BIG.reply();
        }
        // RFC 1870 §6.1: a declared size we cannot hold right now is a transient refusal.
        if params.size.is_some_and(|s| self.budget_short(s)) {
            return replies::INSUFFICIENT_STORAGE.reply();
        }
        self.txn = Some(Transaction {
            helo: helo.clone(),
            mail_from: from,
            params,
            rcpts: Vec::new(),
            rcpt_params: Vec::new(),
            accepted: Vec::new(),
            attempts: 0,
        });
        replies::SENDER_OK.reply()
    }

    /// `Ok(address)` when the handler must be asked; `Err(reply)` when the answer is known.
    fn on_rcpt(&mut self, to: ForwardPath, params: &RcptParams) -> Result<Address, Reply> {
        let Some(helo) = &self.helo else {
            return Err(self.need_greeting());
        };
        // RFC 1869 §4, as for MAIL: HELO announced no DSN.
        if helo.verb == HeloVerb::Helo && *params != RcptParams::default() {
            return Err(replies::UNKNOWN_PARAMETER.reply());
        }
        let Some(txn) = self.txn.as_mut() else {
            return Err(replies::NEED_MAIL.reply());
        };
        if txn.accepted.len() >= self.limits.max_recipients {
            return Err(replies::TOO_MANY_RECIPIENTS.reply());
        }
        let addr = match to {
            ForwardPath::Mailbox(addr) => addr,
            // §4.5.1: `<Postmaster>` means ours; the handler decides whether we have one.
            ForwardPath::Postmaster => Address::from_parts("postmaster", &self.hostname)
                .map_err(|_| replies::NO_SUCH_RECIPIENT.reply())?,
        };
        // RFC 6531 §3.4: a UTF-8 forward path only in a transaction that declared SMTPUTF8.
        if addr.needs_smtputf8() && !txn.params.smtputf8 {
            return Err(replies::NEEDS_SMTPUTF8.reply());
        }
        // Already accepted in this transaction: same verdict, and no duplicate hand-over.
        if let Some(i) = txn.rcpts.iter().position(|r| *r == addr) {
            txn.attempts += 1;
            txn.accepted.push(i);
            return Err(replies::RECIPIENT_OK.reply());
        }
        Ok(addr)
    }

    fn on_data(&mut self) -> Reply {
        if self.helo.is_none() {
            return self.need_greeting();
        }
        let Some(txn) = &self.txn else {
            return replies::NEED_MAIL.reply();
        };
        if txn.accepted.is_empty() {
            // RFC 2033 §4.2 wants 503 in LMTP even when RCPTs were refused.
            return match (self.mode, txn.attempts) {
                (Mode::Smtp, n) if n > 0 => replies::NO_VALID_RECIPIENTS.reply(),
                _ => replies::NEED_RCPT.reply(),
            };
        }
        // Refusing before 354 spares the peer sending a body we would read and drop. A first
        // step's worth (or the declared size) must be free; the reservation is the real bound.
        let first = txn.params.size.unwrap_or(GRANT_STEP);
        if self.budget_short(first.min(self.limits.max_message_octets)) {
            return replies::INSUFFICIENT_STORAGE.reply();
        }
        let reservation = self.budget.as_ref().map(BufferBudget::reservation);
        let size = txn.params.size;
        self.phase = Phase::Data(DataReader::new(&self.limits, size, reservation));
        replies::start_data()
    }

    /// True when the global budget cannot take `octets` more right now.
    fn budget_short(&self, octets: u64) -> bool {
        self.budget.as_ref().is_some_and(|b| b.available() < octets)
    }

    fn on_data_end(
        &mut self,
        result: Result<Bytes, DataProblem>,
        held: Option<Reservation>,
        out: &mut Vec<Action>,
    ) {
        self.phase = Phase::Command;
        let Some(txn) = self.txn.take() else {
            return self.respond(replies::NEED_MAIL.reply(), out);
        };
        match result {
            Ok(body) => {
                self.phase = Phase::AwaitMessage {
                    accepted: txn.accepted,
                    distinct: txn.rcpts.len(),
                    _held: held,
                };
                out.push(Action::Message(Envelope {
                    mode: self.mode,
                    helo: txn.helo,
                    mail_from: txn.mail_from,
                    rcpts: txn.rcpts,
                    rcpt_params: txn.rcpt_params,
                    params: txn.params,
                    body,
                }));
            }
            Err(problem) => {
                // LMTP: the same refusal for each successful RCPT; counted as one error.
                let copies = match self.mode {
                    Mode::Lmtp => txn.accepted.len(),
                    Mode::Smtp => 1,
                };
                for _ in 1..copies {
                    out.push(Action::Reply(problem.reply()));
                }
                self.respond(problem.reply(), out);
            }
        }
    }

    fn need_greeting(&self) -> Reply {
        match self.mode {
            Mode::Smtp => replies::NEED_HELO.reply(),
            Mode::Lmtp => replies::NEED_LHLO.reply(),
        }
    }

    /// Queues a reply; a permanent one counts towards `max_errors`, and the last allowed error
    /// is followed by `421 4.7.0` and close. A 421 (e.g. from a handler) always closes: RFC 5321
    /// §3.8 says the server is closing the channel.
    fn respond(&mut self, reply: Reply, out: &mut Vec<Action>) {
        let permanent = reply.is_permanent();
        let closing = reply.code == 421;
        out.push(Action::Reply(reply));
        if closing {
            return self.close(out);
        }
        if permanent {
            self.errors += 1;
            if self.errors >= self.limits.max_errors {
                out.push(Action::Reply(replies::TOO_MANY_ERRORS.reply()));
                self.close(out);
            }
        }
    }

    fn close(&mut self, out: &mut Vec<Action>) {
        self.phase = Phase::Closed;
        self.txn = None;
        out.push(Action::Close);
    }
}

/// One SMTP reply for a message with several recipients (see [`Session::message_done`]).
fn aggregate(per_rcpt: Vec<Reply>) -> Reply {
    if per_rcpt.iter().all(Reply::is_positive) {
        return per_rcpt
            .into_iter()
            .next()
            .unwrap_or_else(|| replies::LOCAL_ERROR.reply());
    }
    let transient = per_rcpt.iter().position(Reply::is_transient);
    let failed = transient.or_else(|| per_rcpt.iter().position(|r| !r.is_positive()));
    failed
        .and_then(|i| per_rcpt.into_iter().nth(i))
        .unwrap_or_else(|| replies::LOCAL_ERROR.reply())
}
