//! List housekeeping over HTTP: held posts (list, approve, reject), bounces (list,
//! dismiss a kept unrecognized bounce), member details (status, bounce score, history, the
//! "not me too" option), an administrator's re-enable and bounce-score reset, subscription requests with double opt-in, and the public confirmation
//! page (`GET /confirm/<token>` shows a button, `POST` confirms — link scanners only GET).
//!
//! `herald_lists::Lists` implements [`ListOps`] (in `stages.rs`, which maps its `ListsError`);
//! the routes only know the trait, like [`crate::Injector`].
//!
//! SECURITY: the admin routes share the admin API's loopback-only default. The confirmation
//! routes are public and act only on a valid HMAC token; text echoed into HTML is escaped.

use crate::extract::{Json, Path, Query};
use crate::views;
use crate::{ApiError, ApiState};
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use herald_api_types::{
    Approved, BounceEvent, ConfirmView, HeldView, ListFilter, MemberDetail, Prefs, Rejected,
    SubscribeAnswer, SubscribeRequest,
};
use herald_lists::{Change, Door, Membership};
use herald_spool::PostKind;
use herald_types::{Address, ListId, PostId};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

type St = State<Arc<ApiState>>;
/// A boxed future, as the trait methods return.
pub type OpsFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ApiError>> + Send + 'a>>;

/// Housekeeping the server implements.
pub trait ListOps: Send + Sync + 'static {
    /// Approves a held post: re-enqueues its body as a list post, then completes the held one.
    /// Returns the new post's id.
    fn approve(&self, post: PostId) -> OpsFuture<'_, PostId>;
    /// Rejects (discards) a held post.
    fn reject(&self, post: PostId) -> OpsFuture<'_, ()>;
    /// Rejects a held post with the moderator's reason in the notice to its sender.
    fn reject_with(&self, post: PostId, reason: Option<String>) -> OpsFuture<'_, ()>;
    /// Discards a held post without a notice to anyone.
    fn discard(&self, post: PostId) -> OpsFuture<'_, ()>;
    /// Sends a double opt-in confirmation for `action` (`subscribe` / `unsubscribe`).
    fn request(&self, list: Address, address: Address, action: String) -> OpsFuture<'_, String>;
    /// A subscription asked for on the public subscribe page by `client` (the browser's address,
    /// which the notice limits count): sends the double opt-in confirmation, or says why there is
    /// nothing to confirm (a closed list; a refused address).
    fn web_subscribe(
        &self,
        list: Address,
        address: Address,
        client: std::net::IpAddr,
    ) -> OpsFuture<'_, Option<String>>;
    /// Mails `address` the link to its own subscriptions page, asked for by `client` on the
    /// public page (nothing when it is on no list).
    fn manage_link(&self, address: Address, client: std::net::IpAddr) -> OpsFuture<'_, ()>;
    /// Checks a confirmation token; with `apply: Some(client)`, carries the action out and
    /// records the confirming client (the browser's IP address) with the consent.
    fn confirm(&self, token: String, apply: Option<String>) -> OpsFuture<'_, ConfirmView>;
    /// Welcomes one page of a list's members (see [`herald_api_types::WelcomeRequest`]).
    fn welcome(
        &self,
        list: Address,
        req: herald_api_types::WelcomeRequest,
    ) -> OpsFuture<'_, herald_api_types::WelcomeSent>;
}

/// `POST /api/v1/lists/<list>/welcome`: the list's welcome to one page of its members, asked for by
/// `herald import … --send-welcome` for the members the import added.
#[utoipa::path(
    post,
    path = "/lists/{list}/welcome",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    request_body = herald_api_types::WelcomeRequest,
    responses((status = 200, description = "Welcome messages queued", body = herald_api_types::WelcomeSent), crate::schema::Problems)
)]
pub async fn welcome(
    State(s): St,
    Path(list): Path<String>,
    Json(req): Json<herald_api_types::WelcomeRequest>,
) -> Result<Json<herald_api_types::WelcomeSent>, ApiError> {
    let list = crate::admin::find_list_pub(&s, &list).await?;
    Ok(Json(s.lists.welcome(list.address, req).await?))
}

