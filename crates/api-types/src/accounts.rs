//! Web accounts and the audit log: `/api/v1/accounts`, `/api/v1/me`, `/api/v1/audit`.

use serde::{Deserialize, Serialize};

/// An account (`GET /api/v1/accounts`, and the answer to changes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct AccountView {
    pub address: String,
    pub site_admin: bool,
    /// True when a password is set (it can sign in with one; otherwise by mailed link only).
    pub has_password: bool,
    pub created_ms: u64,
    pub roles: Vec<RoleView>,
}

/// A role on one list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct RoleView {
    pub list: String,
    /// `owner` or `moderator`.
    pub role: String,
}

/// `POST /api/v1/accounts`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewAccount {
    #[schema(format = Email)]
    pub address: String,
    #[serde(default)]
    pub site_admin: bool,
    /// Unset: the account signs in by mailed link only.
    #[serde(default)]
    pub password: Option<String>,
}

/// `PATCH /api/v1/accounts/<address>`: what to change (unset fields stay).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccountUpdate {
    #[serde(default)]
    pub site_admin: Option<bool>,
    /// A new password; ends the account's sessions.
    #[serde(default)]
    pub password: Option<String>,
    /// True: remove the password (sign-in by mailed link only); ends the account's sessions.
    #[serde(default)]
    pub clear_password: bool,
}

/// `PUT /api/v1/accounts/<address>/roles/<list>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleRequest {
    /// `owner`, `moderator` or `none`.
    #[schema(pattern = "^(owner|moderator|none)$")]
    pub role: String,
}

/// `GET /api/v1/me`: who the request is from and what it may administer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct MeView {
    /// `token`, `local` or the account's address.
    pub actor: String,
    pub site_admin: bool,
    /// Lists with a role on them (a site administrator's rights cover every list).
    pub roles: Vec<RoleView>,
    /// The CSRF token a browser session sends in `X-CSRF-Token` (or a form's `csrf` field)
    /// with every state-changing request; absent for the token and local clients.
    pub csrf: Option<String>,
}

/// One audit event (`GET /api/v1/audit?list=&since=&limit=`), newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct AuditView {
    pub id: i64,
    pub at_ms: u64,
    /// `token`, `local`, an account's address, or `erased:<hash>` after a GDPR erasure.
    pub actor: String,
    pub client: Option<String>,
    pub action: String,
    pub list: Option<String>,
    pub target: Option<String>,
    /// `ok`, `denied`, `failed`, `throttled` or `error <HTTP status>`.
    pub outcome: String,
}
