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
//!   `tests/it/api_contract.rs` pins it against goldens recorded from the real server.
//! - Responses are versioning-friendly: every response struct is `#[serde(default)]`, so a
//!   client decodes an answer from an older server that lacks a field, and unknown fields from
//!   a newer server are ignored (no `deny_unknown_fields` on responses). Requests the server
//!   receives keep `deny_unknown_fields` where a typo must not silently do nothing.
//! - Ids are plain integers or the hex text the operator sees, exactly as the wire has them
//!   (a list id and a held post's id are numbers, a post elsewhere is 16 hex digits).
//!
//! SECURITY: these are plain data; values in responses (addresses, reply texts, subjects) are
//! untrusted text from the network and are escaped by whoever renders them.

pub mod accounts;
pub mod bans;
pub mod housekeeping;
pub mod lists;
pub mod live;
pub mod people;
pub mod posts;
pub mod queue;
pub mod reports;
pub mod texts;

pub use bans::*;
pub use housekeeping::*;
pub use lists::*;
pub use live::*;
pub use posts::*;
pub use queue::*;
pub use reports::*;
pub use texts::*;

use serde::{Deserialize, Serialize};

/// The body of every error answer (`4xx`/`5xx`), as `application/problem+json` (RFC 9457
/// problem details): `detail` is one line naming the input at fault (a generic text for
/// internal errors), and `field` names the request field, path segment or query parameter at
/// fault when there is one, so a form can show the message next to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Problem {
    /// Always `about:blank`: the status code says what kind of problem it is.
    #[serde(rename = "type")]
    pub kind: String,
    /// The status code's reason phrase (`Bad Request`).
    pub title: String,
    pub status: u16,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// The media type of [`Problem`] bodies.
pub const PROBLEM_JSON: &str = "application/problem+json";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_from_an_older_or_newer_server_still_decodes() {
        // Older: fields missing take their defaults. Newer: unknown fields are ignored.
        let old: PostSummary = serde_json::from_str(r#"{"post":"00000000000000AB","delivered":3}"#)
            .expect("older answer");
        assert_eq!(
            (old.post.as_str(), old.delivered, old.recipients),
            ("00000000000000AB", 3, None)
        );
        let new: Totals =
            serde_json::from_str(r#"{"delivered":1,"deferred":2,"failed":3,"held":9}"#)
                .expect("newer answer");
        assert_eq!(
            new,
            Totals {
                delivered: 1,
                deferred: 2,
                failed: 3
            }
        );
    }

    #[test]
    fn a_list_view_keeps_the_list_fields_at_the_top_level() {
        let view = ListView {
            list: ListInfo {
                id: 7,
                address: "dev@lists.test".into(),
                ..ListInfo::default()
            },
            members: MemberCounts {
                total: 2,
                enabled: 1,
                disabled: 1,
            },
            complaints: 0,
            effective: EffectiveSettings {
                require_aligned_from: true,
            },
        };
        let json = serde_json::to_value(&view).expect("serialize");
        assert_eq!(json["id"], 7);
        assert_eq!(json["address"], "dev@lists.test");
        assert_eq!(json["members"]["total"], 2);
        assert!(json.get("list").is_none(), "flattened: {json}");
        let back: ListView = serde_json::from_value(json).expect("round trip");
        assert_eq!(back, view);
    }

    #[test]
    fn requests_refuse_unknown_fields() {
        let typo = serde_json::from_str::<StragglerTarget>(r#"{"recipent":"a@b.test"}"#);
        assert!(typo.is_err(), "a typo must not silently match nothing");
    }
}
