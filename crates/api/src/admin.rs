//! Admin handlers: lists, members, CSV import, post injection, progress, queue, status, metrics.
//! Directory calls block (SQLite), so each runs on the blocking pool. Members change through
//! the member lifecycle (`herald_lists::Membership`), never the directory directly.

use crate::extract::{Json, Path, Query};
use crate::views;
use crate::{ApiError, ApiState};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use bytes::Bytes;
use herald_api_types::{
    AddMember, CreateList, ImportReport, Injected, ListChanges, ListInfo, ListView, MemberView,
    MembersPage, PostSummary, QueueQuery, QueueSnapshot, Status,
};
use herald_directory::{Directory, DirectoryError, NewMember};
use herald_lists::{Door, Membership};
use herald_types::{List, MemberId, PostId};
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// Runs a directory operation on the blocking pool.
pub(crate) async fn dir<T, F>(s: &ApiState, f: F) -> Result<T, ApiError>
where
    F: FnOnce(&Directory) -> Result<T, DirectoryError> + Send + 'static,
    T: Send + 'static,
{
    let d = s.directory.clone();
    Ok(tokio::task::spawn_blocking(move || f(&d)).await??)
}

/// Runs `f` on the member lifecycle (the one writer of member state) in a blocking task.
pub(crate) async fn lifecycle<T, E, F>(s: &ApiState, f: F) -> Result<T, ApiError>
where
    F: FnOnce(&Membership) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Into<ApiError> + Send + 'static,
{
    let m = Membership::new(&s.directory);
    tokio::task::spawn_blocking(move || f(&m))
        .await?
        .map_err(Into::into)
}

use crate::error::parse_address;

async fn find_list(s: &ApiState, address: &str) -> Result<List, ApiError> {
    let address = parse_address("list", address)?;
    let shown = address.to_string();
    dir(s, move |d| d.list_by_address(&address))
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no such list: {shown}")))
}

/// [`find_list`] for sibling modules.
pub(crate) async fn find_list_pub(s: &ApiState, address: &str) -> Result<List, ApiError> {
    find_list(s, address).await
}

#[utoipa::path(
    get,
    path = "/lists",
    tag = "lists",
    responses((status = 200, description = "Every list with its member counts", body = Vec<ListView>), crate::schema::Problems)
)]
pub async fn lists(State(s): St) -> Result<Json<Vec<ListView>>, ApiError> {
    let views = dir(&s, |d| {
        d.lists()?
            .into_iter()
            .map(|list| {
                let members = d.member_counts(list.id)?;
                Ok(views::directory::list_view(&list, &members))
            })
            .collect::<Result<Vec<_>, DirectoryError>>()
    })
    .await?;
    let metrics = s.telemetry.metrics();
    let views = views
        .into_iter()
        .map(|mut v| {
            v.complaints = metrics.complaints(&v.list.address);
            v
        })
        .collect();
    Ok(Json(views))
}

#[utoipa::path(
    post,
    path = "/lists",
    tag = "lists",
    request_body = CreateList,
    responses((status = 201, description = "Created", body = ListInfo), crate::schema::Problems)
)]
pub async fn create_list(
    State(s): St,
    Json(req): Json<CreateList>,
) -> Result<(StatusCode, Json<ListInfo>), ApiError> {
    let address = parse_address("address", &req.address)?;
    let list = dir(&s, move |d| d.create_list(&address, &req.settings)).await?;
    Ok((StatusCode::CREATED, Json(views::directory::list(&list))))
}

#[utoipa::path(
    get,
    path = "/lists/{list}",
    tag = "lists",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    responses((status = 200, description = "The list, its settings and counts", body = ListView), crate::schema::Problems)
)]
pub async fn show_list(State(s): St, Path(list): Path<String>) -> Result<Json<ListView>, ApiError> {
    let list = find_list(&s, &list).await?;
    let id = list.id;
    let members = dir(&s, move |d| d.member_counts(id)).await?;
    let mut view = views::directory::list_view(&list, &members);
    view.complaints = s.telemetry.metrics().complaints(&view.list.address);
    Ok(Json(view))
}

/// Changes some of a list's settings: the body is a JSON object of setting names and new
/// values (`{"from_rewrite": "always"}`); the others keep their values. Unknown names are
/// refused (a typo must not silently do nothing).
#[utoipa::path(
    patch,
    path = "/lists/{list}",
    tag = "lists",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    request_body(content = herald_types::ListSettings, description = "Any subset of the settings, by their `list show` names"),
    responses((status = 200, description = "The list as changed", body = ListInfo), crate::schema::Problems)
)]
pub async fn update_list(
    State(s): St,
    Path(list): Path<String>,
    Json(changes): Json<ListChanges>,
) -> Result<Json<ListInfo>, ApiError> {
    let list = find_list(&s, &list).await?;
    let settings = merge_settings(&list.settings, changes)?;
    let id = list.id;
    let updated = dir(&s, move |d| d.update_list(id, &settings)).await?;
    Ok(Json(views::directory::list(&updated)))
}

