//! `/admin/lists/<list>/members`: search (address or name prefix, `herald_directory`'s
//! `search_members`: one index range scan per page, keyset `after=`, no COUNT, no OFFSET),
//! add, per-member actions (remove, enable, disable, reset the bounce score, delivery mode —
//! the JSON routes' own functions), CSV import (multipart upload → background job → progress
//! page → report) and CSV export (streamed a page at a time).
//!
//! SECURITY: the member in a path and the address in a form go through `Address::parse`;
//! the search prefix is checked by the directory (length, control characters); the upload is
//! bounded by `MAX_IMPORT_BYTES` while it is read, and parsed by the directory's CSV importer
//! (its own per-line and per-field limits). The export neutralizes names a spreadsheet would
//! run as formulas.

use super::{ctx, error_page, html, list_key, see, Done};
use crate::admin::{dir, find_list_pub, lifecycle};
use crate::auth::Caller;
use crate::lists_ops::{detail, MemberAction};
use crate::{views, ApiError, ApiState};
use axum::extract::{Form, Multipart, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use herald_directory::{Consent, ConsentSource, NewMember, SearchBy};
use herald_lists::{Door, ImportError, Membership};
use herald_types::{Address, DeliveryMode, MemberId};
use herald_webadmin::layout::{enc, list_href};
use herald_webadmin::members::{AddForm, MemberLine, Search, MAX_IMPORT_BYTES, PAGE_SIZE};
use std::sync::atomic::Ordering;
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// `?q=&by=&after=&done=`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct MembersQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    by: String,
    after: Option<i64>,
    done: Option<String>,
}

fn by_of(word: &str) -> SearchBy {
    match word {
        "name" => SearchBy::Name,
        _ => SearchBy::Address,
    }
}

fn members_url(list: &str, q: &str, done: &str) -> String {
    format!("{}/members?q={}&done={done}", list_href(list), enc(q))
}

/// Renders the page for `search` (a page after `after`), with `add` as the add form.
async fn render(
    s: &ApiState,
    caller: &Caller,
    list: &herald_types::List,
    (search, after): (Search, Option<i64>),
    add: &AddForm,
    done: &Done,
    status: StatusCode,
) -> Response {
    let key = herald_accounts::key(&list.address);
    let (id, by, q) = (list.id, by_of(&search.by), search.q.clone());
    // One more than a page: whether there is a next one, without counting.
    let found = dir(s, move |d| {
        d.search_members(id, by, &q, after.map(MemberId), PAGE_SIZE + 1)
    })
    .await;
    let (mut rows, mut search) = (Vec::new(), search);
    match found {
        Ok(r) => rows = r,
        Err(e @ (ApiError::BadRequest(_) | ApiError::Invalid { .. })) => {
            search.error = Some(e.to_string())
        }
        Err(e) => return error_page(caller, e),
    }
    let next = (rows.len() > PAGE_SIZE).then(|| rows[PAGE_SIZE - 1].member.id.0);
    rows.truncate(PAGE_SIZE);
    let lines: Vec<MemberLine> = rows
        .iter()
        .map(|f| MemberLine {
            member: views::directory::member(&f.member),
            delivery: f.delivery,
            language: f.language.clone(),
        })
        .collect();
    let status = if search.error.is_some() {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        status
    };
    let page = herald_webadmin::members::members_page(
        &ctx(caller, done),
        &key,
        &search,
        &lines,
        next,
        add,
    );
    html(status, page)
}

/// `GET /admin/lists/<list>/members`.
pub async fn page(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(list): Path<String>,
    Query(q): Query<MembersQuery>,
) -> Response {
    let l = match find_list_pub(&s, &list).await {
        Ok(l) => l,
        Err(e) => return error_page(&caller, e),
    };
    let search = Search {
        q: q.q.trim().to_string(),
        by: if q.by == "name" {
            "name".into()
        } else {
            "address".into()
        },
        error: None,
    };
    let done = Done { done: q.done };
    let add = AddForm::default();
    render(
        &s,
        &caller,
        &l,
        (search, q.after),
        &add,
        &done,
        StatusCode::OK,
    )
    .await
}

#[derive(Debug, serde::Deserialize)]
pub struct AddFields {
    #[serde(default)]
    address: String,
    #[serde(default)]
    name: String,
}

