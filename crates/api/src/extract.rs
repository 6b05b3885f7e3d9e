//! The API's request extractors: axum's `Json`, `Path` and `Query` with their refusals
//! turned into the API's one error shape (an RFC 9457 problem naming the field at fault,
//! [`ApiError`]), instead of axum's plain-text rejections. A client — the CLI, the web pages,
//! an operator's script or the property-based tester in CI — reads every 4xx the same way.
//!
//! Bodies are decoded with `serde_path_to_error`, so a wrong type three levels down says
//! `members[3].address` rather than only "invalid type". Responses use axum's `Json` as before.
//!
//! SECURITY: everything here is untrusted input. The body is read under the router's
//! `DefaultBodyLimit` (a larger one is a 413 problem), and nothing is echoed beyond serde's
//! own description of the fault.

use crate::ApiError;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;

/// A JSON request body, decoded with the path of a field at fault.
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(is_json);
        if !json {
            return Err(ApiError::Rejected {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                detail: "the body must be JSON (Content-Type: application/json)".into(),
            });
        }
        let bytes =
            bytes::Bytes::from_request(req, state)
                .await
                .map_err(|e| ApiError::Rejected {
                    status: e.status(),
                    detail: e.body_text(),
                })?;
        let de = &mut serde_json::Deserializer::from_slice(&bytes);
        let value = serde_path_to_error::deserialize(de).map_err(|e| body_error(&e))?;
        Ok(Json(value))
    }
}

fn body_error(e: &serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let reason = e.inner().to_string();
    // Not JSON at all, or the wrong top-level shape (serde reads a struct from an array too,
    // so `[1, 2]` fails at `[0]`): no one field is at fault.
    if path.is_empty() || path == "." || path.starts_with('[') {
        ApiError::BadRequest(format!(
            "the body is not the JSON this route takes: {reason}"
        ))
    } else {
        ApiError::Invalid {
            field: path,
            reason,
        }
    }
}

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

/// Path parameters; a segment that does not parse (`{post}` not a number) names itself.
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Path(v)),
            Err(PathRejection::FailedToDeserializePathParams(e)) => {
                use axum::extract::path::ErrorKind;
                let field = match e.kind() {
                    ErrorKind::ParseErrorAtKey { key, .. }
                    | ErrorKind::InvalidUtf8InPathParam { key } => Some(key.clone()),
                    _ => None,
                };
                let reason = e.body_text();
                Err(match field {
                    Some(field) => ApiError::Invalid { field, reason },
                    None => ApiError::BadRequest(reason),
                })
            }
            Err(other) => Err(ApiError::Rejected {
                status: other.status(),
                detail: other.body_text(),
            }),
        }
    }
}

/// Query parameters, decoded with the name of a parameter at fault.
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(Query)
            .map_err(|e| {
                let path = e.path().to_string();
                let reason = e.inner().to_string();
                if path.is_empty() || path == "." {
                    ApiError::BadRequest(format!("query: {reason}"))
                } else {
                    ApiError::Invalid {
                        field: path,
                        reason,
                    }
                }
            })
    }
}

/// `application/json` or `application/<something>+json`, with any parameters: the media
/// types a JSON body may come as (RFC 6839 §3.1).
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::is_json;

    #[test]
    fn json_media_types_with_parameters_and_suffixes_are_json() {
        for ct in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
        ] {
            assert!(is_json(ct), "{ct}");
        }
        for ct in [
            "",
            "text/plain",
            "application/jsonp",
            "text/json+x",
            ";application/json",
        ] {
            assert!(!is_json(ct), "{ct}");
        }
    }
}
