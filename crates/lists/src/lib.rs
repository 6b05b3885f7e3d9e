//! herald-lists: the list-management runners (Mailman's), downstream of the enqueue path —
//! request mail (subscribe / unsubscribe / help / confirm), double opt-in confirmations,
//! moderation of held posts (notices, approve, reject, expiry), mail to postmaster (forward or
//! keep, expiry), and the notice to members bounce handling disabled.
//!
//! Place in the flow: `enqueue ─► (Request | Held | Postmaster) ─► lists stage ─► generated
//! mail ─► enqueue`; `bounce stage ─► DisabledMember ─► lists stage`. The HTTP API calls
//! [`Lists::approve`], [`Lists::reject`], [`Lists::request`] and [`Lists::confirm`] and maps
//! [`ListsError`] at its own boundary: this crate never speaks HTTP.
//!
//! Members change only through [`Membership`] (`membership`): the API's pages, bounce
//! handling, complaints and imports call it, and so does this stage's confirmation path.
//!
//! Modules: `membership` (the member lifecycle), `stage` (the loop, the sweep), `subscription`,
//! `moderation`, `postmaster`, `requests` (parsing request mail), `notices` (what each
//! generated mail says), `mail` (building it with mail-builder), `config` (`[lists]`), `error`.
//!
//! SECURITY: request mail, held posts and postmaster mail are hostile input; tokens are checked
//! in constant time (`herald_types::token`); see each module for what reaches generated mail.

mod config;
mod error;
#[cfg(test)]
mod golden;
mod limits;
mod mail;
mod membership;
mod moderation;
mod notices;
mod postmaster;
mod requests;
mod stage;
mod subscription;

pub use config::{ListsConfig, PostmasterSection, MAX_POSTMASTER_FORWARD};
pub use error::ListsError;
pub use membership::{
    Change, ChangeError, ConfirmError, Confirmed, DisableError, Door, EnableError, EraseError,
    ImportError, Membership, SubscribeError, UnsubscribeError,
};
pub use postmaster::{unhandled as unhandled_postmaster_mail, Postmaster, HANDLED};
pub use requests::{Command, Request, MAX_LINE_CHARS};
pub use stage::{run_disabled_notices, start, Lists, DISABLED_QUEUE_CAPACITY};
pub use subscription::{WelcomeBatch, MAX_WELCOME_PAGE};
