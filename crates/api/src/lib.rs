//! Herald's HTTP side (axum): the JSON admin API used by the `herald` CLI, `/metrics` in
//! OpenMetrics text (for Prometheus), and the RFC 8058 one-click unsubscribe endpoint whose signed URL is in
//! every copy.
//!
//! It also serves the web dashboard (`/`), the report endpoints over the statistics store
//! (`/api/v1/reports/*`), the live view behind `herald top` (`/api/v1/top`), the stragglers with
//! their actions (`/api/v1/stragglers*`) and stored postmaster mail (`/api/v1/postmaster*`).
//!
//! The listener is Herald's own accept loop (`serve`, over the connection table in
//! `conn_table`): capped connections in all and per client, a header-read and an idle timeout,
//! so no crowd of clients can exhaust the process's descriptors.
//!
//! Web accounts: sign-in pages and sessions (`login`), the accounts API and
//! the audit log (`accounts_api`); who may reach which route is one table (`access`). The web
//! administration pages under `/admin/…` (`admin_pages`, rendered by
//! `herald-webadmin`).
//!
//! SECURITY: every admin route is behind `auth::guard` (bearer token, or a session cookie of
//! the admin token or of an account with the right role, when `http.admin_token` is set; local
//! (loopback) clients too when it is not); the unsubscribe and
//! confirmation endpoints are public by design and trust nothing but a valid HMAC token
//! (compared in constant time by `herald_types::token::verify_unsubscribe_token`). A GET never
//! unsubscribes or confirms (mail scanners follow links); only a POST does.

pub mod access;
mod accounts_api;
mod admin;
pub mod admin_pages;
pub mod auth;
mod bans;
pub mod config;
pub mod conn_table;
mod dashboard;
mod error;
mod extract;
mod lists_ops;
mod live;
mod login;
mod manage;
mod node;
mod people;
mod postmaster;
pub mod ready;
mod reports;
mod schema;
pub mod serve;
mod spool_metrics;
mod stages;
mod subscribe;
mod texts;
pub mod tls;
mod unsubscribe;
mod v1;
mod views;

pub use config::HttpConfig;
pub use error::ApiError;
pub use herald_api_types::ConfirmView;
pub use lists_ops::{ListOps, OpsFuture};

use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use herald_directory::Directory;
use herald_scheduler::Scheduler;
use herald_spool::Spool;
use herald_telemetry::Telemetry;
use herald_types::{Address, PostId};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Posts submitted over HTTP enter through the server's one enqueue path (the same one SMTP
/// and LMTP use); the API only knows this trait. Its error is enqueue's own, mapped to an
/// HTTP answer once (`stages.rs`), so a full disk is a 503 here as it is a 452 over SMTP.
pub trait Injector: Send + Sync + 'static {
    /// Spools `body` as an approved post to `list` and starts its fan-out.
    fn inject(
        &self,
        list: Address,
        body: Bytes,
    ) -> Pin<Box<dyn Future<Output = Result<PostId, herald_enqueue::EnqueueError>> + Send + '_>>;

    /// Spools `body` as a post held for moderation on `list` with `reason`: a held post
    /// brought over from another list server by an import.
    fn hold_imported(
        &self,
        list: Address,
        envelope_from: Option<Address>,
        reason: String,
        body: Bytes,
    ) -> Pin<Box<dyn Future<Output = Result<PostId, herald_enqueue::EnqueueError>> + Send + '_>>;

    /// Spools a message the server itself sends to `to` from `from` (null envelope sender):
    /// the sign-in link mail.
    fn send_mail(
        &self,
        from: Address,
        to: Address,
        body: Bytes,
    ) -> Pin<Box<dyn Future<Output = Result<PostId, herald_enqueue::EnqueueError>> + Send + '_>>;
}

