//! The connector seam under the workers: what a worker needs of an SMTP client, and no more.
//!
//! A [`Connector`] opens a [`Session`] to one of a plan's targets (trying them in order, as the
//! actor planned from host health); a session sends a batch of copies pipelined, telling the
//! worker each copy's outcome the moment its reply arrives (so the worker can journal it then:
//! see `workers/mod.rs`), and says at the end what became of each copy and whether the session
//! broke. The worker keeps every policy decision it had — journaling order, the unjournaled
//! window, reports, batch accounting — above this line; below it is only talking SMTP.
//!
//! The real connector is `workers/smtp.rs` (the one file that uses the SMTP client crate); the
//! actor's tests use scripted sessions (`workers/scripted.rs`) so backoff, greylisting, probes,
//! shaping and expiry run under a paused clock with no socket.
//!
//! Why hand-written boxed futures rather than `async fn` in the traits: the worker context holds
//! the connector as `Arc<dyn Connector>` (the actor is not generic over it), and `async fn` in a
//! trait is not object-safe; one allocation per connection and per batch is noise next to a
//! pipelined SMTP exchange.

use crate::messages::{ConnectTimings, HostFailure, HostKey};
use herald_types::{DaneNote, MtaStsNote};
use herald_types::{RcptOutcome, Reply};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A future a connector or session returns (boxed: see the module docs).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Opens sessions for workers.
pub trait Connector: Send + Sync + 'static {
    /// Tries the plan's targets in order; the first that answers wins.
    fn connect<'a>(&'a self, plan: &'a super::WorkerPlan) -> BoxFuture<'a, Connect>;
}

/// What [`Connector::connect`] gives back.
pub type Connect = Result<Opened, ConnectFailure>;

/// An open session and what the worker reports about it.
pub struct Opened {
    pub session: Box<dyn Session>,
    /// The host that answered.
    pub host: HostKey,
    /// The attempts that failed before it, with their classification.
    pub failed: Vec<HostFailure>,
    pub timings: ConnectTimings,
    /// What the delivery log says about the connection.
    pub notes: SessionNotes,
}

/// The delivery log's view of a connection, the same for every copy sent over it.
#[derive(Debug, Clone, Default)]
pub struct SessionNotes {
    /// `name[addr]:port`.
    pub relay: String,
    /// `TLSv1.3/verified`, `TLSv1.3/unverified` or `none` (plaintext).
    pub tls: String,
    /// How the destination's MTA-STS policy applied.
    pub mta_sts: Option<MtaStsNote>,
    /// What DANE concluded.
    pub dane: Option<DaneNote>,
    /// What TLS reporting (RFC 8460) records for every recipient domain the session carries
    /// mail for: the policy that applied and, when TLS fell short of it, why.
    pub tls_report: Option<SessionTls>,
    /// The egress source address the connection left from (`src=` in the log).
    pub source: Option<std::net::IpAddr>,
}

/// The session's TLS as TLS reporting sees it.
#[derive(Debug, Clone)]
pub struct SessionTls {
    pub policy: herald_types::TlsPolicy,
    pub failure: Option<(herald_types::TlsResultType, String)>,
}

/// Why no planned target could be used.
#[derive(Debug)]
pub struct ConnectFailure {
    /// Every attempt with its classification.
    pub failed: Vec<HostFailure>,
    /// The reply recorded for the destination's copies (the last attempt's).
    pub reply: Reply,
    /// Some attempt failed because DANE demanded what the host did not give.
    pub dane_failed: bool,
    /// The attempt never left this machine (no egress source could be leased): how
    /// the copies are deferred. No host is charged for it.
    pub local: Option<herald_types::DeferralKind>,
}

/// One copy to send: envelope and the spliced body (CRLF, dot-stuffed, no final `.`).
#[derive(Debug, Clone, Copy)]
pub struct OutCopy<'a> {
    /// The envelope sender (VERP); empty for the null sender.
    pub return_path: &'a str,
    pub rcpt: &'a str,
    pub body: &'a [u8],
    /// DSN parameters to pass on when the server offers DSN (relayed mail only).
    pub dsn: Option<&'a herald_types::Dsn>,
}

/// What became of one copy of a batch.
#[derive(Debug, Clone, Default)]
pub struct CopyResult {
    /// `None`: no reply for it (the session broke first): not certainly delivered, retry.
    pub outcome: Option<RcptOutcome>,
    /// From its MAIL FROM to its last reply (the log's `xdelay`), when measured.
    pub xdelay: Option<Duration>,
}

/// The session broke during a batch.
#[derive(Debug, Clone)]
pub struct SessionBreak {
    /// The reply recorded for copies left without one.
    pub reply: Reply,
    /// A 421 or a dropped connection: a throttling signal for the destination's budget.
    pub throttled: bool,
    /// Where in the exchange it broke.
    pub stage: BreakStage,
    /// The host replied too slowly for the first pass (a tarpit): not a failure of the host.
    pub tarpit: bool,
}

/// Where a session broke, as far as the copies left without a reply are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakStage {
    /// The server refused a new transaction and closed (a `421` to MAIL): the copies after it
    /// were never tried.
    Mail,
    /// The connection dropped (closed or reset) inside a transaction — typically after a
    /// complete command exchange, while a body or its reply was in flight: that copy's fate is
    /// unknown, the later ones were not tried.
    Body,
    /// Anything else (a timeout, a protocol error, a drop elsewhere).
    Other,
}

/// The result of one batch: a result per copy (same order), and the break if there was one.
pub struct Sent {
    pub copies: Vec<CopyResult>,
    pub broke: Option<SessionBreak>,
}

/// Called with a copy's index and outcome as soon as its reply arrives.
pub type OnReply<'a> = dyn FnMut(usize, &RcptOutcome) + Send + 'a;

/// One open SMTP session.
pub trait Session: Send {
    /// Sends `copies` (pipelined), calling `on_reply` for a copy whose body got a reply the
    /// moment it arrives; copies refused before their body are only in the result.
    fn send<'a>(
        &'a mut self,
        copies: &'a [OutCopy<'a>],
        on_reply: &'a mut OnReply<'a>,
    ) -> BoxFuture<'a, Sent>;

    /// False once the session must not carry another batch.
    fn is_reusable(&self) -> bool;

    /// Resolves when the peer closed the idle session (or spoke unasked); pending while it is
    /// silent. The default never resolves (a session with no socket of its own).
    fn peer_closed(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }

    /// Reserves up to `want` copies of the source address's warm-up volume for today (a new
    /// address's daily cap); 0 ends the connection. Sessions without an egress source reserve
    /// all.
    fn reserve(&mut self, want: usize) -> usize {
        want
    }

    /// Gives back `n` reserved copies that were not sent.
    fn unreserve(&mut self, _n: usize) {}

    /// Ends the session politely (the caller bounds how long it may take).
    fn quit(self: Box<Self>) -> BoxFuture<'static, ()>;
}
