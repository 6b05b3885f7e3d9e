//! API errors: each maps to one HTTP status and an RFC 9457 problem body
//! (`application/problem+json`, [`herald_api_types::Problem`]). Messages name the input at
//! fault, and `field` names it by its wire name when one field is at fault; internal errors are
//! logged in full and shown generically.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use herald_directory::DirectoryError;
use herald_stage::offers::OfferError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    /// One field of the request is at fault: a body field (its JSON path, `members[3].address`),
    /// a path segment (`list`) or a query parameter.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    /// The request was refused before a handler saw it (body too large, wrong media type):
    /// the extractor's own status and text.
    #[error("{detail}")]
    Rejected { status: StatusCode, detail: String },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// The server cannot do it now, and the operator needs to know why (a backup whose
    /// staging cannot be written, an unwritable spool).
    #[error("{0}")]
    Unavailable(String),
    /// The request is understood and refused by policy (a banned or suppressed address).
    #[error("{0}")]
    Forbidden(String),
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::Invalid { .. } => StatusCode::BAD_REQUEST,
            ApiError::Rejected { status, .. } => *status,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "API request failed");
        }
        let field = match &self {
            ApiError::Invalid { field, .. } => Some(field.clone()),
            _ => None,
        };
        problem(self.status(), self.to_string(), field)
    }
}

/// An RFC 9457 problem answer: the one shape of every error of the API (and of the guard's
/// refusals, so a client reads a 401 as it reads a 400).
pub(crate) fn problem(status: StatusCode, detail: String, field: Option<String>) -> Response {
    let body = herald_api_types::Problem {
        kind: "about:blank".into(),
        title: status.canonical_reason().unwrap_or("Error").into(),
        status: status.as_u16(),
        detail,
        field,
    };
    let json = serde_json::to_vec(&body).unwrap_or_default();
    (
        status,
        [(
            axum::http::header::CONTENT_TYPE,
            herald_api_types::PROBLEM_JSON,
        )],
        json,
    )
        .into_response()
}

/// What a client is told while the store cannot be reached (the detail goes to the log).
pub(crate) const STORE_UNAVAILABLE: &str =
    "the list store cannot be reached right now; try again shortly";

impl From<DirectoryError> for ApiError {
    fn from(e: DirectoryError) -> ApiError {
        if e.is_unavailable() {
            // PostgreSQL down or restarting: a 503 at once, never a hang or a 500.
            tracing::warn!(error = %e, "API request failed: the store is unreachable");
            return ApiError::Unavailable(STORE_UNAVAILABLE.into());
        }
        match e {
            DirectoryError::NoSuchList(_) => ApiError::NotFound(e.to_string()),
            DirectoryError::AlreadyExists(_) | DirectoryError::AlreadyMember(_) => {
                ApiError::Conflict(e.to_string())
            }
            DirectoryError::InvalidInput { field, reason } => ApiError::Invalid {
                field: field.to_string(),
                reason,
            },
            DirectoryError::Refused { .. } => ApiError::Forbidden(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// The member lifecycle's errors (`herald_lists::Membership`, one type per operation) answer
/// as the directory's error underneath them always did: same status, same text.
macro_rules! membership_errors {
    ($($t:ident),*) => {$(
        impl From<herald_lists::$t> for ApiError {
            fn from(e: herald_lists::$t) -> ApiError {
                ApiError::from(e.store())
            }
        }
    )*};
}

membership_errors!(
    SubscribeError,
    UnsubscribeError,
    ChangeError,
    DisableError,
    EnableError,
    EraseError,
    ImportError
);

/// What a stage answered through `herald_stage::offers`: the one place its failures get a status.
impl From<OfferError> for ApiError {
    fn from(e: OfferError) -> ApiError {
        match e {
            OfferError::NotFound(m) => ApiError::NotFound(m),
            OfferError::BadRequest(m) => ApiError::BadRequest(m),
            OfferError::Store(e) => ApiError::from(e),
            OfferError::Unavailable(m) => ApiError::Unavailable(m),
            OfferError::Internal(m) => ApiError::Internal(m),
        }
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> ApiError {
        ApiError::Internal(e.to_string())
    }
}

/// Parses an address from the request; a bad one is an [`ApiError::Invalid`] naming `field`.
pub(crate) fn parse_address(field: &str, text: &str) -> Result<herald_types::Address, ApiError> {
    herald_types::Address::parse(text.trim()).map_err(|e| ApiError::Invalid {
        field: field.to_string(),
        reason: format!("{text:?}: {e}"),
    })
}
