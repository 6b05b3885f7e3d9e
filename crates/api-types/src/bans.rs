//! Bans and the suppression list: `/api/v1/bans` and `/api/v1/suppressions`,
//! admin-only. A request's `list` is a list address; absent, the global scope.

use serde::{Deserialize, Serialize};

/// One ban, as `GET /api/v1/bans` lists it and `POST /api/v1/bans` answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct BanView {
    pub id: i64,
    /// The list's address; `None`: global.
    pub list: Option<String>,
    /// As stored: an address or `@domain` normalized, a `^regex` as given.
    pub pattern: String,
    pub created_at_ms: u64,
}

/// `POST /api/v1/bans` (add) and `DELETE /api/v1/bans` (lift).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BanRequest {
    #[serde(default)]
    #[schema(format = Email)]
    pub list: Option<String>,
    pub pattern: String,
}

/// `GET /api/v1/bans?list=…` and `GET /api/v1/suppressions?list=…&limit=…`.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    utoipa::IntoParams,
)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ScopeQuery {
    #[serde(default)]
    #[param(format = Email)]
    pub list: Option<String>,
    #[serde(default)]
    #[param(minimum = 1, maximum = 100000)]
    pub limit: Option<usize>,
}

/// One suppression-list entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct SuppressionView {
    /// The list's address; `None`: every list.
    pub list: Option<String>,
    pub address: String,
    pub reason: String,
    /// `operator`, `complaint` or `erasure`.
    pub source: String,
    pub at_ms: u64,
}

/// `POST /api/v1/suppressions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SuppressRequest {
    #[serde(default)]
    #[schema(format = Email)]
    pub list: Option<String>,
    #[schema(format = Email)]
    pub address: String,
    pub reason: String,
    /// `operator` (the default) or `erasure`; `complaint` is Herald's own.
    #[serde(default)]
    pub source: Option<String>,
}

/// The answer to `POST /api/v1/suppressions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct SuppressAnswer {
    /// The entry in force (the earlier one when the address was already suppressed).
    pub entry: SuppressionView,
    /// False when the address was already suppressed in this scope.
    pub new: bool,
    /// Members this call disabled.
    pub disabled: u64,
}

/// `DELETE /api/v1/suppressions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnsuppressRequest {
    #[serde(default)]
    #[schema(format = Email)]
    pub list: Option<String>,
    #[schema(format = Email)]
    pub address: String,
}
