//! Herald's SMTP and LMTP listeners: they own the sockets, drive one [`herald_smtp::Session`]
//! per connection, and hand every accepted message to an [`InboundHandler`] that the server
//! implements (recipient lookup in the directory, durable `spool.accept`).
//!
//! Place in the flow: the first stage. `SMTP / LMTP in ─► inbound ─► handler (spool.accept)`.
//! This crate depends on `types` and `smtp` only; the server wires the handler to the directory
//! and the spool, so inbound never imports a sibling stage.
//!
//! Invariants:
//! - **Durable before 250**: the reply to the end of DATA is written only after
//!   [`InboundHandler::accept_message`] returns, and it is the handler's verdict.
//! - **Never an open relay**: every RCPT goes through [`InboundHandler::check_recipient`].
//! - **Bounded**: at most `max_sessions` sessions per listener (a slot on the listener's board,
//!   `board.rs`, is taken before a session starts; when none is free and no idle session can
//!   be shed, the next connection gets `421 4.3.2`), at most `max_sessions_per_client` from one
//!   address and `max_sessions_per_network` from one /24 or /48 (SMTP and submissions;
//!   `421 4.7.0`); per session one read chunk plus the [`herald_smtp::Limits`] buffers, and message bodies of all sessions together within
//!   `max_buffered_octets` (`452 4.3.1`). A whole command line, and a whole DATA phase, have
//!   deadlines as well as the idle timeout per read (`421 4.4.2`), so trickling bytes does not
//!   hold a session.
//! - **Service under a flood** (SMTP only): past `stress_threshold_percent` of the
//!   slots, idle sessions with no MAIL yet get `stress_command_timeout_secs`; with every slot
//!   taken, the one idle longest is shed (`421 4.7.0`) so a newcomer gets its slot. Sessions
//!   in a transaction are never shed. See `board.rs`.
//! - **LMTP has its own slots**: every listener has its own board, so SMTP clients can never
//!   take an LMTP slot, and LMTP is neither stressed, shed nor limited per client (the MTA in
//!   front is one trusted address). What listeners share is [`InboundShared`]: the buffer
//!   budget and the per-client and per-network counts (which LMTP does not use).
//! - **Graceful drain**: on shutdown no new connection is accepted; idle sessions get
//!   `421 4.3.2` at once, sessions in a transaction may finish it within the grace period.
//!
//! TLS ([`tls`]): STARTTLS on SMTP when a certificate is configured (RFC 3207), and implicit-TLS
//! listeners for submission (RFC 8314); see [`serve_with_tls`].
//!
//! SECURITY: peers are untrusted; all protocol decisions are made by the no-I/O `smtp` session,
//! and this crate adds only time and concurrency bounds. The `Received:` header it prepends is
//! built from validated parts only (see [`received`]).

mod answers;
mod board;
pub mod config;
mod connection;
mod listener;
pub mod received;
mod shared;
pub mod tls;

use herald_smtp::Envelope;
use herald_types::{Address, Reply};
use std::future::Future;
use std::net::SocketAddr;

pub use config::{InboundConfig, SmtpInConfig};
pub use herald_smtp::{Limits, Mode};
pub use listener::{serve, serve_shared, serve_with_tls};
pub use shared::InboundShared;
pub use tls::{load_server_config, InboundTls, ServedCert, TlsSection, TlsSetupError};

/// A message ready to be stored: its envelope, with the `Received:` header already prepended to
/// `envelope.body`, where and when it arrived, and the handler's own answer for each recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundMessage<R> {
    pub envelope: Envelope,
    pub peer: SocketAddr,
    /// The arrival time written in the `Received:` header (for `PostMeta::received_at_ms`).
    pub received_at_ms: u64,
    /// What [`InboundHandler::check_recipient`] answered at RCPT, one per `envelope.rcpts`
    /// entry, in order: the handler does not look a recipient up twice. `Err` only when the
    /// answer was not kept and a second check at DATA refused the recipient.
    pub recipients: Vec<Result<R, Reply>>,
}

