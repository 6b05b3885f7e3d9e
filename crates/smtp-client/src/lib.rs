//! herald-smtp-client: a library (not a stage) for one outbound SMTP session. The scheduler's
//! delivery workers drive it; what they ask of it (which host, which TLS policy, which TLSA
//! records) was decided by `herald-routing`.
//!
//! ```text
//! worker ──(addr, MX name, TlsPolicy | TlsaSet)──► Connection::connect ─► send ─► … ─► quit
//!                                                                 │
//!                                outcomes (RcptOutcome per copy) ◄┘
//! ```
//!
//! What it owns:
//! * [`Connection`] (module [`connection`]): connect, greeting, EHLO/HELO ([`command`]),
//!   STARTTLS ([`starttls`], private), then any number of transactions sent by
//!   [`Connection::send`] with PIPELINING ([`transaction`]), so that a copy on an open connection
//!   costs one round trip plus its body.
//! * [`reply_reader`]: the bounded reply reader; [`extensions`]: what EHLO offered.
//! * [`tls`]: the rustls client configuration, built once per [`ClientConfig`] ([`TlsCache`]),
//!   and [`dane_verify`]: the DANE certificate check inside the handshake. The verifier lives
//!   here, beside the handshake it runs in, while [`herald_routing::TlsaSet`] (what DNS says a
//!   host must match) lives in routing: so this crate depends on routing and never the reverse.
//! * [`config`]: the `[delivery]` settings ([`ClientConfig`]); [`error`]: the session's typed
//!   errors.
//!
//! Invariants:
//! * No call can hold a worker longer than its configured timeout: every reply has a deadline for
//!   the whole reply, every write a deadline, and reply size is bounded ([`limits`]).
//! * Outcomes are data: each copy ends `Delivered`, `Deferred` or `Failed` with the server's reply,
//!   or with `outcome: None` when its fate is not certainly known (the scheduler retries it).
//! * Errors are typed with classifiers ([`SessionError::is_host_problem`],
//!   [`SessionError::synthetic_reply`]); nothing matches strings.
//!
//! SECURITY: everything read from SMTP servers is hostile input (DANE trusts only TLSA records
//! the configured validating resolver marked authentic, see `herald_routing::dane`).
//! Reply lines are bounded in length and count, control characters are replaced before
//! replies reach logs, no plaintext read-ahead is carried across STARTTLS, addresses are checked
//! for CR/LF before they are written into command lines, and a policy that demands verified TLS
//! ends the session before MAIL when the certificate does not verify.

pub mod command;
pub mod config;
pub mod connection;
pub mod dane_verify;
pub mod error;
pub mod extensions;
pub mod limits;
pub mod reply_reader;
mod starttls;
mod stream;
pub mod tls;
pub mod transaction;

pub use config::ClientConfig;
pub use connection::{Connection, ConnectionTimings, OutgoingCopy};
pub use dane_verify::{spki_of, DaneError, DaneMatch, DaneVerifier};
pub use error::{ConfigError, ProtocolError, SessionError, SessionErrorKind, Stage, TlsError};
pub use extensions::Extensions;
pub use tls::{TlsCache, TlsInfo};