#[utoipa::path(
    get,
    path = "/held",
    tag = "held",
    params(ListFilter),
    responses((status = 200, description = "Held posts", body = Vec<HeldView>), crate::schema::Problems)
)]
pub async fn held(State(s): St, Query(f): Query<ListFilter>) -> Json<Vec<HeldView>> {
    let want = f.list.map(|l| l.to_ascii_lowercase());
    let views = s
        .spool
        .live_posts()
        .into_iter()
        .filter(|(_, m)| m.kind == PostKind::Held)
        .filter(|(_, m)| {
            want.as_ref()
                .is_none_or(|w| m.list_address.to_string().eq_ignore_ascii_case(w))
        })
        .take(f.limit.unwrap_or(1000).min(10_000))
        .map(|(post, m)| HeldView {
            // A number on the wire (the goldens pin it); approve and reject take it in decimal.
            post: post.0,
            list: m.list_address.to_string(),
            from: m.envelope_from.map(|a| a.to_string()),
            message_id: m.message_id,
            reason: m.hold_reason,
            received_at_ms: m.received_at_ms,
        })
        .collect();
    Json(views)
}

fn post_id(text: &str) -> Result<PostId, ApiError> {
    text.parse::<u64>()
        .map(PostId)
        .map_err(|_| ApiError::Invalid {
            field: "post".into(),
            reason: format!("not a post id: {text:?}"),
        })
}

#[utoipa::path(
    post,
    path = "/held/{post}/approve",
    tag = "held",
    params(("post" = u64, Path, description = "The held post's or bounce's number")),
    responses((status = 200, description = "Approved and sent to the list", body = Approved), crate::schema::Problems)
)]
pub async fn approve(State(s): St, Path(post): Path<String>) -> Result<Json<Approved>, ApiError> {
    let new = s.lists.approve(post_id(&post)?).await?;
    Ok(Json(Approved {
        approved: post,
        post: new.0,
    }))
}

#[utoipa::path(
    post,
    path = "/held/{post}/reject",
    tag = "held",
    params(("post" = u64, Path, description = "The held post's or bounce's number")),
    responses((status = 200, description = "Rejected", body = Rejected), crate::schema::Problems)
)]
pub async fn reject(State(s): St, Path(post): Path<String>) -> Result<Json<Rejected>, ApiError> {
    s.lists.reject(post_id(&post)?).await?;
    Ok(Json(Rejected { rejected: post }))
}

#[utoipa::path(
    get,
    path = "/bounces",
    tag = "bounces",
    params(ListFilter),
    responses((status = 200, description = "Recent bounces", body = Vec<BounceEvent>), crate::schema::Problems)
)]
pub async fn bounces(
    State(s): St,
    Query(f): Query<ListFilter>,
) -> Result<Json<Vec<BounceEvent>>, ApiError> {
    let list = match &f.list {
        Some(l) => Some(crate::admin::find_list_pub(&s, l).await?.id),
        None => None,
    };
    let limit = f.limit.unwrap_or(100);
    let d = s.directory.clone();
    let kind = f.kind.clone();
    let events =
        tokio::task::spawn_blocking(move || d.bounce_events(list, None, kind.as_deref(), limit))
            .await??;
    Ok(Json(events.iter().map(views::directory::bounce).collect()))
}

/// Dismisses a bounce kept for an administrator (completes it in the spool).
#[utoipa::path(
    delete,
    path = "/bounces/{post}",
    tag = "bounces",
    params(("post" = u64, Path, description = "The held post's or bounce's number")),
    responses((status = 204, description = "Dismissed"), crate::schema::Problems)
)]
pub async fn dismiss_bounce(
    State(s): St,
    Path(post): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = post_id(&post)?;
    let is_bounce = s
        .spool
        .live_posts()
        .iter()
        .any(|(p, m)| *p == id && m.kind == PostKind::Bounce);
    if !is_bounce {
        return Err(ApiError::NotFound(format!("no kept bounce {post}")));
    }
    s.spool
        .complete(id)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(StatusCode::NO_CONTENT)
}

/// A member with bounce score and history.
#[utoipa::path(
    get,
    path = "/lists/{list}/members/{member}/detail",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email), ("member" = String, Path, description = "The member's address", format = Email)),
    responses((status = 200, description = "The member with bounce score, consent and options", body = MemberDetail), crate::schema::Problems)
)]
pub async fn member_detail(
    State(s): St,
    Path((list, member)): Path<(String, String)>,
) -> Result<Json<MemberDetail>, ApiError> {
    detail(&s, &list, &member, MemberAction::None).await
}

