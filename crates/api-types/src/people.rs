//! `GET /api/v1/people/<address>` and `DELETE /api/v1/people/<address>` (GDPR
//! articles 15 and 17): all personal data Herald holds about an address, and its erasure.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Everything held about one address.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PersonExport {
    pub address: String,
    pub memberships: Vec<PersonMembership>,
    pub bounce_events: Vec<PersonBounce>,
    pub bounce_scores: Vec<PersonScore>,
    pub suppressions: Vec<PersonSuppression>,
    /// Bans naming exactly this address (`list` empty: every list).
    pub bans: Vec<PersonSuppression>,
    /// Posts of theirs in the list archive.
    pub archived_posts: Vec<PersonPost>,
    /// Recent delivery-log lines about the address (newest last; the log's tail only).
    pub delivery_log: Vec<String>,
    /// When the address was erased (Unix ms), if it was: then nothing else is held.
    pub erased_at_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PersonMembership {
    pub list: String,
    pub member_id: i64,
    pub display_name: Option<String>,
    pub fields: BTreeMap<String, String>,
    /// `None`: enabled.
    pub disabled_reason: Option<String>,
    pub delivery: String,
    pub skip_if_addressed: bool,
    /// When, how (`web`, `mail`, `import`, `admin`) and from where consent was given.
    pub consent_at_ms: Option<u64>,
    pub consent_source: Option<String>,
    pub consent_client: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PersonBounce {
    pub list: String,
    pub at_ms: u64,
    pub kind: String,
    pub status: Option<String>,
    pub diagnostic: String,
    pub source: String,
    pub score: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PersonScore {
    pub list: String,
    pub score: f64,
    pub last_counted_ms: u64,
}

/// A suppression entry or a ban (`reason`/`source` empty for a ban).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PersonSuppression {
    /// The list's address; empty: every list.
    pub list: String,
    pub reason: String,
    pub source: String,
    pub at_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PersonPost {
    pub list: String,
    pub message_id: String,
    pub date_ms: i64,
    pub subject: String,
}

/// What an erasure removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PersonErased {
    pub memberships: u64,
    pub bounce_events: u64,
    pub bounce_scores: u64,
    pub suppressions: u64,
    pub bans: u64,
    /// Their posts removed from the archive (each leaves a tombstone with its Message-ID only).
    pub archived_posts: u64,
}
