//! The spool's one error type.
//!
//! Callers classify errors by variant or with [`SpoolError::is_transient`], never by text.
//! Storage variants carry the path (and, for on-disk damage, the segment offset) because an
//! operator reading the log must be able to find the file; none of that detail belongs in an SMTP
//! reply, where inbound answers a transient error with a generic `451 4.3.0`.

use herald_types::PostId;
use std::path::{Path, PathBuf};

/// Everything that can go wrong in the spool.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A configuration value breaks a limit; `key` is the config key as written in TOML.
    #[error("invalid spool config `{key}`: {reason}")]
    Config { key: &'static str, reason: String },

    /// A file-system operation failed. `op` says what we were doing (`"fdatasync"`, `"rename"`).
    #[error("spool {op} failed on {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A record on disk failed its checks. Recovery does not return this for damaged segments (it
    /// quarantines them and logs this error's text); the writer reports it when a record it must
    /// copy forward during compaction no longer verifies.
    #[error("spool segment {path} is corrupt at offset {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },

    /// A segment written by a newer Herald (its format version is above this one's): the spool
    /// refuses to open rather than quarantine data it cannot read.
    #[error(
        "spool segment {path} has journal format {found}, written by a newer Herald; this one \
         reads format {supported}: upgrade Herald or restore a backup taken by this version"
    )]
    FormatTooNew {
        path: PathBuf,
        found: char,
        supported: char,
    },

    /// `complete` for a post that is not live (never accepted here, or already completed).
    #[error("post {0} is not live in the spool")]
    UnknownPost(PostId),

    /// A post body larger than one journal record may hold.
    #[error("post body of {size} bytes exceeds the spool limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },

    /// Post metadata could not be encoded (a bug: every `PostMeta` is encodable).
    #[error("cannot encode post metadata: {0}")]
    Encode(#[from] serde_json::Error),

    /// The journal cannot be written right now (a full disk, an I/O error). New posts are
    /// refused with this (inbound answers `452 4.3.1`, so the sender keeps the message); outcomes
    /// and completions are kept in memory and made durable by the repair the writer retries with
    /// backoff — no restart needed. `reason` is the first error of the outage.
    #[error("spool journal cannot be written now (retrying by itself): {reason}")]
    Unwritable { reason: String },

    /// The spool was closed (or its writer thread is gone) before the request was answered.
    #[error("spool is closed")]
    Closed,
}

impl SpoolError {
    /// True when retrying later may succeed: inbound answers these with a 4xx reply.
    /// `TooLarge`, `UnknownPost` and `Config` will fail the same way again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SpoolError::Io { .. }
                | SpoolError::Corrupt { .. }
                | SpoolError::Unwritable { .. }
                | SpoolError::Closed
        )
    }

    /// True when the spool is short of storage or cannot write: the sender should keep the
    /// message and retry (`452 4.3.1`, RFC 3463 "mail system full"), not be told of a local
    /// error in processing.
    pub fn is_storage_shortage(&self) -> bool {
        match self {
            SpoolError::Unwritable { .. } => true,
            SpoolError::Io { source, .. } => source.kind() == std::io::ErrorKind::StorageFull,
            _ => false,
        }
    }

    /// Builds a closure for `map_err` that wraps an `io::Error` with the operation and path.
    pub(crate) fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError {
        let path = path.to_path_buf();
        move |source| SpoolError::Io { op, path, source }
    }
}