/// What the server plugs into the listeners. Both methods may await I/O (directory lookups,
/// fsync); the session waits for them, so they should be bounded by the implementation.
pub trait InboundHandler: Send + Sync + 'static {
    /// What the handler learns about an accepted recipient at RCPT (for Herald: which list, in
    /// which role), kept by the session and handed back with the message.
    type Recipient: Send + 'static;

    /// `Ok` for a list address or its `-bounces` / `-request` forms; otherwise the refusal,
    /// normally [`herald_smtp::replies::NO_SUCH_RECIPIENT`] (`550 5.1.1`), or
    /// [`herald_smtp::replies::LOCAL_ERROR`] (`451 4.3.0`) when the directory is unavailable.
    /// `sender` is the transaction's reverse path (`None` for `<>`), for sender bans.
    fn check_recipient(
        &self,
        rcpt: &Address,
        sender: Option<&Address>,
    ) -> impl Future<Output = Result<Self::Recipient, Reply>> + Send;

    /// Stores the message durably and returns one reply per `envelope.rcpts` entry, in order:
    /// a 2xx only once the message is on disk. LMTP sends them per recipient; SMTP sends one
    /// (see [`herald_smtp::Session::message_done`] for how they are combined).
    fn accept_message(
        &self,
        message: InboundMessage<Self::Recipient>,
    ) -> impl Future<Output = Vec<Reply>> + Send;

    /// A peer was refused or cut off by one of the listener's bounds (for metrics; the
    /// listener has already replied). Must not block: it runs on the session's task. Default:
    /// nothing.
    fn refused(&self, _refusal: Refusal, _peer: SocketAddr) {}

    /// A listener entered (`true`) or left (`false`) stress mode (for the `/metrics` gauge;
    /// the listener logs it). Must not block: it runs on the accept loop. Default: nothing.
    fn stress_changed(&self, _mode: Mode, _stressed: bool) {}
}

/// Which bound refused a peer; the label of the `/metrics` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_sessions_per_client` reached at connect (`421 4.7.0`).
    TooManyFromClient,
    /// No command line within `command_timeout_secs` of our last reply (`421 4.4.2`).
    CommandTimeout,
    /// DATA idle longer than `data_timeout_secs`, or longer in all than `data_deadline_secs`
    /// (`421 4.4.2`); the message is dropped, never stored.
    DataTimeout,
    /// The global `max_buffered_octets` budget was spent (`452 4.3.1`).
    BufferBudget,
    /// `max_sessions_per_network` reached at connect (`421 4.7.0`).
    TooManyFromNetwork,
    /// Idle with no MAIL yet when every slot was taken: shed for a newcomer (`421 4.7.0`).
    Shed,
    /// In stress mode, no command line within `stress_command_timeout_secs` (`421 4.4.2`).
    StressTimeout,
}

impl Refusal {
    pub const ALL: [Refusal; 7] = [
        Refusal::TooManyFromClient,
        Refusal::CommandTimeout,
        Refusal::DataTimeout,
        Refusal::BufferBudget,
        Refusal::TooManyFromNetwork,
        Refusal::Shed,
        Refusal::StressTimeout,
    ];

    /// Position in [`Refusal::ALL`], for counter arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Stable label text.
    pub fn word(self) -> &'static str {
        match self {
            Refusal::TooManyFromClient => "per_client_limit",
            Refusal::CommandTimeout => "command_timeout",
            Refusal::DataTimeout => "data_timeout",
            Refusal::BufferBudget => "buffer_budget",
            Refusal::TooManyFromNetwork => "per_network_limit",
            Refusal::Shed => "shed",
            Refusal::StressTimeout => "stress_timeout",
        }
    }
}

/// Why a listener could not start or had to stop. Per-connection problems are logged, never
/// returned: one bad peer does not stop the listener.
#[derive(Debug, thiserror::Error)]
pub enum InboundError {
    #[error("hostname {0:?} is not a valid domain name")]
    InvalidHostname(String),
    #[error("invalid limits: {0}")]
    Limits(#[from] herald_smtp::LimitsError),
    #[error("max_sessions must be greater than zero")]
    NoSessions,
    #[error("max_buffered_octets must be at least limits.max_message_octets (and above zero)")]
    BufferBudgetTooSmall,
    /// A setting out of range; `key` is its name in the listener's section.
    #[error("{key}: {rule}")]
    Invalid {
        key: &'static str,
        rule: &'static str,
    },
    #[error("implicit TLS is for SMTP submission, not LMTP")]
    TlsInLmtp,
    #[error("accepting connections keeps failing: {0}")]
    Accept(#[source] std::io::Error),
}