/// `PATCH …/members/{member}`: an administrator changes a member's delivery mode or
/// moderation flag; answers the member's details as they are now. An unknown mode
/// word is refused by the JSON decoder (422) before anything changes.
#[utoipa::path(
    patch,
    path = "/lists/{list}/members/{member}",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email), ("member" = String, Path, description = "The member's address", format = Email)),
    request_body = herald_api_types::MemberUpdate,
    responses((status = 200, description = "The member as changed", body = MemberDetail), crate::schema::Problems)
)]
pub async fn member_update(
    State(s): St,
    Path((list, member)): Path<(String, String)>,
    Json(u): Json<herald_api_types::MemberUpdate>,
) -> Result<Json<MemberDetail>, ApiError> {
    tracing::info!(%list, %member, delivery = ?u.delivery, moderated = ?u.moderated,
        language = ?u.language, "member update by an administrator");
    let action = MemberAction::Update {
        delivery: u.delivery,
        moderated: u.moderated,
        language: u.language,
    };
    let answer = detail(&s, &list, &member, action).await?;
    Ok(answer)
}

/// `POST /api/v1/lists/<list>/digest/send-now`: the list's next digest now, if anything
/// was archived since the last one. 409 when digests are off on this server.
#[utoipa::path(
    post,
    path = "/lists/{list}/digest/send-now",
    tag = "lists",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    responses((status = 200, description = "The digest sent, or nothing to send", body = herald_api_types::DigestSent), crate::schema::Problems)
)]
pub async fn digest_send_now(
    State(s): St,
    Path(list): Path<String>,
) -> Result<Json<herald_api_types::DigestSent>, ApiError> {
    let Some(digests) = s.digests.clone() else {
        return Err(ApiError::Conflict(
            "digests are off on this server ([digest] enabled and [archive] enabled)".into(),
        ));
    };
    let list = crate::error::parse_address("list", &list)?;
    Ok(Json(digests.send_now(&list).await?))
}

/// `?day=YYYY-MM-DD` (default: yesterday, UTC) for [`tls_report_send`].
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TlsReportDay {
    #[param(format = Date)]
    pub day: Option<String>,
}

/// `POST /api/v1/tls-report/send?day=…`: sends (again) the TLS reports (RFC 8460) of that day to
/// every recipient domain that asks for them — an operator's re-send, or a look at today so far.
#[utoipa::path(
    post,
    path = "/tls-report/send",
    tag = "status",
    params(TlsReportDay),
    responses((status = 200, description = "Reports sent", body = Vec<herald_api_types::TlsReportSent>), crate::schema::Problems)
)]
pub async fn tls_report_send(
    State(s): St,
    Query(q): Query<TlsReportDay>,
) -> Result<Json<Vec<herald_api_types::TlsReportSent>>, ApiError> {
    let Some(reports) = s.tls_reports.clone() else {
        return Err(ApiError::Conflict(
            "TLS reporting is off on this server ([tls_report] enabled = false)".into(),
        ));
    };
    Ok(Json(reports.send_day(q.day.as_deref()).await?))
}

/// An administrator's action on one member before its details are read: bounce handling
///, or the delivery mode and moderation flag.
#[derive(Debug, Clone)]
pub(crate) enum MemberAction {
    None,
    /// Set what is `Some` (`language`: `""` clears it).
    Update {
        delivery: Option<herald_types::DeliveryMode>,
        moderated: Option<bool>,
        language: Option<String>,
    },
    /// Re-enable (whatever disabled the member) and clear the bounce score.
    Enable,
    /// Clear the bounce score only.
    ResetScore,
    /// Disable (the web page's button); bounce handling's own disabling
    /// records its reason the same way.
    Disable,
}

/// Why a member an administrator disabled is disabled.
pub(crate) const DISABLED_BY_ADMIN: &str = "disabled by an administrator";

/// `POST …/members/{member}/enable`: re-enables a member (e.g. one disabled for bouncing) and
/// clears their bounce score; answers the member's details as they are now.
#[utoipa::path(
    post,
    path = "/lists/{list}/members/{member}/enable",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email), ("member" = String, Path, description = "The member's address", format = Email)),
    responses((status = 200, description = "Enabled", body = MemberDetail), crate::schema::Problems)
)]
pub async fn member_enable(
    State(s): St,
    Path((list, member)): Path<(String, String)>,
) -> Result<Json<MemberDetail>, ApiError> {
    let answer = detail(&s, &list, &member, MemberAction::Enable).await?;
    tracing::info!(%list, %member, "member re-enabled by an administrator");
    Ok(answer)
}

