//! The list archive: every list post that was fanned out, kept once, as received,
//! in one SQLite database (`archive.db` in the data directory) — never a file per message
//! (seeds/002: millions of small files are the slow path of a mail system).
//!
//! Place in the flow: with the archive on, it is the tap of the one fan-out consumer
//! (`herald_stage::fan_out`): each list post enqueue hands over goes to fan-out first and
//! then to the writer (its own thread, a bounded channel, group commit), so archiving never
//! waits inside fan-out. The CLI
//! (`herald archive …`) opens the same store.
//!
//! - [`store`]: the database — compressed bodies (deflate), an overview index by list, month,
//!   date, Message-ID and thread, an FTS5 full-text index, tombstones, per-list privacy.
//! - [`parse`]: what the index needs from a message (mail-parser), with the limits.
//! - [`mbox`]: mboxo/mboxrd reading (bounded) and mboxrd writing.
//! - [`import`]: mbox files, pipermail `.txt`/`.txt.gz`, Maildir folders → the store, with a
//!   report of refused messages.
//! - [`stage`]: the archive writer of the running server.
//! - [`web`]: the public archive's HTML pages (mounted on the API's router).
//! - [`uids`]: the reads the IMAP server (`herald-imap`) needs: a list's row ids as UIDs,
//!   UIDVALIDITY, messages by id, search scans.
//!
//! SECURITY: every message stored here came from the network (or an operator's file); it is
//! parsed only by mail-parser, bounded by [`parse::Limits`], and never executed or rendered here.

pub mod config;
pub mod import;
pub mod mbox;
pub mod metrics;
pub mod parse;
pub mod stage;
mod start;
pub mod store;
pub mod uids;
pub mod web;

pub use config::ArchiveSection;
pub use start::{archived_at, start, web};
pub use store::{
    Archive, Filters, MessageSummary, Month, Privacy, Scope, SearchOrder, SearchPage, StoredMessage,
};

use std::path::PathBuf;

/// Errors of the archive boundary.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("archive query: {0}")]
    Query(#[from] rusqlite::Error),
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unknown archive privacy {0:?} (public, members, private or none)")]
    BadPrivacy(String),
    #[error("stored message {0} is corrupt (cannot inflate)")]
    Corrupt(i64),
    /// Opening failed, or the file is from a newer Herald (the message says what to do).
    #[error(transparent)]
    Open(#[from] herald_store::OpenError),
}