/// `current` with `changes` (setting names and JSON values) merged in; unknown names and
/// values of the wrong type are refused. The API's PATCH and the web settings form share it.
pub(crate) fn merge_settings(
    current: &herald_types::ListSettings,
    changes: ListChanges,
) -> Result<herald_types::ListSettings, ApiError> {
    let mut merged = match serde_json::to_value(current) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => return Err(ApiError::Internal("settings do not serialize".into())),
    };
    for (key, value) in changes {
        if !merged.contains_key(&key) {
            return Err(ApiError::BadRequest(format!(
                "unknown list setting {key:?}"
            )));
        }
        merged.insert(key, value);
    }
    serde_json::from_value(serde_json::Value::Object(merged))
        .map_err(|e| ApiError::BadRequest(format!("invalid settings: {e}")))
}

#[utoipa::path(
    delete,
    path = "/lists/{list}",
    tag = "lists",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    responses((status = 204, description = "Deleted"), crate::schema::Problems)
)]
pub async fn delete_list(State(s): St, Path(list): Path<String>) -> Result<StatusCode, ApiError> {
    let address = parse_address("list", &list)?;
    let a = address.clone();
    match dir(&s, move |d| d.delete_list(&a)).await? {
        true => {
            // Roles on the list go with it: a list created again at the address must not
            // inherit the old owners and moderators.
            let accounts = s.accounts.clone();
            let dropped =
                tokio::task::spawn_blocking(move || accounts.remove_list_roles(&address)).await??;
            tracing::info!(%list, roles = dropped, "list deleted");
            Ok(StatusCode::NO_CONTENT)
        }
        false => Err(ApiError::NotFound(format!("no such list: {list}"))),
    }
}

/// Members in id order, `limit` (≤ 10,000) at a time after member id `after`.
#[utoipa::path(
    get,
    path = "/lists/{list}/members",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email), MembersPage),
    responses((status = 200, description = "One page of members in id order", body = Vec<MemberView>), crate::schema::Problems)
)]
pub async fn members(
    State(s): St,
    Path(list): Path<String>,
    Query(page): Query<MembersPage>,
) -> Result<Json<Vec<MemberView>>, ApiError> {
    let list = find_list(&s, &list).await?;
    let after = MemberId(page.after.unwrap_or(0));
    let limit = page.limit.unwrap_or(1000).clamp(1, 10_000);
    let members = dir(&s, move |d| {
        d.members_page(list.id, after, MemberId(i64::MAX), limit, false)
    })
    .await?;
    Ok(Json(members.iter().map(views::directory::member).collect()))
}

#[utoipa::path(
    post,
    path = "/lists/{list}/members",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    request_body = AddMember,
    responses((status = 201, description = "Added", body = MemberView), crate::schema::Problems)
)]
pub async fn add_member(
    State(s): St,
    Path(list): Path<String>,
    Json(req): Json<AddMember>,
) -> Result<(StatusCode, Json<MemberView>), ApiError> {
    let list = find_list(&s, &list).await?;
    let new = NewMember {
        address: parse_address("address", &req.address)?,
        display_name: req.name,
        fields: req.fields,
    };
    let consent = herald_directory::Consent::now(herald_directory::ConsentSource::Admin, None);
    let member = lifecycle(&s, move |m| {
        m.subscribe(list.id, &new, &consent, Door::Admin)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(views::directory::member(&member))))
}

#[utoipa::path(
    get,
    path = "/lists/{list}/members/{member}",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email), ("member" = String, Path, description = "The member's address", format = Email)),
    responses((status = 200, description = "The member", body = MemberView), crate::schema::Problems)
)]
pub async fn show_member(
    State(s): St,
    Path((list, member)): Path<(String, String)>,
) -> Result<Json<MemberView>, ApiError> {
    let list = find_list(&s, &list).await?;
    let address = parse_address("member", &member)?;
    dir(&s, move |d| d.member(list.id, &address))
        .await?
        .map(|m| Json(views::directory::member(&m)))
        .ok_or_else(|| ApiError::NotFound(format!("{member} is not a member")))
}

#[utoipa::path(
    delete,
    path = "/lists/{list}/members/{member}",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email), ("member" = String, Path, description = "The member's address", format = Email)),
    responses((status = 204, description = "Removed"), crate::schema::Problems)
)]
pub async fn remove_member(
    State(s): St,
    Path((list, member)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let list = find_list(&s, &list).await?;
    let address = parse_address("member", &member)?;
    match lifecycle(&s, move |m| m.unsubscribe(list.id, &address, Door::Admin)).await? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(ApiError::NotFound(format!("{member} is not a member"))),
    }
}