/// What the handlers share.
pub struct ApiState {
    pub directory: Directory,
    pub spool: Spool,
    pub telemetry: Telemetry,
    pub scheduler: Scheduler,
    pub injector: Arc<dyn Injector>,
    /// HMAC key of the unsubscribe tokens.
    pub secret: Vec<u8>,
    /// Moderation, subscriptions and confirmations (implemented by the server).
    pub lists: Arc<dyn ListOps>,
    pub started: Instant,
    /// `http.admin_token`; `None`: admin routes answer [`auth::LocalClients`] only.
    pub admin_token: Option<String>,
    /// `http.local_clients`: who counts as local when there is no admin token.
    pub local_clients: auth::LocalClients,
    /// The web archive's pages (`/archive/…`, public lists only); `None` with the archive off.
    pub archive: Option<Arc<herald_archive::web::WebArchive>>,
    /// `GET /api/v1/backup`: a consistent copy of this running server.
    pub backup: Arc<dyn herald_stage::offers::Backup>,
    /// `data_dir`: where a person's archived posts and delivery log lines are looked up.
    pub data_dir: std::path::PathBuf,
    /// This server's host name (the sign-in link mail's sender is `postmaster@` it).
    pub hostname: String,
    /// The digest stage (`herald digest send-now`); `None` with digests or the archive off.
    pub digests: Option<Arc<dyn herald_stage::offers::Digests>>,
    /// The stages that add series to `/metrics` (after the API's own), asked in this order.
    pub metrics: Vec<Arc<dyn herald_stage::offers::Metrics>>,
    /// TLS reporting (`herald tls-report send`); `None` when `[tls_report] enabled = false`.
    pub tls_reports: Option<Arc<dyn herald_stage::offers::TlsReports>>,
    /// Web accounts, sessions and the audit log (`<data_dir>/accounts.db`).
    pub accounts: herald_accounts::Accounts,
    /// Session cookies carry `Secure` (HTTPS listener, an `https://` public URL, or
    /// `accounts.cookie_secure`).
    pub secure_cookies: bool,
    /// `http.public_base_url` as resolved: the sign-in links' base, and an accepted `Origin`
    /// behind a proxy.
    pub public_base_url: String,
    /// This node's cluster membership: every node in `/api/v1/status` and `/metrics`.
    pub cluster: Option<Arc<dyn herald_stage::offers::ClusterView>>,
    /// The web administration's CSV imports under way.
    pub webadmin: admin_pages::ImportJobs,
    /// The shared fan-out's drain (`herald node drain`); `None` unless `[cluster] shared_fanout`.
    pub node_drain: Option<Arc<dyn herald_stage::offers::NodeDrain>>,
    /// The intake's hand-off backlog: posts acknowledged and not yet handed
    /// to their stage, for `/metrics`.
    pub intake_backlog: Arc<herald_enqueue::backlog::BacklogDepth>,
    /// What `/readyz` asks (the spool, the store, the listeners).
    pub readiness: ready::Readiness,
}

/// Largest request body: a post (the SMTP limit applies again when it is spooled) or a CSV chunk.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The full router.
pub fn router(state: Arc<ApiState>) -> Router {
    let archive = match &state.archive {
        Some(web) => herald_archive::web::router(web.clone()),
        None => Router::new(),
    };
    let (v1, document) = v1::router();
    // Rendered once: the document describes the router, which does not change while it runs.
    let document: Arc<str> = document
        .to_json()
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        .into();
    Router::new()
        .merge(archive)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready::readyz))
        .route("/metrics", get(admin::metrics))
        .route("/", get(dashboard::index))
        .route("/assets/{name}", get(dashboard::asset))
        .route("/login", get(login::show).post(login::login))
        .route("/login/link", post(login::send_link))
        .route(
            "/login/{token}",
            get(login::link_page).post(login::link_login),
        )
        .route("/logout", post(login::logout))
        .route(
            "/admin",
            get(|| async { axum::response::Redirect::to("/admin/") }),
        )
        .route("/admin/", get(login::admin_page))
        .route(
            "/unsubscribe/{list}/{member}/{token}",
            get(unsubscribe::confirm_page).post(unsubscribe::unsubscribe),
        )
        .route("/manage", get(manage::ask).post(manage::send_link))
        .route("/manage/{token}", get(manage::show).post(manage::change))
        .route("/manage/{token}/data", get(manage::data))
        .route(
            "/subscribe/{list}",
            get(subscribe::show).post(subscribe::submit),
        )
        .route(
            "/confirm/{token}",
            get(lists_ops::confirm_page).post(lists_ops::confirm),
        )
        .merge(v1)
        .route(
            "/api/v1/openapi.json",
            get(move || async move {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    document.to_string(),
                )
            }),
        )
        .merge(admin_pages::routes())
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ))
        .with_state(state)
}

/// Serves the router on `listener` until `shutdown` is cancelled, within `limits`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<ApiState>,
    limits: conn_table::Limits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let metrics = Some(state.telemetry.metrics().descriptors.clone());
    serve::serve(listener, router(state), None, limits, metrics, shutdown).await
}

/// [`serve`] over TLS (`http.tls_cert_file` or `http.tls_from_inbound`): the same router, the
/// same peer addresses and the same limits (a handshake in progress holds a connection's place).
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<ApiState>,
    limits: conn_table::Limits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let metrics = Some(state.telemetry.metrics().descriptors.clone());
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    serve::serve(
        listener,
        router(state),
        Some(acceptor),
        limits,
        metrics,
        shutdown,
    )
    .await
}
