//! The web dashboard: static HTML, JavaScript and CSS compiled into the binary (`include_str!`,
//! no build step, no external resources), served at `/` and `/assets/*`. The page polls the
//! admin API (`/api/v1/top` every second; lists, stragglers and the hourly table every 5 s; each
//! shown post's curve from its report) and draws its charts on canvases.
//!
//! SECURITY: `/` is behind the admin guard (see `auth`); the assets hold no data and are public.
//! The page inserts server values as text only, so member addresses and remote reply texts
//! cannot inject markup. A strict Content-Security-Policy forbids any other origin and inline
//! script.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

pub async fn index() -> Response {
    (
        [
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Html(include_str!("dashboard/index.html")),
    )
        .into_response()
}

pub async fn asset(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "app.js" => (
            include_str!("dashboard/app.js"),
            "text/javascript; charset=utf-8",
        ),
        "style.css" => (
            include_str!("dashboard/style.css"),
            "text/css; charset=utf-8",
        ),
        "admin.css" => (herald_webadmin::ADMIN_CSS, "text/css; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "not found\n").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