/// Imports a CSV document (header row required). The CLI sends big files in chunks so it can
/// show progress; line numbers in the report are relative to the chunk.
#[utoipa::path(
    post,
    path = "/lists/{list}/import",
    tag = "members",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    request_body(content = String, content_type = "text/csv"),
    responses((status = 200, description = "Rows added, and the rejected rows with their reasons", body = ImportReport), crate::schema::Problems)
)]
pub async fn import(
    State(s): St,
    Path(list): Path<String>,
    body: Bytes,
) -> Result<Json<ImportReport>, ApiError> {
    let list = find_list(&s, &list).await?;
    let report = lifecycle(&s, move |m| {
        m.import_from_csv(list.id, body.as_ref(), &mut |_| {})
    })
    .await?;
    Ok(Json(views::directory::import(&report)))
}

/// Accepts a raw RFC 5322 message as an approved post to the list.
#[utoipa::path(
    post,
    path = "/lists/{list}/posts",
    tag = "posts",
    params(("list" = String, Path, description = "The list's posting address", format = Email)),
    request_body(content = crate::schema::RawBytes, content_type = "message/rfc822"),
    responses((status = 202, description = "Spooled for fan-out", body = Injected), crate::schema::Problems)
)]
pub async fn inject(
    State(s): St,
    Path(list): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<Injected>), ApiError> {
    let list = find_list(&s, &list).await?;
    if body.is_empty() {
        return Err(ApiError::BadRequest("the message is empty".into()));
    }
    let id = s.injector.inject(list.address, body).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Injected {
            post: id.to_string(),
        }),
    ))
}

#[utoipa::path(
    get,
    path = "/posts",
    tag = "posts",
    responses((status = 200, description = "Posts in progress", body = Vec<PostSummary>), crate::schema::Problems)
)]
pub async fn posts(State(s): St) -> Json<Vec<PostSummary>> {
    Json(views::telemetry::posts(&s.telemetry.all_progress()))
}

#[utoipa::path(
    get,
    path = "/posts/{post}",
    tag = "posts",
    params(("post" = String, Path, description = "The post id: up to 16 hex digits", pattern = "^[0-9A-Fa-f]{1,16}$")),
    responses((status = 200, description = "One post's progress", body = PostSummary), crate::schema::Problems)
)]
pub async fn post_progress(
    State(s): St,
    Path(post): Path<String>,
) -> Result<Json<PostSummary>, ApiError> {
    let id: PostId = post.parse().map_err(|_| ApiError::Invalid {
        field: "post".into(),
        reason: format!("not a post id: {post:?}"),
    })?;
    s.telemetry
        .progress(id)
        .map(|p| Json(views::telemetry::post(&p)))
        .ok_or_else(|| ApiError::NotFound(format!("post {post} is not known to this server")))
}

#[utoipa::path(
    get,
    path = "/queue",
    tag = "live",
    params(QueueQuery),
    responses((status = 200, description = "The scheduler's queue by destination", body = QueueSnapshot), crate::schema::Problems)
)]
pub async fn queue(
    State(s): St,
    Query(q): Query<QueueQuery>,
) -> Result<Json<QueueSnapshot>, ApiError> {
    let req = herald_scheduler::SnapshotRequest {
        limit: q.limit,
        stragglers: q.stragglers,
    };
    s.scheduler
        .queue_snapshot_with(req)
        .await
        .map(|q| Json(views::scheduler::queue(&q)))
        .map_err(|e| ApiError::Internal(e.to_string()))
}

#[utoipa::path(
    get,
    path = "/status",
    tag = "status",
    responses((status = 200, description = "The server at a glance; during a store outage too, with `store_error` set", body = Status), crate::schema::Problems)
)]
pub async fn status(State(s): St) -> Result<Json<Status>, ApiError> {
    // The store down (PostgreSQL restarting) is when an operator looks here most: answer 200
    // with what this node knows and the store marked down, not a 503 that hides the queue and
    // the spool. Only the store's unavailability is answered so; other errors stay errors.
    let counts = dir(&s, |d| {
        let lists = d.lists()?;
        let mut members = 0;
        for l in &lists {
            members += d.member_counts(l.id)?.total;
        }
        Ok((lists.len(), members))
    })
    .await;
    let (mut store_error, (lists, members)) = match counts {
        Ok(c) => (None, c),
        Err(ApiError::Unavailable(why)) => (Some(why), (0, 0)),
        Err(e) => return Err(e),
    };
    let q = s.scheduler.queue_snapshot().await.unwrap_or_default();
    let mut posts = s.telemetry.all_progress();
    posts.truncate(20);
    // One store call is enough to know it is down (each would wait for its connect timeout).
    let nodes = match store_error {
        Some(_) => Vec::new(),
        None => match cluster_status(&s).await {
            Ok(n) => n,
            Err(ApiError::Unavailable(why)) => {
                store_error = Some(why);
                Vec::new()
            }
            Err(e) => return Err(e),
        },
    };
    Ok(Json(Status {
        version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_secs: s.started.elapsed().as_secs(),
        lists: views::count(lists),
        members,
        queued: views::count(q.queued),
        connections: views::count(q.connections),
        destinations: views::count(q.destinations_with_work),
        spool: views::spool::stats(&s.spool.stats()),
        posts: views::telemetry::posts(&posts),
        nodes,
        store_error,
    }))
}