/// `POST …/members/{member}/reset-bounces`: clears the bounce score; status and history stay.
#[utoipa::path(
    post,
    path = "/lists/{list}/members/{member}/reset-bounces",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email), ("member" = String, Path, description = "The member's address", format = Email)),
    responses((status = 200, description = "Bounce score reset", body = MemberDetail), crate::schema::Problems)
)]
pub async fn member_reset_bounces(
    State(s): St,
    Path((list, member)): Path<(String, String)>,
) -> Result<Json<MemberDetail>, ApiError> {
    detail(&s, &list, &member, MemberAction::ResetScore).await
}

/// Carries out an administrator's `action` on a member through the member lifecycle.
fn apply_action(
    m: &Membership,
    list: ListId,
    addr: &Address,
    action: MemberAction,
) -> Result<(), herald_directory::DirectoryError> {
    match action {
        MemberAction::None => {}
        MemberAction::Update {
            delivery,
            moderated,
            language,
        } => {
            // The language first (`Membership::change` writes it first): it is the one part a
            // request can get wrong, and a refused request changes nothing.
            let change = Change {
                language: language.map(|code| {
                    let code = code.trim();
                    (!code.is_empty()).then(|| code.to_string())
                }),
                delivery,
                moderated,
                ..Change::default()
            };
            m.change(list, addr, &change, Door::Admin)?;
        }
        MemberAction::Enable => {
            m.reenable(list, addr, Door::Admin)?;
        }
        MemberAction::ResetScore => {
            m.clear_bounce_score(list, addr, Door::Admin)?;
        }
        MemberAction::Disable => {
            m.disable(list, addr, DISABLED_BY_ADMIN, Door::Admin)?;
        }
    }
    Ok(())
}

/// Applies `action` (if any) and reads the member's details, in one blocking task.
pub(crate) async fn detail(
    s: &ApiState,
    list: &str,
    member: &str,
    action: MemberAction,
) -> Result<Json<MemberDetail>, ApiError> {
    let list = crate::admin::find_list_pub(s, list).await?;
    let addr = crate::error::parse_address("member", member)?;
    let d = s.directory.clone();
    let members = Membership::new(&s.directory);
    let (m, score, history, consent, delivery, moderated, language) =
        tokio::task::spawn_blocking(move || {
            apply_action(&members, list.id, &addr, action)?;
            // The events before the score: a bounce writes both in one transaction, but these
            // are separate reads (on PostgreSQL, separate snapshots), so a bounce landing
            // between them would show its event without its score the other way round. In
            // this order an event shown always comes with its score (knowledge_e2e caught it).
            let bounces = d.bounce_events(Some(list.id), Some(&addr), None, 50)?;
            Ok::<_, herald_directory::DirectoryError>((
                d.member(list.id, &addr)?,
                d.bounce_score(list.id, &addr)?,
                bounces,
                d.member_consent(list.id, &addr)?,
                d.delivery(list.id, &addr)?,
                d.moderated(list.id, &addr)?,
                d.member_language(list.id, &addr)?.flatten(),
            ))
        })
        .await??;
    let m = m.ok_or_else(|| ApiError::NotFound(format!("{member} is not a member")))?;
    Ok(Json(MemberDetail {
        member: views::directory::member(&m),
        bounce_score: score.as_ref().map(views::directory::bounce_score),
        bounces: history.iter().map(views::directory::bounce).collect(),
        consent: consent.as_ref().map(views::directory::consent),
        delivery: delivery.unwrap_or_default(),
        moderated: moderated.unwrap_or(false),
        language,
    }))
}

#[utoipa::path(
    post,
    path = "/lists/{list}/members/{member}/prefs",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email), ("member" = String, Path, description = "The member's address", format = Email)),
    request_body = Prefs,
    responses((status = 204, description = "Changed"), crate::schema::Problems)
)]
pub async fn member_prefs(
    State(s): St,
    Path((list, member)): Path<(String, String)>,
    Json(p): Json<Prefs>,
) -> Result<StatusCode, ApiError> {
    let list = crate::admin::find_list_pub(&s, &list).await?;
    let addr = crate::error::parse_address("member", &member)?;
    let m = Membership::new(&s.directory);
    let change = Change {
        skip_if_addressed: Some(p.skip_if_addressed),
        ..Change::default()
    };
    let found = tokio::task::spawn_blocking(move || m.change(list.id, &addr, &change, Door::Admin))
        .await??;
    if found {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("{member} is not a member")))
    }
}

