//! The SMTP session check (`smtp_session`): a hostile peer's bytes, cut into arbitrary chunks,
//! driven through [`herald_smtp::Session`] exactly as `inbound` drives it.
//!
//! Input layout: byte 0 chooses the setup (mode, STARTTLS, a global buffer budget, how the
//! handler answers); byte 1 the chunk size (0: everything in one read); the rest is what the
//! peer sends. Small limits (3 recipients, 4 KiB messages, 5 errors) make every limit reachable
//! by short inputs.
//!
//! Properties checked after every step:
//! - no panic; every reply is well formed (2xx–5xx, printable ASCII, wire lines ≤ 512 octets);
//! - a message handed over has CRLF line endings only (no bare CR/LF: SMTP smuggling), no line
//!   longer than the DATA line limit, no NUL octet (stripped downstream it smuggles), at most the size limit, 1..=max distinct recipients;
//! - unread input stays within one line while the session is not waiting on the driver;
//! - `max_errors` permanent replies in SMTP mode close the session; a closed session says
//!   nothing more; the buffer budget is never overdrawn and is all returned at the end.
//!
//! SECURITY: this is the most exposed code in Herald (anyone can connect to port 25).

use crate::assert_crlf_only;
use bytes::BytesMut;
use herald_smtp::{Action, BufferBudget, Envelope, Limits, Mode, Session};
use herald_types::Reply;
use std::sync::Arc;

const HOSTNAME: &str = "mx.herald.test";
/// RFC 5321 §4.5.3.1.5: a reply line, CRLF included.
const MAX_REPLY_LINE_OCTETS: usize = 512;
const BUDGET_OCTETS: u64 = 8 * 1024;

fn limits() -> Limits {
    Limits {
        max_message_octets: 4096,
        max_recipients: 3,
        max_errors: 5,
        ..Limits::default()
    }
}

/// What byte 0 of the input chose.
struct Setup {
    mode: Mode,
    starttls: bool,
    budget: Option<Arc<BufferBudget>>,
    /// Refuse recipients whose local part has an odd length (exercises 550 on RCPT).
    refuse_odd: bool,
    /// The handler's verdict on a finished message: 250, 451 or 421.
    message_code: u16,
}

impl Setup {
    fn from_byte(b: u8) -> Setup {
        Setup {
            mode: if b & 1 == 0 { Mode::Smtp } else { Mode::Lmtp },
            starttls: b & 2 != 0,
            budget: (b & 4 != 0).then(|| BufferBudget::new(BUDGET_OCTETS)),
            refuse_odd: b & 8 != 0,
            message_code: match (b >> 4) & 3 {
                0 | 1 => 250,
                2 => 451,
                _ => 421,
            },
        }
    }
}

/// Tallies what the session said, to check the properties that span several steps.
#[derive(Default)]
struct Tally {
    permanent: u32,
    closed: bool,
}

/// Feeds `data` (layout in the module docs) to a fresh session.
pub fn check(data: &[u8]) {
    let (setup, chunk, stream) = match data {
        [a, b, rest @ ..] => (Setup::from_byte(*a), usize::from(*b), rest),
        _ => return,
    };
    let limits = limits();
    let mut session = Session::new(setup.mode, limits, HOSTNAME).with_starttls(setup.starttls);
    if let Some(budget) = &setup.budget {
        session = session.with_budget(budget.clone());
    }
    let mut tally = Tally::default();
    check_reply(&session.greeting());
    let mut buf = BytesMut::new();
    let step = if chunk == 0 {
        stream.len().max(1)
    } else {
        chunk
    };
    for piece in stream.chunks(step) {
        buf.extend_from_slice(piece);
        drive(&mut session, &setup, &limits, &mut buf, &mut tally);
        if tally.closed {
            assert!(session.is_closed(), "Close sent but the session is open");
            buf.extend_from_slice(b"NOOP\r\n");
            assert!(session.feed(&mut buf).is_empty(), "a closed session spoke");
            break;
        }
    }
    drop(session);
    if let Some(budget) = setup.budget {
        assert_eq!(budget.used(), 0, "buffer budget not returned");
    }
}

