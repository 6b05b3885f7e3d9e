//! The list archive over IMAP, read-only: each list's archive is a mailbox
//! named by the list address. Both `IMAP4rev1` (RFC 3501) and `IMAP4rev2` (RFC 9051) are
//! advertised: a session is rev1 until the client sends `ENABLE IMAP4rev2`, and from then on
//! follows rev2's rules (SEARCH answered with ESEARCH, no RECENT, `[CLOSED]` and a LIST
//! response at SELECT). With it: ESEARCH, SEARCHRES, ENABLE, UNSELECT, NAMESPACE, LITERAL-,
//! BINARY, STATUS=SIZE, LIST-EXTENDED, LIST-STATUS, SPECIAL-USE (no mailbox has one), SASL-IR,
//! IDLE. What imap-codec cannot parse of these is read by [`rev2`] first.
//!
//! Place in the flow: a stage of its own beside the HTTP API, reading what the archive writer
//! (`herald_archive::stage`) stored. Its loop is [`listener::serve`] (one task per session,
//! [`session::Session::run`]); the server starts it when `[imap]` has a listener.
//!
//! - [`config`]: the `[imap]` section.
//! - [`access`]: who may read which list (anonymous, member, administrator) by archive privacy.
//! - [`session`]: the protocol (imap-codec frames, decodes and encodes; this crate dispatches).
//! - [`rev2`]: what imap-codec lacks for rev2 — SEARCH `RETURN (…)` options, `$` (the saved
//!   result), the `* ESEARCH` line, LIST's selection and return options — read before the
//!   codec sees a command.
//! - [`mailbox`]: the selected mailbox — UIDs (the archive's row ids), sequence numbers,
//!   the session's `\Seen`.
//! - [`envelope`]: header fields and ENVELOPE of an archived message (a leaf).
//! - [`fetch`], [`search`]: FETCH items and SEARCH keys over the archive.
//! - [`structure`]: BODYSTRUCTURE / BODY from the MIME tree.
//! - [`listener`]: accept loop, session slots, implicit TLS / STARTTLS.
//!
//! New posts: the archive writer bumps a watch counter after each batch it stored
//! (`ArchiveSender::committed`); sessions in IDLE wake on it and announce `EXISTS`. Removals
//! (tombstones) are found at the next NOOP or IDLE re-check and announced as `EXPUNGE`.
//!
//! SECURITY: a network-facing server. Trusts nothing a client sends: the grammar is
//! imap-codec's, every command is bounded (`max_command_bytes`), sessions are bounded per
//! server and per client, idle ones time out, and what a user may read is decided by the
//! archive's privacy and the directory at each SELECT/LIST/STATUS.

pub mod access;
pub mod config;
pub mod envelope;
pub mod fetch;
pub mod listener;
pub mod mailbox;
pub mod rev2;
pub mod search;
pub mod session;
pub mod structure;

pub use config::ImapSection;

#[cfg(test)]
mod tests;
