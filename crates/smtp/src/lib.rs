//! Herald's inbound SMTP (RFC 5321) and LMTP (RFC 2033) protocol, with no I/O.
//!
//! Place in the flow: `inbound` owns the sockets and feeds the bytes it reads to a [`Session`];
//! the session answers with [`Action`]s (replies to write, a recipient to look up, a finished
//! message to spool, a connection to close). Everything here is a pure state machine, so every
//! protocol path is tested by feeding byte strings (see `tests/`).
//!
//! - [`command`]: the command-line parser (strict RFC 5321 §4.1 syntax).
//! - [`data`]: the DATA body reader (dot-unstuffing, smuggling defence, size and line limits).
//! - [`session`]: the state machine tying them together.
//! - [`replies`]: every reply the server side sends, as named constants.
//! - [`limits`]: the bounds on lines, messages, recipients, errors and time.
//! - [`budget`]: the global bound on message octets buffered by all sessions together.
//!
//! Invariants: a session never buffers more than one command line or one DATA line of unread
//! input, plus the message body up to [`Limits::max_message_octets`]; a message with a bare CR or
//! LF is never handed over and never split (only `<CRLF>.<CRLF>` ends DATA).
//!
//! SECURITY: every byte fed to a [`Session`] comes from an untrusted peer. Parsing never panics,
//! refuses control characters, invalid UTF-8 and non-ASCII outside MAIL/RCPT paths, validates every address through
//! [`herald_types::Address`], and bounds every buffer by a [`Limits`] field.

pub mod budget;
pub mod command;
pub mod data;
pub mod limits;
pub mod replies;
pub mod session;

pub use budget::{BufferBudget, Reservation};
pub use command::{BodyType, Command, ForwardPath, HeloVerb, MailParams, ParseError, RcptParams};
pub use limits::{Limits, LimitsError};
pub use replies::Canned;
pub use session::{Action, Envelope, Helo, Mode, Session};