async fn request(
    s: Arc<ApiState>,
    list: String,
    req: SubscribeRequest,
    action: &str,
) -> Result<(StatusCode, Json<SubscribeAnswer>), ApiError> {
    let list = crate::error::parse_address("list", &list)?;
    let addr = crate::error::parse_address("address", &req.address)?;
    let what = s.lists.request(list, addr, action.to_string()).await?;
    Ok((StatusCode::ACCEPTED, Json(SubscribeAnswer { status: what })))
}

#[utoipa::path(
    post,
    path = "/lists/{list}/subscribe",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    request_body = SubscribeRequest,
    responses((status = 202, description = "Subscribed, or a confirmation mailed", body = SubscribeAnswer), crate::schema::Problems)
)]
pub async fn subscribe(
    State(s): St,
    Path(list): Path<String>,
    Json(r): Json<SubscribeRequest>,
) -> Result<(StatusCode, Json<SubscribeAnswer>), ApiError> {
    request(s, list, r, "subscribe").await
}

#[utoipa::path(
    post,
    path = "/lists/{list}/unsubscribe",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    request_body = SubscribeRequest,
    responses((status = 202, description = "Unsubscribed, or a confirmation mailed", body = SubscribeAnswer), crate::schema::Problems)
)]
pub async fn unsubscribe_request(
    State(s): St,
    Path(list): Path<String>,
    Json(r): Json<SubscribeRequest>,
) -> Result<(StatusCode, Json<SubscribeAnswer>), ApiError> {
    request(s, list, r, "unsubscribe").await
}

/// GET: shows what the token would do, with a button; changes nothing. A spent link says so
/// instead (no button that can do nothing).
pub async fn confirm_page(State(s): St, Path(token): Path<String>) -> Response {
    match s.lists.confirm(token, None).await {
        Ok(v) if v.spent.is_some() => spent_page(&s, &v).await,
        Ok(v) => {
            let (lang, texts) = confirm_words(&s, &v).await;
            let w = herald_i18n::Words {
                lang: &lang,
                overrides: &texts,
            };
            let args = confirm_args(&v);
            let body = format!(
                "<p>{}</p><form method=\"post\"><button type=\"submit\">{}</button></form>",
                crate::unsubscribe::escape(&w.text("confirm-question", &args)),
                crate::unsubscribe::escape(&w.text("confirm-button", &[])),
            );
            Html(crate::unsubscribe::words_page(
                &w,
                &w.text("confirm-title", &[]),
                &body,
            ))
            .into_response()
        }
        Err(_) => invalid(),
    }
}

/// POST: carries the confirmed action out; the peer address (from the socket, never a
/// header) is recorded as the confirming client.
pub async fn confirm(
    State(s): St,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(token): Path<String>,
) -> Response {
    let client = peer.ip().to_canonical().to_string();
    match s.lists.confirm(token, Some(client)).await {
        Ok(v) if v.spent.is_some() => {
            tracing::info!(list = %v.list, address = %v.address, client = %peer.ip().to_canonical(),
                spent = ?v.spent, "spent confirmation link refused");
            spent_page(&s, &v).await
        }
        Ok(v) => {
            let (lang, texts) = confirm_words(&s, &v).await;
            let w = herald_i18n::Words {
                lang: &lang,
                overrides: &texts,
            };
            let body = format!(
                "<p>{}</p>",
                crate::unsubscribe::escape(&w.text("confirm-done", &confirm_args(&v)))
            );
            Html(crate::unsubscribe::words_page(
                &w,
                &w.text("confirm-done-title", &[]),
                &body,
            ))
            .into_response()
        }
        Err(ApiError::Internal(e)) => ApiError::Internal(e).into_response(),
        Err(_) => invalid(),
    }
}

/// The catalogue's word for a confirmation's action (the selector of `confirm-question`),
/// from the verb phrase the view carries.
fn action_key(verb: &str) -> &'static str {
    use herald_types::token::Action;
    use herald_types::DeliveryMode;
    let all = [
        (Action::Subscribe, "subscribe"),
        (Action::Unsubscribe, "unsubscribe"),
        (Action::Delivery(DeliveryMode::Regular), "regular"),
        (Action::Delivery(DeliveryMode::DigestMime), "digest-mime"),
        (Action::Delivery(DeliveryMode::DigestPlain), "digest-plain"),
        (Action::Delivery(DeliveryMode::Nomail), "nomail"),
    ];
    all.iter()
        .find(|(a, _)| a.verb() == verb)
        .map_or("other", |(_, k)| k)
}