/// `POST /admin/lists/<list>/members`: adds one member (consent: an administrator).
pub async fn add(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(list): Path<String>,
    Form(f): Form<AddFields>,
) -> Response {
    let l = match find_list_pub(&s, &list).await {
        Ok(l) => l,
        Err(e) => return error_page(&caller, e),
    };
    let refused = |error: String| AddForm {
        address: f.address.clone(),
        name: f.name.clone(),
        error: Some(error),
    };
    let form = match Address::parse(f.address.trim()) {
        Err(e) => refused(format!("This is not an e-mail address: {e}.")),
        Ok(address) => {
            let name = Some(f.name.trim().to_string()).filter(|n| !n.is_empty());
            let new = NewMember {
                address: address.clone(),
                display_name: name,
                fields: Default::default(),
            };
            let consent = Consent::now(ConsentSource::Admin, None);
            let id = l.id;
            match lifecycle(&s, move |m| m.subscribe(id, &new, &consent, Door::Admin)).await {
                Ok(_) => {
                    let key = herald_accounts::key(&l.address);
                    return see(members_url(&key, &address.to_string(), "added"));
                }
                Err(ApiError::Internal(d)) => return error_page(&caller, ApiError::Internal(d)),
                Err(e) => refused(e.to_string()),
            }
        }
    };
    let search = Search {
        by: "address".into(),
        ..Search::default()
    };
    let none = Done::default();
    render(
        &s,
        &caller,
        &l,
        (search, None),
        &form,
        &none,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct ActFields {
    delivery: Option<String>,
    /// `language`: a shipped code, or empty for the list's.
    language: Option<String>,
    /// `bounces`: go back to the bounces page afterwards.
    back: Option<String>,
}

/// `POST /admin/lists/<list>/members/<member>/<verb>`.
pub async fn act(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path((list, member, verb)): Path<(String, String, String)>,
    Form(f): Form<ActFields>,
) -> Response {
    let key = match list_key(&list) {
        Ok(k) => k,
        Err(e) => return error_page(&caller, e),
    };
    let (action, done) = match verb.as_str() {
        "enable" => (MemberAction::Enable, "enabled"),
        "disable" => (MemberAction::Disable, "disabled"),
        "reset-bounces" => (MemberAction::ResetScore, "reset"),
        "delivery" => match f.delivery.as_deref().and_then(DeliveryMode::parse) {
            Some(mode) => (
                MemberAction::Update {
                    delivery: Some(mode),
                    moderated: None,
                    language: None,
                },
                "delivery",
            ),
            None => {
                let e = ApiError::BadRequest("delivery: not a delivery mode".into());
                return error_page(&caller, e);
            }
        },
        "language" => (
            MemberAction::Update {
                delivery: None,
                moderated: None,
                language: Some(f.language.unwrap_or_default()),
            },
            "language",
        ),
        "remove" => return remove(&s, &caller, &list, &key, &member).await,
        _ => return error_page(&caller, ApiError::NotFound(format!("no action {verb:?}"))),
    };
    match detail(&s, &list, &member, action).await {
        Ok(_) if f.back.as_deref() == Some("bounces") => {
            see(format!("{}/bounces?done={done}", list_href(&key)))
        }
        Ok(_) => see(members_url(&key, &member, done)),
        Err(e) => error_page(&caller, e),
    }
}

async fn remove(s: &ApiState, caller: &Caller, list: &str, key: &str, member: &str) -> Response {
    let l = match find_list_pub(s, list).await {
        Ok(l) => l,
        Err(e) => return error_page(caller, e),
    };
    let address = match Address::parse(member) {
        Ok(a) => a,
        Err(e) => return error_page(caller, ApiError::BadRequest(format!("member: {e}"))),
    };
    match lifecycle(s, move |m| m.unsubscribe(l.id, &address, Door::Admin)).await {
        Ok(true) => see(members_url(key, "", "removed")),
        Ok(false) => error_page(
            caller,
            ApiError::NotFound(format!("{member} is not a member")),
        ),
        Err(e) => error_page(caller, e),
    }
}

/// `POST /admin/lists/<list>/import?csrf=…` (multipart, field `file`): reads the upload
/// (bounded), starts the import in the background and sends the browser to its progress page.
pub async fn import(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(list): Path<String>,
    mut form: Multipart,
) -> Response {
    let l = match find_list_pub(&s, &list).await {
        Ok(l) => l,
        Err(e) => return error_page(&caller, e),
    };
    let bytes = match read_upload(&mut form).await {
        Ok(b) => b,
        Err((status, msg)) => {
            let page = herald_webadmin::layout::error_page(&ctx(&caller, &Done::default()), &msg);
            return html(status, page);
        }
    };
    let key = herald_accounts::key(&l.address);
    // Rows in the file: its lines less the header (blank lines are skipped, so an estimate).
    let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    let total = lines.max(1).saturating_sub(1).max(1);
    let Some((id, job)) = s.webadmin.start(key.clone(), total) else {
        let e = ApiError::Unavailable("too many imports are running; try again later".into());
        return error_page(&caller, e);
    };
    let m = Membership::new(&s.directory);
    let list_id = l.id;
    tokio::task::spawn_blocking(move || {
        let done = &job.done;
        let result = m.import_from_csv(list_id, bytes.as_slice(), &mut |n| {
            done.store(n, Ordering::Relaxed);
        });
        let outcome = match result {
            Ok(r) => Ok(views::directory::import(&r)),
            Err(e @ (ImportError::Invalid(_) | ImportError::NoSuchList(_))) => Err(e.to_string()),
            Err(e) => {
                tracing::error!(error = %e, "web import failed");
                Err("the import failed on the server (see its log)".to_string())
            }
        };
        if let Ok(mut o) = job.outcome.lock() {
            *o = Some(outcome);
        }
    });
    see(format!("{}/import/{id}", list_href(&key)))
}

/// The `file` field of the upload, at most [`MAX_IMPORT_BYTES`].
async fn read_upload(form: &mut Multipart) -> Result<Vec<u8>, (StatusCode, String)> {
    let bad = |m: String| (StatusCode::BAD_REQUEST, m);
    while let Some(mut field) = form
        .next_field()
        .await
        .map_err(|e| bad(format!("The upload could not be read: {e}.")))?
    {
        if field.name() != Some("file") {
            continue;
        }
        let mut out = Vec::new();
        while let Some(chunk) = field
            .chunk()
            .await
            .map_err(|e| bad(format!("The upload could not be read: {e}.")))?
        {
            if out.len() + chunk.len() > MAX_IMPORT_BYTES {
                return Err((
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "The file is larger than {} MiB: split it, or use herald member import.",
                        MAX_IMPORT_BYTES / (1024 * 1024)
                    ),
                ));
            }
            out.extend_from_slice(&chunk);
        }
        if out.is_empty() {
            return Err(bad("The file is empty.".into()));
        }
        return Ok(out);
    }
    Err(bad("Choose a CSV file to import.".into()))
}

/// `GET /admin/lists/<list>/import/<job>`.
pub async fn progress(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path((list, job)): Path<(String, u64)>,
) -> Response {
    let key = match list_key(&list) {
        Ok(k) => k,
        Err(e) => return error_page(&caller, e),
    };
    match s.webadmin.get(job).filter(|j| j.list == key) {
        Some(j) => {
            let page = herald_webadmin::members::import_page(
                &ctx(&caller, &Done::default()),
                &key,
                &j.progress(),
            );
            html(StatusCode::OK, page)
        }
        None => error_page(&caller, ApiError::NotFound(format!("no import {job} here"))),
    }
}

/// Members per export query (the search page's bound).
const EXPORT_PAGE: usize = herald_directory::MAX_SEARCH_PAGE;

/// A name a spreadsheet would run as a formula (`=`, `+`, `-`, `@`, tab, CR first) gets a `'`
/// in front (OWASP's advice for CSV injection); addresses are left as they are.
fn neutralized(name: &str) -> String {
    match name.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{name}"),
        _ => name.to_string(),
    }
}

