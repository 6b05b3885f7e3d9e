//! API errors: each maps to one HTTP status and a JSON body `{"error": "..."}`. Messages name
//! the input at fault; internal errors are logged in full and shown generically.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use herald_directory::DirectoryError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
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
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
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
        let body = herald_api_types::ErrorBody {
            error: self.to_string(),
        };
        (self.status(), axum::Json(body)).into_response()
    }
}

impl From<DirectoryError> for ApiError {
    fn from(e: DirectoryError) -> ApiError {
        match e {
            DirectoryError::NoSuchList(_) => ApiError::NotFound(e.to_string()),
            DirectoryError::AlreadyExists(_) | DirectoryError::AlreadyMember(_) => {
                ApiError::Conflict(e.to_string())
            }
            DirectoryError::InvalidInput { .. } => ApiError::BadRequest(e.to_string()),
            DirectoryError::Refused { .. } => ApiError::Forbidden(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> ApiError {
        ApiError::Internal(e.to_string())
    }
}