/// Every cluster node as this node judges it (the store read off the async threads).
async fn cluster_status(s: &ApiState) -> Result<Vec<herald_api_types::NodeView>, ApiError> {
    match &s.cluster {
        Some(c) => Ok(c.nodes().await?),
        None => Ok(Vec::new()),
    }
}

/// `GET /api/v1/backup`: a consistent copy of this running server as a tar stream (see
/// `herald-backup`). The cut is taken before the first byte is sent, so a failure to take it is
/// an error status; a failure later ends the stream without its manifest, which the client
/// refuses as incomplete.
#[utoipa::path(
    get,
    path = "/backup",
    tag = "status",
    responses((status = 200, description = "A consistent backup as a tar stream, manifest last", body = crate::schema::RawBytes, content_type = "application/x-tar"), crate::schema::Problems)
)]
pub async fn backup(State(s): St) -> Result<axum::response::Response, ApiError> {
    // A backup without the directory would restore as a server with no lists: refused, with
    // what to do instead, rather than taken silently incomplete.
    if s.directory.store_kind() == herald_directory::StoreKind::Postgres {
        return Err(ApiError::Unavailable(
            "the directory is in PostgreSQL ([store] url): back it up with pg_dump; \
             herald backup copies a SQLite directory only"
                .into(),
        ));
    }
    let chunks = s.backup.take().await?;
    let body = futures_util::stream::unfold(chunks, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-tar"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

pub async fn metrics(State(s): St) -> impl IntoResponse {
    let mut scrape = herald_telemetry::exposition::Registry::default();
    herald_telemetry::exposition::gauge_at(
        &mut scrape,
        "herald_ready",
        "1 when GET /readyz answers 200 (the server takes mail); 0 while it answers 503 (the spool refuses posts, the store is unreachable or a listener cannot accept).",
        i64::from(s.readiness.reasons().is_empty()),
    );
    crate::spool_metrics::register(&s.spool.stats(), &mut scrape);
    crate::postmaster::register_gauge(&s.spool, &mut scrape);
    crate::spool_metrics::register_channels(&s.scheduler.channels(), &mut scrape);
    crate::spool_metrics::register_intake(&s.intake_backlog, &mut scrape);
    if let Some(web) = s.archive.clone() {
        // The count is a blocking read of the store: off the async threads.
        let w = web.clone();
        if let Ok((messages, Some(path))) = tokio::task::spawn_blocking(move || w.scrape()).await {
            herald_archive::metrics::register(web.writer_stats(), messages, &path, &mut scrape);
        }
    }
    // What the stages add (digests sent, egress sources, cluster nodes, the shared fan-out's
    // shards, shared knowledge's exchanges, …), each in its own terms.
    for stage in &s.metrics {
        stage.register_metrics(&mut scrape).await;
    }
    // Audit events per action since the server started; the actions are the route
    // table's fixed words, so the label set is bounded.
    herald_telemetry::exposition::rows(
        &mut scrape,
        "herald_audit_events_total",
        "Administrative actions recorded in the audit log since the server started, per action.",
        s.accounts
            .audit_counts()
            .into_iter()
            .map(|(action, n)| ([("action", action)], n)),
        |c: &herald_telemetry::exposition::Counter, n| {
            c.inc_by(n);
        },
    );
    herald_telemetry::exposition::counter_at(
        &mut scrape,
        "herald_store_errors_total",
        "Connects and statements that failed because the shared store (PostgreSQL) could not be reached; 0 on SQLite.",
        s.directory.store_errors(),
    );
    let mut out = String::with_capacity(16 * 1024);
    s.telemetry.encode_metrics(&scrape, &mut out);
    (
        [(
            header::CONTENT_TYPE,
            herald_telemetry::exposition::CONTENT_TYPE,
        )],
        out,
    )
}
