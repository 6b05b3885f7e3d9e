//! Backup and restore: a consistent copy of a **running** server, and bringing it
//! back on a fresh machine.
//!
//! Place in the flow: the API's `GET /api/v1/backup` calls [`take::stage`] (the cut) and streams
//! [`take::Staged::write_tar`] to the client; `herald backup <dir>` unpacks that stream with
//! [`receive::unpack`] (every file checked against the manifest); `herald restore <dir>` runs
//! [`restore::restore`] offline, before `herald serve` starts on the new machine.
//!
//! What a backup holds, and why it is consistent without stopping delivery:
//! - the spool journal at one commit (`Spool::snapshot`: the writer commits, hard-links every
//!   segment and says how many bytes of each belong to the cut), so it recovers to exactly the
//!   posts accepted and the outcomes committed at that moment — pending deliveries come back,
//!   and a copy delivered after the cut is sent again on the restored machine at most once;
//! - the SQLite stores (directory, archive, statistics) copied with `VACUUM INTO` *after* the
//!   cut: a post in the cut never names a list or member the copy lacks (a post carries its own
//!   member-id snapshot, so members added later are not its recipients);
//! - the small files (secret, dedup log, host health, MTA-STS cache) and the keys the config
//!   names (DKIM, TLS).
//!
//! The format is a tar stream with `manifest.json` last ([`manifest`]); a directory without a
//! manifest is an interrupted backup and is refused by restore.
//!
//! SECURITY: the stream carries the list secret and private keys: the route is admin-only and the
//! unpacked directory is created `0700` with files `0600`. Unpacking trusts nothing in the stream:
//! entry names are checked against the layout (no absolute paths, no `..`, no links), sizes are
//! bounded by the manifest, and every file's SHA-256 must match before restore touches a store.

pub mod error;
pub mod manifest;
mod offers;
pub mod receive;
pub mod restore;
pub mod take;

pub use error::BackupError;
pub use manifest::{FileEntry, KeyFile, Manifest};
