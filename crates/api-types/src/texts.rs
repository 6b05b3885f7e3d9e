//! A list's own wording of Herald's generated mail and pages:
//! `GET /api/v1/lists/<list>/texts`, `PUT`/`DELETE /api/v1/lists/<list>/texts/<message>/<language>`.

use serde::{Deserialize, Serialize};

/// Every message an owner may reword, with its fields and the list's texts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ListTexts {
    /// The list's language (its texts in other languages go to members who chose those).
    pub language: String,
    /// The shipped languages, by code.
    pub languages: Vec<String>,
    pub messages: Vec<ListTextView>,
}

/// One catalogue message as a list sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ListTextView {
    /// The message id (`welcome-text`, `subscribe-title`, …).
    pub id: String,
    /// The fields the text may use, as `{ $name }`.
    pub fields: Vec<String>,
    /// The shipped text in the list's language (Fluent syntax), what an override replaces.
    pub shipped: String,
    /// The list's own texts of this message, one per language that has one.
    pub overrides: Vec<TextOverride>,
}

/// A list's own text of one message in one language.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct TextOverride {
    pub language: String,
    pub text: String,
    /// When it was last written (Unix milliseconds).
    pub updated_at_ms: u64,
}

/// `PUT /api/v1/lists/<list>/texts/<message>/<language>`: the new text (Fluent syntax: fields
/// as `{ $name }`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetText {
    #[schema(min_length = 1, max_length = 8192)]
    pub text: String,
}
