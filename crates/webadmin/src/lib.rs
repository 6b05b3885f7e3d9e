//! herald-webadmin: the web administration pages — lists and their
//! settings, members (search, paging, actions, CSV import and export), held posts, bounces,
//! stragglers, postmaster mail and the audit log — as pure functions from the API's typed
//! views (`herald-api-types`) to HTML. No I/O here: the HTTP glue in `herald-api`
//! (`admin_pages/`) reads the stores, calls the same functions the JSON routes call, and
//! answers what these functions render.
//!
//! Templates are maud's (`html!`, checked at compile time): every value spliced into a page is
//! HTML-escaped unless this crate's own markup says otherwise, so escaping member data cannot
//! be forgotten at one call site (the hand-escaping `format!` style of the older pages made
//! each call site responsible).
//!
//! The pages need no JavaScript: every action is a plain form (POST, then a redirect to a
//! page — POST-redirect-GET), carrying the session's CSRF token; a running import refreshes
//! itself with `<meta http-equiv="refresh">`. Fields have `<label>`s, errors sit next to their
//! field (`aria-describedby`, `aria-invalid`), tables have headers with `scope`.
//!
//! SECURITY: everything shown is untrusted data (member names from imports, subjects and
//! bodies of held posts from strangers, remote SMTP replies) and is escaped by maud; message
//! bodies are shown as text, never as HTML (`message`).

pub mod held;
pub mod layout;
pub mod lists;
pub mod members;
pub mod message;
pub mod reports;
pub mod settings;
pub mod texts;

pub use layout::Ctx;

/// The pages' own style sheet, served at `/assets/admin.css` (after the dashboard's).
pub const ADMIN_CSS: &str = include_str!("admin.css");
