//! The pieces of the OpenAPI document the handlers' `#[utoipa::path]` operations share: the
//! error answers every operation may give and the schema of a raw byte body. Kept apart from
//! `v1.rs`, which names every handler, so a handler naming these does not make a module cycle.

use herald_api_types::Problem;

/// The error answers every operation may give, each an RFC 9457 problem.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // Only its derived description is used: errors are built by `ApiError`.
pub enum Problems {
    /// The request is malformed; `field` names the field, segment or parameter at fault.
    #[response(status = 400, content_type = "application/problem+json")]
    BadRequest(Problem),
    /// No credential (admin token or session) was given.
    #[response(status = 401, content_type = "application/problem+json")]
    Unauthorized(Problem),
    /// The credential has no right to this route or list, or policy refuses it.
    #[response(status = 403, content_type = "application/problem+json")]
    Forbidden(Problem),
    /// No such list, member, post or account.
    #[response(status = 404, content_type = "application/problem+json")]
    NotFound(Problem),
    /// It exists already, or the server's state forbids it now.
    #[response(status = 409, content_type = "application/problem+json")]
    Conflict(Problem),
    /// The body is larger than the server takes.
    #[response(status = 413, content_type = "application/problem+json")]
    TooLarge(Problem),
    /// The body is not in the media type the route takes.
    #[response(status = 415, content_type = "application/problem+json")]
    UnsupportedMediaType(Problem),
    /// Too many attempts from this client or account.
    #[response(status = 429, content_type = "application/problem+json")]
    TooMany(Problem),
    /// The feature is turned off on this server, or its store is unreachable.
    #[response(status = 503, content_type = "application/problem+json")]
    Unavailable(Problem),
}

/// A body of raw bytes (a message as `message/rfc822`, a backup as `application/x-tar`): a
/// binary string in the document, so a client sends and reads it as it is.
pub struct RawBytes;

impl utoipa::PartialSchema for RawBytes {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .into()
    }
}

impl utoipa::ToSchema for RawBytes {}
