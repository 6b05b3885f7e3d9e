//! What a stage offers the HTTP API, in the API's terms. The API holds these narrow traits
//! instead of the stages' own handles, so `herald-api` knows the wire contract (`api-types`)
//! and this crate, never a stage crate: a stage's internal rename stays inside the stage, and
//! the API can be read (and tested) without the stages' dependency trees.
//!
//! Each stage implements its trait in its own crate; the composition root
//! (`crates/server/src/steps/serve.rs`) hands the API the stages as trait objects. Answers are
//! `api-types` views or plain values; a failure is an [`OfferError`], which the API maps to a
//! status in one place (`crates/api/src/error.rs`).

use herald_directory::DirectoryError;
use herald_telemetry::exposition::Registry;
use herald_types::Address;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// What an offered call returns: a boxed future, so the traits stay object-safe.
pub type Offered<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a stage could not do what the API asked, sorted by whose fault it is (the API's
/// status follows from the variant; the text is shown to the client as it is).
#[derive(Debug, thiserror::Error)]
pub enum OfferError {
    /// What was asked for does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// The request's own input is wrong (400).
    #[error("{0}")]
    BadRequest(String),
    /// The store failed: answered as every directory error is (503 while it is unreachable).
    #[error(transparent)]
    Store(DirectoryError),
    /// The stage cannot do it right now (503).
    #[error("{0}")]
    Unavailable(String),
    /// Anything else (500).
    #[error("{0}")]
    Internal(String),
}

/// Series a stage adds to `/metrics`, written afresh at each scrape. One trait for every
/// stage: the API keeps a list of them and asks each in turn.
pub trait Metrics: Send + Sync {
    /// Adds this stage's series to `out`. A read of a store happens off the async threads;
    /// when it fails, the series it would have given are left out (never a failed scrape).
    fn register_metrics<'a>(&'a self, out: &'a mut Registry) -> Offered<'a, ()>;
}

/// The digest stage: a list's next digest at once (`herald digest send-now`).
pub trait Digests: Send + Sync {
    /// Sends `list`'s next digest if anything was archived since the last one
    /// (`sent: false` when there was nothing new).
    fn send_now<'a>(
        &'a self,
        list: &'a Address,
    ) -> Offered<'a, Result<herald_api_types::DigestSent, OfferError>>;
}

/// This node's place in the shared fan-out: `herald node drain`.
pub trait NodeDrain: Send + Sync {
    /// Stops claiming shards, hands back the unfinished ones and answers when none is held or
    /// `wait` ran out (`remaining` 0: drained).
    fn drain(&self, wait: Duration) -> Offered<'_, herald_api_types::NodeDrained>;
}

/// TLS reporting (RFC 8460): an operator's (re-)send of one day's reports.
pub trait TlsReports: Send + Sync {
    /// Sends the reports of `day` (`YYYY-MM-DD`; `None`: yesterday, UTC) to every recipient
    /// domain that asks for them. A `day` that is not a date is [`OfferError::BadRequest`].
    fn send_day<'a>(
        &'a self,
        day: Option<&'a str>,
    ) -> Offered<'a, Result<Vec<herald_api_types::TlsReportSent>, OfferError>>;
}

/// This node's cluster membership as the API shows it (`/api/v1/status`).
pub trait ClusterView: Send + Sync {
    /// Every node as this node judges it; a store that cannot be read is [`OfferError::Store`].
    fn nodes(&self) -> Offered<'_, Result<Vec<herald_api_types::NodeView>, OfferError>>;
}

/// The chunks of a backup's tar stream; an `Err` ends it early (the client then finds no
/// manifest and refuses the copy as incomplete).
pub type BackupStream = tokio::sync::mpsc::Receiver<Result<bytes::Bytes, std::io::Error>>;

/// A consistent copy of the running server (`GET /api/v1/backup`).
pub trait Backup: Send + Sync {
    /// Takes the cut before the first byte is sent (so a failure to take it is the answer's
    /// status, [`OfferError::Unavailable`]), then streams it as a tar with its manifest last.
    fn take(&self) -> Offered<'_, Result<BackupStream, OfferError>>;
}
