//! A test driver for `Session`: feeds byte strings, answers recipient checks and messages with
//! scripted verdicts, and renders the replies as wire text and as `code enhanced` summaries.

use bytes::BytesMut;
use herald_smtp::{replies, Action, Envelope, Limits, Mode, Session};
use herald_types::{Address, Reply};

pub type RcptVerdict = fn(&Address) -> Result<(), Reply>;
pub type MessageVerdict = fn(&Address) -> Reply;

/// Lists are the addresses whose local part starts with "list".
pub fn lists_only(rcpt: &Address) -> Result<(), Reply> {
    if rcpt.local().starts_with("list") {
        Ok(())
    } else {
        Err(replies::NO_SUCH_RECIPIENT.reply())
    }
}

pub fn accept_all(_: &Address) -> Reply {
    replies::MESSAGE_ACCEPTED.reply()
}

pub struct Peer {
    pub session: Session,
    pub buf: BytesMut,
    pub messages: Vec<Envelope>,
    pub checked: Vec<Address>,
    pub closed: bool,
    /// `Action::StartTls` seen and not yet answered with `Session::tls_started`.
    pub tls_pending: bool,
    pub rcpt_verdict: RcptVerdict,
    pub message_verdict: MessageVerdict,
}

impl Peer {
    pub fn new(mode: Mode, limits: Limits) -> Peer {
        Peer {
            session: Session::new(mode, limits, "mx.herald.example"),
            buf: BytesMut::new(),
            messages: Vec::new(),
            checked: Vec::new(),
            closed: false,
            tls_pending: false,
            rcpt_verdict: lists_only,
            message_verdict: accept_all,
        }
    }

    pub fn smtp() -> Peer {
        Peer::new(Mode::Smtp, Limits::default())
    }

    pub fn lmtp() -> Peer {
        Peer::new(Mode::Lmtp, Limits::default())
    }

    /// Feeds `bytes` and drives the session until it needs more input; returns the wire text.
    pub fn send(&mut self, bytes: &[u8]) -> String {
        self.buf.extend_from_slice(bytes);
        let mut wire = String::new();
        loop {
            let actions = self.session.feed(&mut self.buf);
            if actions.is_empty() {
                break;
            }
            self.run(actions, &mut wire);
        }
        wire
    }

    fn run(&mut self, actions: Vec<Action>, wire: &mut String) {
        let last = actions.len() - 1;
        for (i, action) in actions.into_iter().enumerate() {
            match action {
                Action::Reply(r) => wire.push_str(&r.to_wire()),
                Action::CheckRecipient(addr) => {
                    assert_eq!(i, last, "the session must stop after CheckRecipient");
                    let verdict = (self.rcpt_verdict)(&addr);
                    self.checked.push(addr);
                    let more = self.session.recipient_checked(verdict);
                    self.run(more, wire);
                }
                Action::Message(env) => {
                    assert_eq!(i, last, "the session must stop after Message");
                    let verdicts = env.rcpts.iter().map(self.message_verdict).collect();
                    self.messages.push(env);
                    let more = self.session.message_done(verdicts);
                    self.run(more, wire);
                }
                Action::StartTls => {
                    assert_eq!(i, last, "the session must stop after StartTls");
                    self.tls_pending = true;
                }
                Action::Close => {
                    assert_eq!(i, last, "Close is the last action");
                    self.closed = true;
                }
            }
        }
    }

    /// Like `send`, but returns one `code[ enhanced]` summary per reply.
    pub fn codes(&mut self, bytes: &[u8]) -> Vec<String> {
        summary(&self.send(bytes))
    }
}

/// `250 2.1.0` for each reply's last line (`250` when it has no enhanced code).
pub fn summary(wire: &str) -> Vec<String> {
    wire.split("\r\n")
        .filter(|l| l.len() >= 4 && l.as_bytes()[3] == b' ')
        .map(|l| {
            let mut words = l.split(' ');
            let code = words.next().unwrap_or_default();
            match words.next() {
                Some(w)
                    if w.split('.').count() == 3
                        && w.split('.').all(|p| p.parse::<u16>().is_ok()) =>
                {
                    format!("{code} {w}")
                }
                _ => code.to_string(),
            }
        })
        .collect()
}

/// Shorthand for comparing against `summary` output.
pub fn want(codes: &[&str]) -> Vec<String> {
    codes.iter().map(|s| s.to_string()).collect()
}
