//! herald-delivery: the last stage of the pipeline, where copies leave Herald for the Internet.
//!
//! ```text
//! scheduler ──(destination, copies)──► MxResolver::resolve ─► Connection::connect ─► send ─► quit
//!                                                                          │
//!                                         outcomes (RcptOutcome per copy) ◄┘
//! ```
//!
//! Two pieces, both driven by the scheduler's workers:
//!
//! * [`MxResolver`] (module [`resolve`]) turns a recipient domain into an ordered list of MX hosts
//!   with their addresses (hickory-resolver, with its cache), classifying failures as permanent
//!   (null MX, no such domain, no address) or transient (timeouts, SERVFAIL).
//! * [`Connection`] (module [`connection`]) is one outbound SMTP session: connect, greeting,
//!   EHLO, STARTTLS, then any number of transactions sent by [`Connection::send`] with PIPELINING,
//!   so that a copy on an open connection costs one round trip plus its body.
//! * [`MtaSts`] (module [`mta_sts`]) discovers and caches recipient domains' MTA-STS policies
//!   (RFC 8461); [`mta_sts::apply`] turns one into the hosts to use and the TLS they must offer.
//! * [`Dane`] (module [`dane`], opt-in) looks up DNSSEC-signed TLSA records of MX hosts
//!   (RFC 7672); [`dane::apply`] marks the hosts whose TLS those records must authenticate, and
//!   [`Connection::connect_dane`] checks them in the handshake.
//!
//! Invariants:
//! * No call can hold a worker longer than its configured timeout: every reply has a deadline for
//!   the whole reply, every write a deadline, and reply size is bounded ([`reply_reader`]).
//! * Outcomes are data: each copy ends `Delivered`, `Deferred` or `Failed` with the server's reply,
//!   or with `outcome: None` when its fate is not certainly known (the scheduler retries it).
//! * Errors are typed with classifiers ([`SessionError::is_host_problem`],
//!   [`SessionError::synthetic_reply`], [`ResolveError::is_permanent`]); nothing matches strings.
//!
//! SECURITY: everything read from DNS, from SMTP servers and from MTA-STS policy hosts is hostile
//! input (DANE trusts only answers the configured validating resolver marked authentic).
//! Reply lines are bounded in length and count, control characters are replaced before
//! replies reach logs, no plaintext read-ahead is carried across STARTTLS, addresses are checked
//! for CR/LF before they are written into command lines, and policy responses are bounded and
//! parsed strictly (see [`mta_sts`]).

pub mod config;
pub mod connection;
pub mod dane;
pub mod error;
pub mod extensions;
pub mod mta_sts;
pub mod reply_reader;
pub mod resolve;
mod starttls;
mod stream;
pub mod tls;
pub mod transaction;

pub use config::{ClientConfig, MtaStsConfig, ResolverConfig, TlsMode, TlsPolicy, TlsPolicyRule};
pub use connection::{Connection, ConnectionTimings, OutgoingCopy};
pub use dane::{Dane, DaneConfig, DaneRoute, HostDane, MxSecurity, TlsaSet};
pub use error::{DeliveryError, ProtocolError, SessionError, SessionErrorKind, Stage, TlsError};
pub use extensions::Extensions;
pub use mta_sts::{MtaSts, StsLookup, StsRoute};
pub use resolve::{MxHost, MxResolver, ResolveError};
pub use tls::{TlsCache, TlsInfo};