fn confirm_args(v: &herald_api_types::ConfirmView) -> [(&'static str, &str); 3] {
    [
        ("action", action_key(&v.action)),
        ("who", &v.address),
        ("list", &v.list),
    ]
}

/// The words of a confirmation page: the language of the address it names, the list's texts.
async fn confirm_words(
    s: &ApiState,
    v: &herald_api_types::ConfirmView,
) -> (String, herald_i18n::Overrides) {
    let list = match Address::parse(&v.list) {
        Ok(a) => {
            let d = s.directory.clone();
            tokio::task::spawn_blocking(move || d.list_by_address(&a))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten()
        }
        Err(_) => None,
    };
    match (list, Address::parse(&v.address)) {
        (Some(l), Ok(who)) => crate::unsubscribe::page_words(s, &l, Some(&who)).await,
        (Some(l), Err(_)) => crate::unsubscribe::page_words(s, &l, None).await,
        _ => (
            herald_i18n::DEFAULT.to_string(),
            herald_i18n::Overrides::none(),
        ),
    }
}

/// The page of a spent link (410 Gone): why it does nothing, that nothing changed, and, for a
/// subscription link, where to ask for a fresh one.
async fn spent_page(s: &ApiState, v: &herald_api_types::ConfirmView) -> Response {
    use herald_api_types::LinkSpent;
    let (lang, texts) = confirm_words(s, v).await;
    let w = herald_i18n::Words {
        lang: &lang,
        overrides: &texts,
    };
    let args = confirm_args(v);
    let (title, why) = match v.spent {
        Some(LinkSpent::Superseded) => ("confirm-superseded-title", "confirm-superseded"),
        _ => ("confirm-used-title", "confirm-used"),
    };
    let mut body = format!("<p>{}</p>", crate::unsubscribe::escape(&w.text(why, &args)));
    if action_key(&v.action) == "subscribe" {
        body.push_str(&format!(
            "<p><a href=\"/subscribe/{}\">{}</a></p>",
            crate::unsubscribe::escape(&v.list),
            crate::unsubscribe::escape(&w.text("confirm-subscribe-again", &args)),
        ));
    }
    (
        StatusCode::GONE,
        Html(crate::unsubscribe::words_page(
            &w,
            &w.text(title, &[]),
            &body,
        )),
    )
        .into_response()
}

fn invalid() -> Response {
    let w = herald_i18n::Words::shipped(herald_i18n::DEFAULT);
    (
        StatusCode::FORBIDDEN,
        Html(crate::unsubscribe::page(
            &w.text("link-invalid-title", &[]),
            &crate::unsubscribe::escape(&w.text("confirm-invalid", &[])),
        )),
    )
        .into_response()
}

/// `POST /api/v1/lists/<list>/held?reason=…&from=…` with the raw message as the body: a post held
/// on another list server, held here too (`herald import mailman3`). The duplicate
/// check applies, so the same held post sent twice stays one.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct HoldImported {
    #[param(min_length = 1, max_length = 256)]
    reason: String,
    #[serde(default)]
    #[param(format = Email)]
    from: Option<String>,
}

/// Longest imported hold reason, in characters (it is shown to moderators).
const MAX_IMPORTED_REASON_CHARS: usize = 256;

#[utoipa::path(
    post,
    path = "/lists/{list}/held",
    tag = "held",
    params(("list" = String, Path, description = "The list's posting address", format = Email), HoldImported),
    request_body(content = crate::schema::RawBytes, content_type = "message/rfc822"),
    responses((status = 202, description = "Held for moderation", body = herald_api_types::Injected), crate::schema::Problems)
)]
pub async fn hold_imported(
    State(s): St,
    Path(list): Path<String>,
    Query(q): Query<HoldImported>,
    body: bytes::Bytes,
) -> Result<(StatusCode, Json<herald_api_types::Injected>), ApiError> {
    let list = crate::admin::find_list_pub(&s, &list).await?;
    if body.is_empty() {
        return Err(ApiError::BadRequest("the message is empty".into()));
    }
    let reason: String = q
        .reason
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_IMPORTED_REASON_CHARS)
        .collect();
    let from = match q.from.as_deref().filter(|f| !f.is_empty()) {
        Some(f) => {
            Some(Address::parse(f).map_err(|e| ApiError::BadRequest(format!("from {f:?}: {e}")))?)
        }
        None => None,
    };
    let id = s
        .injector
        .hold_imported(list.address, from, reason, body)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(herald_api_types::Injected {
            post: id.to_string(),
        }),
    ))
}
