//! Lists and members: `/api/v1/lists…` (create, show, change, delete, members, CSV import, a
//! member's bounce detail and preferences, subscription requests) and the confirmation page's
//! view of a token.
//!
//! A list's settings travel as [`herald_types::ListSettings`] itself rather than a copy here:
//! they are already a documented, serde-stable value in the vocabulary crate (with
//! `#[serde(default)]`), `PATCH /api/v1/lists/<list>` merges changes by their field names, and a
//! hand-kept duplicate of eighteen fields and four enums would be a second source of truth to
//! keep in step. [`herald_types::MemberStatus`] is reused for the same reason.

use herald_types::{DeliveryMode, ListSettings, MemberStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A list as stored: the answer to `POST /api/v1/lists` and `PATCH /api/v1/lists/<list>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ListInfo {
    /// The directory's id of the list.
    pub id: i64,
    /// The posting address, e.g. `announce@lists.example.org`.
    pub address: String,
    pub settings: ListSettings,
    pub created_at_ms: u64,
}

/// A list with its member counts: `GET /api/v1/lists` (an array) and `GET /api/v1/lists/<list>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ListView {
    /// The list's own fields, at the top level of the object (not nested).
    #[serde(flatten)]
    pub list: ListInfo,
    pub members: MemberCounts,
    /// Feedback-loop complaints that removed or disabled a member since the server started
    /// (`herald_complaints_total{list}`).
    pub complaints: u64,
    /// The values in effect of settings left unset (`null`) in `settings`.
    pub effective: EffectiveSettings,
}

/// Settings whose unset value depends on others, as they apply (`herald list show`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct EffectiveSettings {
    /// `require_aligned_from`: unset, on for `members` and `moderators` lists, off
    /// for `anyone` lists.
    pub require_aligned_from: bool,
}

/// How many members a list has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct MemberCounts {
    pub total: u64,
    pub enabled: u64,
    pub disabled: u64,
}

/// `POST /api/v1/lists`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateList {
    #[schema(format = Email)]
    pub address: String,
    /// Settings not given keep their defaults.
    #[serde(default)]
    pub settings: ListSettings,
}

/// `PATCH /api/v1/lists/<list>`: setting names and new values (`{"from_rewrite": "always"}`);
/// the others keep their values, unknown names are refused. A map of JSON values because the
/// server merges it into the current settings by name and validates the result as a whole.
pub type ListChanges = serde_json::Map<String, serde_json::Value>;

/// `GET /api/v1/lists/<list>/members?after=<id>&limit=<n>`: members in id order.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema, utoipa::IntoParams,
)]
#[into_params(parameter_in = Query)]
pub struct MembersPage {
    /// Only members with a larger id (default 0: from the start): the cursor, the last id
    /// of the page before.
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// At most this many (default 1,000, at most 10,000).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<usize>,
}

/// A member as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct MemberView {
    pub id: i64,
    pub list_id: i64,
    pub address: String,
    /// Display name as given (sanitized by fan-out before it reaches a header).
    pub display_name: Option<String>,
    /// `{"state": "enabled"}` or `{"state": "disabled", "reason": "…"}`.
    pub status: MemberStatus,
    /// Custom fields for footer templates.
    pub fields: BTreeMap<String, String>,
}

/// `POST /api/v1/lists/<list>/members`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMember {
    #[schema(format = Email)]
    pub address: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

/// What a CSV import did: the answer to `POST /api/v1/lists/<list>/import`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ImportReport {
    /// Addresses new to the list.
    pub added: u64,
    /// Rows whose address was already on the list (name and fields replaced).
    pub updated: u64,
    /// The first rejected rows (bounded by the server), in file order.
    pub rejected: Vec<RejectedRow>,
    /// Every rejected row, including those beyond `rejected`.
    pub rejected_total: u64,
}

/// One row an import refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct RejectedRow {
    /// 1-based line within the document sent (its header is line 1).
    pub line: u64,
    pub reason: String,
}

/// A stored bounce event (`GET /api/v1/bounces`, and a member's history).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct BounceEvent {
    pub id: i64,
    pub list_id: i64,
    /// Empty for list-reputation events (a policy block counted against the list).
    pub address: String,
    pub at_ms: u64,
    /// `hard`, `soft`, `expired`, `delayed`, `auto_reply`, `policy`, `informational`,
    /// `unrecognized`.
    pub kind: String,
    /// The enhanced status code, when the bounce had one.
    pub status: Option<String>,
    pub diagnostic: String,
    pub source: String,
    /// The post the bounce was about (a number on the wire), when known.
    pub post: Option<u64>,
    /// Whether it counted towards the member's score (at most one count per day).
    pub counted: bool,
    /// The member's score after this event.
    pub score: f64,
}

