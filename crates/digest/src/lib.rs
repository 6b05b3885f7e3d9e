//! herald-digest: list digests, built from the archive for the members whose
//! delivery mode is `digest-mime` or `digest-plain`.
//!
//! Place in the flow: after the archive (it reads `archive.db`) and before the API (which calls
//! [`Digests::send_now`]). A digest leaves through the one enqueue path as
//! `Submission::Digest`, a list post whose audience is one digest mode; the scheduler's
//! expansion sends it to those members only, personalized like any copy, and the archive does
//! not store it. Members on `regular` get single posts and never a digest; `nomail` members
//! get neither.
//!
//! Modules: `build` (the MIME and RFC 1153 bytes, pure), `state` (the two-phase ledger that keeps
//! a digest from being sent twice, also across `kill -9`), `stage` (the timer, `send_now`,
//! crash recovery).
//!
//! SECURITY: see each module; archived posts are hostile input to `build`.

pub mod build;
mod offers;
pub mod stage;
mod start;
pub mod state;

pub use stage::{DigestConfig, Digests, SentDigest};
pub use start::{start, DigestPaths};

/// Why a digest operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    #[error("no such list: {0}")]
    NoSuchList(String),
    #[error("archive: {0}")]
    Archive(#[from] herald_archive::ArchiveError),
    #[error(transparent)]
    Ledger(#[from] state::LedgerError),
    #[error("directory: {0}")]
    Directory(#[from] herald_directory::DirectoryError),
    #[error("enqueue: {0}")]
    Enqueue(#[from] herald_enqueue::EnqueueError),
    #[error("a digest lock was poisoned by a panic")]
    Poisoned,
    #[error("a digest task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl DigestError {
    /// The list named does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, DigestError::NoSuchList(_))
    }
}
