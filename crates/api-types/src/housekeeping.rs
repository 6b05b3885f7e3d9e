//! Held posts (`/api/v1/held…`), kept bounces (`/api/v1/bounces`) and stored postmaster mail
//! (`/api/v1/postmaster`): what an operator lists and acts on.

use serde::{Deserialize, Serialize};

/// Query of the housekeeping listings: `?list=<address>&kind=<bounce kind>&limit=<n>`.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema, utoipa::IntoParams,
)]
#[into_params(parameter_in = Query)]
pub struct ListFilter {
    #[param(format = Email)]
    pub list: Option<String>,
    /// Bounces only: one kind (`hard`, `policy`, …).
    pub kind: Option<String>,
    #[param(minimum = 1, maximum = 100000)]
    pub limit: Option<usize>,
}

/// A held post, as `herald held` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct HeldView {
    /// The post id as a number (approve and reject take it in decimal).
    pub post: u64,
    pub list: String,
    /// Envelope sender; `None` for `<>`.
    pub from: Option<String>,
    pub message_id: Option<String>,
    /// Why it was held.
    pub reason: Option<String>,
    pub received_at_ms: u64,
}

/// The answer to `POST /api/v1/held/<post>/approve`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Approved {
    /// The held post's id as given in the request.
    pub approved: String,
    /// The new list post it was fanned out as (a number on the wire).
    pub post: u64,
}

/// The answer to `POST /api/v1/held/<post>/reject`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct Rejected {
    /// The held post's id as given in the request.
    pub rejected: String,
}

/// Query of `GET /api/v1/postmaster?limit=<n>`.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema, utoipa::IntoParams,
)]
#[into_params(parameter_in = Query)]
pub struct PostmasterFilter {
    #[param(minimum = 1, maximum = 100000)]
    pub limit: Option<usize>,
}

/// A stored postmaster message, as `herald postmaster` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct PostmasterView {
    /// Hex id (as in the SMTP reply and the delivery log).
    pub post: String,
    /// The postmaster address it was sent to.
    pub to: String,
    /// Envelope sender; `None` for `<>`.
    pub from: Option<String>,
    pub message_id: Option<String>,
    pub received_at_ms: u64,
    /// `forwarded`, `kept` (not forwarded: auto-submitted, loop, or no forward configured)
    /// or `pending` (not handled yet).
    pub forward: String,
}