/// A member's current bounce score.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct BounceScore {
    pub score: f64,
    pub last_counted_ms: u64,
}

/// `GET /api/v1/lists/<list>/members/<member>/detail`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct MemberDetail {
    pub member: MemberView,
    /// `None` (JSON `null`) when the member never had a counted bounce.
    pub bounce_score: Option<BounceScore>,
    /// The latest bounce events, newest first (at most 50).
    pub bounces: Vec<BounceEvent>,
    /// How the subscription was consented to; `None` (JSON `null`) when not recorded (a
    /// member from before consent was recorded).
    pub consent: Option<ConsentView>,
    /// `regular`, `digest-mime`, `digest-plain` or `nomail`.
    pub delivery: DeliveryMode,
    /// The member's posts are held for a moderator, whatever the list's posting policy
    /// (Mailman's per-member moderation flag).
    pub moderated: bool,
    /// The member's language for Herald's mail and pages; `None` (JSON `null`): the list's.
    pub language: Option<String>,
}

/// `POST /api/v1/lists/<list>/digest/send-now`: the digest sent, if anything was archived since
/// the last one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct DigestSent {
    /// False when there was nothing new (no digest is sent then).
    pub sent: bool,
    pub volume: u32,
    pub issue: u32,
    pub posts: u64,
    /// The formats sent: `mime`, `plain` (those with members).
    pub formats: Vec<String>,
}

/// `POST /api/v1/lists/<list>/welcome`: welcome the enabled members with `after_member_id < id <=
/// up_to_member_id` (an import's `--send-welcome`), one page at a time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WelcomeRequest {
    pub after_member_id: i64,
    pub up_to_member_id: i64,
    /// Members per page (at most 500; the default).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// The answer to a [`WelcomeRequest`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct WelcomeSent {
    pub sent: u64,
    /// Members on a suppression list: not mailed.
    pub skipped: u64,
    /// Where the next page starts (`after_member_id` of the next request).
    pub last_member_id: i64,
    /// No member left in the range.
    pub done: bool,
}

/// `POST /api/v1/tls-report/send?day=YYYY-MM-DD`: what became of each recipient domain's TLS report
/// (RFC 8460) for that day.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct TlsReportSent {
    pub day: String,
    pub domain: String,
    pub report_id: String,
    /// `sent`, `no-record` (the domain publishes no `_smtp._tls` record) or `failed`.
    pub state: String,
    /// Where it went, or why not.
    pub detail: String,
    /// Sessions with TLS as the policy required, and sessions that failed it.
    pub successful: u64,
    pub failed: u64,
}

/// `PATCH /api/v1/lists/<list>/members/<member>`: what to change (fields left out stay). The
/// answer is the member's [`MemberDetail`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberUpdate {
    /// The member's delivery mode (`regular`, `digest-mime`, `digest-plain`, `nomail`).
    #[serde(default)]
    pub delivery: Option<DeliveryMode>,
    /// Hold (true) or stop holding (false) the member's posts for a moderator.
    #[serde(default)]
    pub moderated: Option<bool>,
    /// The member's language (a shipped code such as `en` or `de`); `""` clears it, so the
    /// list's language is used.
    #[serde(default)]
    #[schema(max_length = 16)]
    pub language: Option<String>,
}

/// A member's recorded consent (GDPR article 7).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ConsentView {
    /// When it was given (Unix milliseconds).
    pub at_ms: u64,
    /// `web` (the confirmation link, in a browser), `mail` (a `confirm` mail command),
    /// `import` (a CSV import) or `admin` (added through the API or CLI).
    pub source: String,
    /// The confirming client: the browser's IP address, or the mail command's sender; `None`
    /// for an import or an administrator.
    pub client: Option<String>,
}

/// `POST /api/v1/lists/<list>/members/<member>/prefs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Prefs {
    /// Mailman's "not me too": skip the member's copy when they were addressed directly.
    pub skip_if_addressed: bool,
}

/// `POST /api/v1/lists/<list>/subscribe` and `…/unsubscribe`: sends a double opt-in mail.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeRequest {
    #[schema(format = Email)]
    pub address: String,
}

/// The answer to a subscription request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct SubscribeAnswer {
    /// What happened, in words (e.g. a confirmation was sent).
    pub status: String,
}

/// What a confirmation token stands for, for the confirmation page.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ConfirmView {
    /// `subscribe` or `unsubscribe`.
    pub action: String,
    pub list: String,
    pub address: String,
    /// Why the link does nothing any more, when it does not: links are spent on use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spent: Option<LinkSpent>,
}

/// Why a confirmation link does nothing any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LinkSpent {
    /// It was used before (a link works once).
    Used,
    /// The address left the list after the link was sent; it must not undo that.
    Superseded,
}