fn csv_rows(rows: &[herald_directory::FoundMember], header: bool) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::with_capacity(rows.len() * 48));
    // Writing into a Vec cannot fail but for a bug; a failed row is left out, not a panic.
    if header {
        let _ = w.write_record(["email", "name"]);
    }
    for f in rows {
        let name = neutralized(f.member.display_name.as_deref().unwrap_or(""));
        let _ = w.write_record([f.member.address.to_string(), name]);
    }
    w.into_inner().unwrap_or_default()
}

/// `GET /admin/lists/<list>/export`: `email,name` in address order (the importer's format, so
/// the file imports back as it is), a page of [`EXPORT_PAGE`] members per query, streamed.
pub async fn export(
    State(s): St,
    Extension(caller): Extension<Caller>,
    Path(list): Path<String>,
) -> Response {
    let l = match find_list_pub(&s, &list).await {
        Ok(l) => l,
        Err(e) => return error_page(&caller, e),
    };
    let (d, id) = (s.directory.clone(), l.id);
    let start: Option<Option<MemberId>> = Some(None);
    let body = futures_util::stream::unfold(start, move |cursor| {
        let d = d.clone();
        async move {
            let after = cursor?;
            let page = tokio::task::spawn_blocking(move || {
                d.search_members(id, SearchBy::Address, "", after, EXPORT_PAGE)
            })
            .await;
            let rows = match page {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "export stopped");
                    return None;
                }
                Err(e) => {
                    tracing::error!(error = %e, "export stopped");
                    return None;
                }
            };
            let next = (rows.len() == EXPORT_PAGE)
                .then(|| rows.last().map(|f| f.member.id))
                .flatten();
            let chunk = csv_rows(&rows, after.is_none());
            Some((
                Ok::<_, std::io::Error>(bytes::Bytes::from(chunk)),
                next.map(Some),
            ))
        }
    });
    let file = format!(
        "attachment; filename=\"{}-members.csv\"",
        l.address
            .local()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
            (header::CONTENT_DISPOSITION, file),
            (header::CACHE_CONTROL, "no-store".to_string()),
        ],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_are_neutralized_and_quotes_escaped() {
        assert_eq!(neutralized("=HYPERLINK(\"x\")"), "'=HYPERLINK(\"x\")");
        assert_eq!(neutralized("-1"), "'-1");
        assert_eq!(neutralized("Ann"), "Ann");
        let m = herald_directory::FoundMember {
            member: herald_types::Member {
                id: MemberId(1),
                list_id: herald_types::ListId(1),
                address: Address::parse("a@x.test").expect("a"),
                display_name: Some("O\"Neil, \"Bob\"".into()),
                status: herald_types::MemberStatus::Enabled,
                fields: Default::default(),
            },
            delivery: DeliveryMode::Regular,
            language: None,
        };
        let out = String::from_utf8(csv_rows(&[m], true)).expect("utf8");
        assert_eq!(out, "email,name\na@x.test,\"O\"\"Neil, \"\"Bob\"\"\"\n");
    }
}