/// One read's worth: feed until the session needs more input, answering what it asks.
fn drive(s: &mut Session, setup: &Setup, limits: &Limits, buf: &mut BytesMut, t: &mut Tally) {
    let mut actions = s.feed(buf);
    while !actions.is_empty() {
        let mut next = Vec::new();
        for action in actions {
            assert!(!t.closed, "an action after Close");
            match action {
                Action::Reply(r) => {
                    check_reply(&r);
                    t.permanent += u32::from(r.is_permanent());
                }
                Action::CheckRecipient(addr) => {
                    let odd = addr.local().len() % 2 == 1;
                    let verdict = if setup.refuse_odd && odd {
                        Err(Reply::new(550, None, "no such list"))
                    } else {
                        Ok(())
                    };
                    next.extend(s.recipient_checked(verdict));
                }
                Action::Message(env) => {
                    check_envelope(&env, limits);
                    let verdict = Reply::new(setup.message_code, None, "verdict");
                    next.extend(s.message_done(vec![verdict; env.rcpts.len()]));
                }
                Action::StartTls => {
                    assert!(setup.starttls, "STARTTLS without a certificate");
                    buf.clear(); // what the driver read in plaintext is dropped (CVE-2011-0411)
                    s.tls_started();
                }
                Action::Close => t.closed = true,
            }
        }
        if let Some(budget) = &setup.budget {
            assert!(budget.used() <= budget.max(), "budget overdrawn");
        }
        actions = if next.is_empty() && !t.closed {
            s.feed(buf)
        } else {
            next
        };
    }
    if setup.mode == Mode::Smtp && t.permanent >= limits.max_errors {
        assert!(t.closed, "{} permanent replies and still open", t.permanent);
    }
    if !t.closed {
        // A partial DATA line may hold max_data_line_octets (stuffing dot, content, CR; see
        // `herald_smtp::data`); a partial command line is dropped before it reaches its limit.
        let line = limits
            .max_command_line_octets
            .max(limits.max_data_line_octets);
        assert!(
            buf.len() <= line,
            "{} octets of unread input buffered",
            buf.len()
        );
    }
}

fn check_reply(r: &Reply) {
    assert!((200..600).contains(&r.code), "reply code {}", r.code);
    let wire = r.to_wire();
    for line in wire.split_terminator("\r\n") {
        assert!(
            line.len() + 2 <= MAX_REPLY_LINE_OCTETS,
            "reply line of {} octets",
            line.len() + 2
        );
        assert!(
            line.bytes().all(|b| b == b' ' || b.is_ascii_graphic()),
            "control or non-ASCII byte in reply {line:?}"
        );
    }
    assert!(wire.ends_with("\r\n"), "reply not CRLF-terminated");
}

fn check_envelope(env: &Envelope, limits: &Limits) {
    assert_crlf_only(&env.body, "message body");
    assert!(
        !env.body.contains(&0),
        "message body: NUL octet handed over"
    );
    let octets = u64::try_from(env.body.len()).unwrap_or(u64::MAX);
    assert!(
        octets <= limits.max_message_octets,
        "{octets}-octet message"
    );
    for line in env.body.split_inclusive(|&b| b == b'\n') {
        assert!(
            line.len() <= limits.max_data_line_octets,
            "{}-octet DATA line",
            line.len()
        );
    }
    assert!(!env.rcpts.is_empty(), "a message without recipients");
    assert!(
        env.rcpts.len() <= limits.max_recipients,
        "too many recipients"
    );
    for (i, a) in env.rcpts.iter().enumerate() {
        assert!(
            !env.rcpts[..i].contains(a),
            "recipient {a} handed over twice"
        );
    }
}
