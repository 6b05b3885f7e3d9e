//! Herald's HTTP API as a typed contract (KumoMTA's `kumo-api-types` is the pattern): the
//! request and response structs of every JSON endpoint, shared by the server (`herald-api`,
//! which maps its domain structs onto these views explicitly), the `herald` CLI (which decodes
//! answers into them instead of reading JSON by string key) and the end-to-end tests.
//!
//! Place in the flow: a leaf beside `types`; it depends on `types` and serde only, never on a
//! stage crate, so a field renamed inside a stage cannot change the wire by accident — the
//! mapping in `crates/api/src/views/` stops compiling instead.
//!
//! Invariants:
//! - The JSON these structs produce is the wire as it was before they existed, key for key
//!   (the dashboard in `web/`, `docs/grafana-herald.json` and operators' scripts read it);
//!   `tests/api_contract_e2e.rs` pins it against goldens recorded from the real server.
//! - Responses are versioning-friendly: every response struct is `#[serde(default)]`, so a
//!   client decodes an answer from an older server that lacks a field, and unknown fields from
//!   a newer server are ignored (no `deny_unknown_fields` on responses). Requests the server
//!   receives keep `deny_unknown_fields` where a typo must not silently do nothing.
//! - Ids are plain integers or the hex text the operator sees, exactly as the wire has them
//!   (a list id and a held post's id are numbers, a post elsewhere is 16 hex digits).
//!
//! SECURITY: these are plain data; values in responses (addresses, reply texts, subjects) are
//! untrusted text from the network and are escaped by whoever renders them.

pub mod housekeeping;
pub mod lists;
pub mod live;
pub mod posts;
pub mod queue;
pub mod reports;

pub use housekeeping::*;
pub use lists::*;
pub use live::*;
pub use posts::*;
pub use queue::*;
pub use reports::*;

use serde::{Deserialize, Serialize};

/// The body of every error answer (`4xx`/`5xx`): one line naming the input at fault, or a
/// generic text for internal errors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    pub error: String,
}
