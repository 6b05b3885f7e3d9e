//! `/api/v1/people/<address>` (GDPR articles 15 and 17): `GET` gives everything
//! Herald holds about an address — the directory's rows (memberships, names, fields, consent,
//! bounce history, suppression entries, bans), their posts in the archive, and the recent
//! delivery-log lines that name it; `DELETE` erases it from the directory and removes their
//! archived posts (each leaving a Message-ID tombstone), after which only the directory's
//! erasure hash remains and every add path refuses the address.
//!
//! Erasure also reaches `accounts.db`: the address's account (if any) is removed and every
//! audit row naming it names its keyed hash instead.
//!
//! What erasure cannot reach is said in docs/security.md: delivery-log files already written (they
//! are removed after `[log] delivery_log_keep_days`, or by the operator's logrotate) and backups
//! taken before.
//!
//! SECURITY: admin-only (the router's guard: not a public path). The address is validated by
//! `Address::parse`; the log is read newest first (the live file's tail, then rotated files,
//! gzip'd or not), bounded in bytes and lines.

use crate::extract::{Json, Path};
use crate::{ApiError, ApiState};
use axum::extract::State;
use herald_api_types::people::{
    PersonBounce, PersonErased, PersonExport, PersonMembership, PersonPost, PersonScore,
    PersonSuppression,
};
use herald_directory::PersonRecord;
use herald_lists::Membership;
use herald_types::{Address, ListId};
use std::collections::HashMap;
use std::sync::Arc;

type St = State<Arc<ApiState>>;

/// About how much of the delivery log is searched, newest first: the live file's tail, then
/// whole rotated files until this much has been read.
const LOG_TAIL_BYTES: u64 = 64 << 20;
/// Delivery-log lines returned at most (the newest).
const MAX_LOG_LINES: usize = 1000;
/// Archived posts listed (and erased per request) at most.
const MAX_POSTS: usize = 10_000;

fn parse(address: &str) -> Result<Address, ApiError> {
    crate::error::parse_address("address", address)
}

/// `GET /api/v1/people/<address>`.
#[utoipa::path(
    get,
    path = "/people/{address}",
    tag = "people",
    params(("address" = String, Path, description = "The address", format = Email)),
    responses((status = 200, description = "Everything held about the address (GDPR art. 15)", body = PersonExport), crate::schema::Problems)
)]
pub async fn export(
    State(s): St,
    Path(address): Path<String>,
) -> Result<Json<PersonExport>, ApiError> {
    let address = parse(&address)?;
    let dir = s.directory.clone();
    let a = address.clone();
    let record = tokio::task::spawn_blocking(move || dir.person(&a)).await??;
    let ids = record
        .suppressions
        .iter()
        .map(|x| x.list)
        .chain(record.bans.iter().map(|b| b.list))
        .flatten()
        .collect();
    let lists = list_names(&s, ids).await?;
    let data_dir = s.data_dir.clone();
    let archive_on = s.archive.is_some();
    let a = address.to_string();
    let (posts, log) = tokio::task::spawn_blocking(move || {
        let posts = match archive_on {
            true => archived_posts(&data_dir, &a)?,
            false => Vec::new(),
        };
        Ok::<_, ApiError>((posts, log_lines(&data_dir.join("log/delivery.log"), &a)))
    })
    .await??;
    Ok(Json(view(record, &lists, posts, log)))
}

/// `DELETE /api/v1/people/<address>`.
#[utoipa::path(
    delete,
    path = "/people/{address}",
    tag = "people",
    params(("address" = String, Path, description = "The address", format = Email)),
    responses((status = 200, description = "Erased everywhere but a hashed suppression entry (art. 17)", body = PersonErased), crate::schema::Problems)
)]
pub async fn erase(
    State(s): St,
    Path(address): Path<String>,
) -> Result<Json<PersonErased>, ApiError> {
    let address = parse(&address)?;
    let m = Membership::new(&s.directory);
    let a = address.clone();
    let erased = tokio::task::spawn_blocking(move || m.erase(&a)).await??;
    let data_dir = s.data_dir.clone();
    let archive_on = s.archive.is_some();
    let a = address.to_string();
    let removed = tokio::task::spawn_blocking(move || match archive_on {
        true => erase_posts(&data_dir, &a),
        false => Ok(0),
    })
    .await??;
    // The audit log and the accounts store: the address leaves them too; the audit
    // rows stay with its keyed hash instead.
    let (accounts, a) = (s.accounts.clone(), address.clone());
    let audit_rows = tokio::task::spawn_blocking(move || accounts.erase_address(&a)).await??;
    tracing::info!(
        memberships = erased.memberships,
        audit_rows,
        archived_posts = removed,
        "person erased at the administrator's request"
    );
    Ok(Json(PersonErased {
        memberships: erased.memberships,
        bounce_events: erased.bounce_events,
        bounce_scores: erased.bounce_scores,
        suppressions: erased.suppressions,
        bans: erased.bans,
        archived_posts: removed,
    }))
}

