//! herald-import: moving in from Mailman 3, Mailman 2 and listmonk, and moving out to another
//! Herald. A library the CLI (`herald import …`, `herald export herald`) drives.
//!
//! Each source module reads what its system has into a [`Snapshot`] in Herald's words; the
//! engine is the same for all of them:
//! - [`plan::compute`] compares the snapshot with the directory as it is now: lists to create
//!   or update, members to add or update, bans, suppressions, archive files, and every item
//!   that cannot come over with the reason ([`Skip`]). Printed, it is the dry run.
//! - [`apply::apply`] writes the plan in batches, each one directory transaction, recording
//!   progress in the data directory's ledger ([`Ledger`]). A second run plans nothing; a run
//!   after a crash plans and writes only what the first did not commit.
//!
//! Where the writes go: straight into the data directory's `herald.db` and `archive.db`, the
//! way `herald archive import` does, not through the HTTP API. SQLite's WAL lets this run beside
//! a live server (one writer at a time; the server's reads see each committed batch), a million
//! members go in at directory speed instead of HTTP round trips, and the checks are the same
//! ones: every member passes the member lifecycle's bulk write (`herald_lists::Membership::
//! import`, over `Directory::import_members`), which refuses suppressed and banned addresses
//! with the check every subscribe path uses. Nothing here can send mail, so an import
//! never mails a welcome or a confirmation.
//!
//! Consent: members new to Herald get a consent record with source "import" (a Herald export
//! carries each member's own record instead); an existing record is never overwritten.

pub mod apply;
mod error;
pub mod herald;
mod ledger;
pub mod listmonk;
pub mod mailman2;
pub mod mailman3;
mod pickle;
pub mod plan;
mod source;

pub use apply::{apply, Applied, ApplyOptions, Progress, DEFAULT_BATCH_ROWS};
pub use error::ImportError;
pub use ledger::{Ledger, PendingWelcome, UnderWay};
pub use plan::{compute, ListAction, ListPlan, Plan};
pub use source::{HeldPost, Skip, SkipKind, Snapshot, SourceList, SourceMember, SourceSuppression};
