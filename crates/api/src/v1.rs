//! The versioned admin API: every JSON route under `/api/v1`, and its
//! OpenAPI 3.1 document at `/api/v1/openapi.json`.
//!
//! The document is generated, never written by hand: each handler carries its operation
//! (`#[utoipa::path]`, beside the code it describes), the wire types in `herald-api-types`
//! derive their schemas, and each route is added here through utoipa-axum's `routes!`, which
//! registers the handler with axum and its operation with the document in one step. A route
//! cannot be served without being documented, or documented without being served.
//! `tests/it/api_v1.rs` checks the document against the router and CI runs schemathesis
//! against the running server with it.
//!
//! Versioning: `v1` changes only by adding (an optional request field, a response field, a
//! route). A breaking change is `v2`, served beside `v1` for a release.
//!
//! SECURITY: every route here is an admin route behind `auth::guard` (bearer token, or a
//! session with the role the route table in `access.rs` asks for). The document itself is
//! public: it describes the API, holds no data, and a client needs it before it has a token.

use crate::ApiState;
use crate::{accounts_api, admin, bans, lists_ops, live, node, people, postmaster, reports, texts};
use axum::Router;
use herald_api_types::Problem;
use std::sync::Arc;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Where the versioned API lives.
pub const PREFIX: &str = "/api/v1";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Herald admin API",
        version = "1",
        description = "Lists, members, held posts, bounces, reports and accounts of a Herald \
                       mailing-list server. Every error is an RFC 9457 problem \
                       (application/problem+json) naming the field at fault. Lists of members \
                       are paged by cursor: `after` is the last id seen."
    ),
    modifiers(&BearerToken),
    security(("token" = [])),
    components(schemas(Problem))
)]
struct Doc;

/// `Authorization: Bearer <http.admin_token>` (a signed-in session's cookie works too, for the
/// routes its role reaches).
struct BearerToken;

impl utoipa::Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The versioned routes (to be mounted at the root: their paths carry [`PREFIX`]) and the
/// document that describes exactly them.
pub fn router() -> (Router<Arc<ApiState>>, utoipa::openapi::OpenApi) {
    let routes = OpenApiRouter::<Arc<ApiState>>::default()
        .routes(routes!(admin::status))
        .routes(routes!(admin::lists, admin::create_list))
        .routes(routes!(
            admin::show_list,
            admin::update_list,
            admin::delete_list
        ))
        .routes(routes!(admin::members, admin::add_member))
        .routes(routes!(
            admin::show_member,
            admin::remove_member,
            lists_ops::member_update
        ))
        .routes(routes!(lists_ops::member_detail))
        .routes(routes!(lists_ops::member_prefs))
        .routes(routes!(lists_ops::member_enable))
        .routes(routes!(lists_ops::member_reset_bounces))
        .routes(routes!(admin::import))
        .routes(routes!(admin::inject))
        .routes(routes!(lists_ops::hold_imported))
        .routes(routes!(lists_ops::subscribe))
        .routes(routes!(lists_ops::unsubscribe_request))
        .routes(routes!(lists_ops::digest_send_now))
        .routes(routes!(lists_ops::welcome))
        .routes(routes!(admin::posts))
        .routes(routes!(admin::post_progress))
        .routes(routes!(admin::queue))
        .routes(routes!(live::top))
        .routes(routes!(live::stragglers))
        .routes(routes!(live::retry))
        .routes(routes!(live::give_up))
        .routes(routes!(live::disable))
        .routes(routes!(reports::hourly))
        .routes(routes!(reports::day))
        .routes(routes!(reports::post))
        .routes(routes!(lists_ops::held))
        .routes(routes!(lists_ops::approve))
        .routes(routes!(lists_ops::reject))
        .routes(routes!(lists_ops::bounces))
        .routes(routes!(lists_ops::dismiss_bounce))
        .routes(routes!(postmaster::list))
        .routes(routes!(postmaster::show, postmaster::delete))
        .routes(routes!(people::export, people::erase))
        .routes(routes!(bans::bans, bans::add_ban, bans::remove_ban))
        .routes(routes!(
            bans::suppressions,
            bans::suppress,
            bans::unsuppress
        ))
        .routes(routes!(accounts_api::me))
        .routes(routes!(accounts_api::list, accounts_api::add))
        .routes(routes!(
            accounts_api::show,
            accounts_api::update,
            accounts_api::remove
        ))
        .routes(routes!(accounts_api::set_role))
        .routes(routes!(accounts_api::audit))
        .routes(routes!(lists_ops::tls_report_send))
        .routes(routes!(admin::backup))
        .routes(routes!(texts::list_texts))
        .routes(routes!(texts::set_list_text, texts::remove_list_text))
        .routes(routes!(node::drain));
    OpenApiRouter::with_openapi(Doc::openapi())
        .nest(PREFIX, routes)
        .split_for_parts()
}