/// The addresses of the lists suppression entries and bans name (they hold list ids).
async fn list_names(s: &ApiState, ids: Vec<ListId>) -> Result<HashMap<ListId, String>, ApiError> {
    let dir = s.directory.clone();
    Ok(tokio::task::spawn_blocking(move || {
        let mut names = HashMap::new();
        for id in ids {
            if let Some(l) = dir.list_by_id(id)? {
                names.insert(id, l.address.to_string());
            }
        }
        Ok::<_, herald_directory::DirectoryError>(names)
    })
    .await??)
}

fn archive_error(e: herald_archive::ArchiveError) -> ApiError {
    ApiError::Internal(format!("archive: {e}"))
}

fn archived_posts(data_dir: &std::path::Path, address: &str) -> Result<Vec<PersonPost>, ApiError> {
    let path = data_dir.join("archive.db");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let archive = herald_archive::Archive::open(&path).map_err(archive_error)?;
    Ok(archive
        .by_sender(address, MAX_POSTS)
        .map_err(archive_error)?
        .into_iter()
        .map(|(list, message_id, date_ms, subject)| PersonPost {
            list,
            message_id,
            date_ms,
            subject,
        })
        .collect())
}

fn erase_posts(data_dir: &std::path::Path, address: &str) -> Result<u64, ApiError> {
    let path = data_dir.join("archive.db");
    if !path.exists() {
        return Ok(0);
    }
    let mut archive = herald_archive::Archive::open(&path).map_err(archive_error)?;
    let now = i64::try_from(herald_types::unix_ms_now()).unwrap_or(i64::MAX);
    let mut removed = 0;
    for (list, mid, _, _) in archive
        .by_sender(address, MAX_POSTS)
        .map_err(archive_error)?
    {
        if archive.remove(&list, &mid, now).map_err(archive_error)? {
            removed += 1;
        }
    }
    Ok(removed)
}

/// The newest lines of the delivery log (live and rotated files) that name `<address>` (any
/// case). A missing or unreadable log gives none: the export still answers.
fn log_lines(path: &std::path::Path, address: &str) -> Vec<String> {
    let needle = format!("<{}>", address.to_lowercase());
    herald_telemetry::logfiles::matching_lines(path, LOG_TAIL_BYTES, MAX_LOG_LINES, |l| {
        l.to_lowercase().contains(&needle)
    })
}

fn view(
    r: PersonRecord,
    lists: &HashMap<ListId, String>,
    archived_posts: Vec<PersonPost>,
    delivery_log: Vec<String>,
) -> PersonExport {
    let list_of = |l: Option<ListId>| l.and_then(|id| lists.get(&id).cloned()).unwrap_or_default();
    PersonExport {
        address: r.address,
        memberships: r
            .memberships
            .into_iter()
            .map(|m| PersonMembership {
                list: m.list,
                member_id: m.member_id,
                display_name: m.display_name,
                fields: m.fields,
                disabled_reason: m.disabled_reason,
                delivery: m.delivery,
                skip_if_addressed: m.skip_if_addressed,
                consent_at_ms: m.consent.as_ref().map(|c| c.at_ms),
                consent_source: m.consent.as_ref().map(|c| c.source.as_str().to_string()),
                consent_client: m.consent.and_then(|c| c.client),
            })
            .collect(),
        bounce_events: r
            .bounce_events
            .into_iter()
            .map(|b| PersonBounce {
                list: b.list,
                at_ms: b.at_ms,
                kind: b.kind,
                status: b.status,
                diagnostic: b.diagnostic,
                source: b.source,
                score: b.score,
            })
            .collect(),
        bounce_scores: r
            .bounce_scores
            .into_iter()
            .map(|b| PersonScore {
                list: b.list,
                score: b.score,
                last_counted_ms: b.last_counted_ms,
            })
            .collect(),
        suppressions: r
            .suppressions
            .into_iter()
            .map(|x| PersonSuppression {
                list: list_of(x.list),
                reason: x.reason,
                source: x.source.as_str().to_string(),
                at_ms: x.at_ms,
            })
            .collect(),
        bans: r
            .bans
            .into_iter()
            .map(|b| PersonSuppression {
                list: list_of(b.list),
                reason: format!("ban {}", b.pattern),
                source: "ban".into(),
                at_ms: b.created_at_ms,
            })
            .collect(),
        archived_posts,
        delivery_log,
        erased_at_ms: r.erased_at_ms,
    }
}
