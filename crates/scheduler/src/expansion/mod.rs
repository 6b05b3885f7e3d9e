//! Fan-out expansion: render the post once, then read the list's members in pages and turn each
//! enabled member of the post's audience (within the post's member-id snapshot, minus those
//! already finished before a restart) into a job. The audience is a delivery mode: single posts
//! go to `regular` members only, a digest to the members of its digest mode. The job channel is bounded, so a million-member list is read only as fast
//! as the scheduler takes copies: memory stays bounded by the window, not the list.

use crate::messages::Report;
use crate::messages::{Job, PostCtx};
use herald_directory::Directory;
use herald_fanout::ListContext;
use herald_spool::{DoneSet, PostMeta};
use herald_types::{Member, MemberId, MemberStatus, PostId};
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::mpsc;

pub mod pending;
pub mod window;

/// What an expansion needs besides the post.
pub struct ExpandCtx {
    pub directory: Directory,
    pub list_ctx: ListContext,
    pub jobs: mpsc::Sender<Vec<Job>>,
    pub reports: mpsc::Sender<Report>,
    pub page_size: usize,
    /// Cross-post suppression (see [`Suppress`]); `None` disables it.
    pub dedup: Option<herald_spool::DedupStore>,
    /// Copies of one post queued at most: a floor that grows with the post's recipient domains
    /// (see [`window`]).
    pub post_window: window::WindowRule,
    /// Where expansion records how long it waited for room in the job channel.
    pub telemetry: herald_telemetry::Telemetry,
}

/// Why a post could not be expanded. The post stays in the spool (nothing is lost); the error is
/// logged for the operator.
#[derive(Debug, thiserror::Error)]
pub enum ExpandError {
    #[error("post {post}: list {list} no longer exists")]
    ListGone { post: PostId, list: String },
    #[error("post {post}: cannot render: {source}")]
    Render {
        post: PostId,
        source: herald_fanout::FanoutError,
    },
    #[error("post {post}: directory: {source}")]
    Directory {
        post: PostId,
        source: herald_directory::DirectoryError,
    },
    #[error("post {post}: the scheduler is shutting down")]
    ShuttingDown { post: PostId },
    #[error("a directory task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Expands one post into jobs. `done` holds members finished before a restart.
pub async fn expand(
    ctx: Arc<ExpandCtx>,
    id: PostId,
    meta: PostMeta,
    body: bytes::Bytes,
    done: Option<DoneSet>,
) -> Result<u64, ExpandError> {
    let dir = ctx.directory.clone();
    let list_id = meta.list_id;
    let list = store_call(id, move || dir.list_by_id(list_id))
        .await?
        .ok_or_else(|| ExpandError::ListGone {
            post: id,
            list: meta.list_address.to_string(),
        })?;
    let template = herald_fanout::render(&list, &ctx.list_ctx, &body)
        .map_err(|source| ExpandError::Render { post: id, source })?;
    let post = Arc::new(PostCtx {
        id,
        list_id,
        template,
        accepted_at_ms: meta.received_at_ms,
        max_age_ms: list.settings.max_age_secs.saturating_mul(1000),
        window: Arc::new(tokio::sync::Semaphore::new(ctx.post_window.floor)),
        dsn: None,
        egress_pool: list.settings.egress_pool.as_deref().map(Arc::from),
    });
    let mut grow = window::PostWindow::new(ctx.post_window);
    let already_done = done.as_ref().map_or(0, |d| d.len());
    let mut pending = pending::Pending::new(ctx.telemetry.gauges().expansion_pending.clone());
    let dir = ctx.directory.clone();
    pending.count_with(tokio::task::spawn_blocking(move || {
        dir.member_counts(list_id).map(|c| c.enabled)
    }));
    let suppress = Arc::new(Suppress::load(&ctx, id, &meta, &body).await?);
    let (mut after, up_to) = member_span(&meta);
    let mut queued = 0u64;
    loop {
        let dir = ctx.directory.clone();
        let page = ctx.page_size.min(grow.size());
        if after >= up_to {
            break;
        }
        let audience = meta.audience;
        let members = store_call(id, move || {
            dir.delivery_page(list_id, after, up_to, page, audience)
        })
        .await?;
        let Some(last) = members.last() else { break };
        after = last.id;
        let read = members.len() as u64;
        pending.take_count(already_done).await;
        let members = if suppress.is_empty() {
            members
        } else {
            let (dir, s) = (ctx.directory.clone(), suppress.clone());
            store_call(id, move || s.keep(&dir, members.clone())).await?
        };
        let jobs: Vec<Job> = members
            .into_iter()
            .filter(|m| done.as_ref().is_none_or(|d| !d.contains(m.id)))
            .map(|m| Job::new(post.clone(), Arc::new(m)))
            .collect();
        // The window grows before this page waits for room in it (a first page over 2,000
        // domains opens the window at once).
        let grown = grow.observe(jobs.iter().map(|j| j.member.address.domain()));
        if grown > 0 {
            post.window.add_permits(grown);
            tracing::debug!(post = %id, window = grow.size(), domains = grow.domains(), "post window grown");
        }
        queued += jobs.len() as u64;
        queue_jobs(&ctx, &post, jobs).await?;
        pending.read(read);
    }
    report_expanded(&ctx, id, queued, already_done).await;
    Ok(queued)
}

/// The members a post goes to: ids after the first and up to the second. A shard of a shared
/// post shared between cluster nodes covers only its member-id range.
fn member_span(meta: &PostMeta) -> (MemberId, MemberId) {
    match meta.member_range.as_deref().copied() {
        Some((lo, hi)) => (
            MemberId(lo.0.saturating_sub(1).max(0)),
            MemberId(hi.0.min(meta.max_member_id.0)),
        ),
        None => (MemberId(0), meta.max_member_id),
    }
}

/// Hands a page of jobs to the scheduler. One permit of the post's window per copy, given back
/// when the copy is final (Job's Drop): this post's share of the queue is bounded, so posts that
/// come later still get in (fairness). Waiting for room in the job channel is measured.
async fn queue_jobs(
    ctx: &ExpandCtx,
    post: &Arc<PostCtx>,
    jobs: Vec<Job>,
) -> Result<(), ExpandError> {
    if jobs.is_empty() {
        return Ok(());
    }
    let stopped = || ExpandError::ShuttingDown { post: post.id };
    let n = u32::try_from(jobs.len()).unwrap_or(u32::MAX);
    match post.window.acquire_many(n).await {
        Ok(permits) => permits.forget(),
        Err(_) => return Err(stopped()),
    }
    let t = std::time::Instant::now();
    let sent = ctx.jobs.send(jobs).await;
    ctx.telemetry
        .contention()
        .stage_wait_since(herald_telemetry::StageId::JobsSend, t);
    sent.map_err(|_| stopped())
}

/// Tells the report loop how many recipients the post has, so it can complete the post.
async fn report_expanded(ctx: &ExpandCtx, post: PostId, queued: u64, already_done: u64) {
    let _ = ctx
        .reports
        .send(Report::Expanded {
            post,
            recipients: queued + already_done,
            already_done,
        })
        .await;
}

/// Members a list post skips: those who asked not to get the list copy of a post
/// that names them in To/Cc, and — for a post cross-posted to several lists — those who are
/// enabled members of a list that accepted the same Message-ID earlier (they get that copy).
/// Empty for almost every post, so the fan-out hot path is one `is_empty` check per page.
pub struct Suppress {
    /// Lowercased addresses named in To/Cc whose member asked to be skipped.
    addressed: HashSet<String>,
    /// Earlier posts of other lists with the same Message-ID.
    earlier: Vec<herald_spool::Seen>,
}

/// Most To/Cc addresses looked at per post.
const MAX_ADDRESSED: usize = 100;

impl Suppress {
    async fn load(
        ctx: &ExpandCtx,
        id: PostId,
        meta: &PostMeta,
        body: &bytes::Bytes,
    ) -> Result<Suppress, ExpandError> {
        let earlier = match (&ctx.dedup, &meta.message_id) {
            (Some(d), Some(mid)) => d
                .earlier_posts(mid, id, herald_types::unix_ms_now())
                .into_iter()
                .filter(|s| s.list != meta.list_id)
                .collect(),
            _ => Vec::new(),
        };
        let named = addressed(body);
        let addressed = if named.is_empty() {
            HashSet::new()
        } else {
            let (dir, list) = (ctx.directory.clone(), meta.list_id);
            store_call(id, move || dir.skip_if_addressed_among(list, &named)).await?
        };
        Ok(Suppress { addressed, earlier })
    }

    fn is_empty(&self) -> bool {
        self.addressed.is_empty() && self.earlier.is_empty()
    }

    /// The members of a page that still get this post (blocking: directory lookups, only for
    /// cross-posted messages).
    fn keep(
        &self,
        dir: &Directory,
        members: Vec<Member>,
    ) -> Result<Vec<Member>, herald_directory::DirectoryError> {
        let mut out = Vec::with_capacity(members.len());
        for m in members {
            if self
                .addressed
                .contains(&m.address.to_string().to_ascii_lowercase())
            {
                continue;
            }
            let mut elsewhere = false;
            for s in &self.earlier {
                if dir.is_enabled_member_upto(s.list, s.max_member, &m.address)? {
                    elsewhere = true;
                    break;
                }
            }
            if !elsewhere {
                out.push(m);
            }
        }
        Ok(out)
    }
}

/// Addresses in the post's To and Cc headers (bounded).
fn addressed(body: &[u8]) -> Vec<herald_types::Address> {
    let Some(msg) = mail_parser::MessageParser::new().parse_headers(body) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for field in [msg.to(), msg.cc()].into_iter().flatten() {
        for a in field.iter().take(MAX_ADDRESSED) {
            if let Some(Ok(addr)) = a.address().map(herald_types::Address::parse) {
                out.push(addr);
            }
        }
    }
    out.truncate(MAX_ADDRESSED);
    out
}

/// Expands a `Generated` post: one job per explicit recipient in `meta.recipients` (never the
/// list's members), the body sent verbatim, from the VERP address or — `meta.null_sender` — from
/// the null reverse path. Recipient `i` gets the member id `i + 1`, which is
/// what the spool journals, so recovery skips the ones already final.
pub async fn expand_generated(
    ctx: Arc<ExpandCtx>,
    id: PostId,
    meta: PostMeta,
    body: bytes::Bytes,
    done: Option<DoneSet>,
) -> Result<u64, ExpandError> {
    let mut template = herald_fanout::verbatim(&meta.list_address, &ctx.list_ctx, &body);
    if meta.null_sender {
        template = template.with_null_return_path();
    }
    let post = Arc::new(PostCtx {
        id,
        list_id: meta.list_id,
        template,
        accepted_at_ms: meta.received_at_ms,
        max_age_ms: GENERATED_MAX_AGE_MS,
        window: Arc::new(tokio::sync::Semaphore::new(ctx.post_window.floor)),
        dsn: meta.dsn.map(|d| *d),
        egress_pool: None,
    });
    let already_done = done.as_ref().map_or(0, |d| d.len());
    let jobs: Vec<Job> = meta
        .recipients
        .iter()
        .enumerate()
        .map(|(i, address)| Member {
            id: MemberId(i as i64 + 1),
            list_id: meta.list_id,
            address: address.clone(),
            display_name: None,
            status: MemberStatus::Enabled,
            fields: Default::default(),
        })
        .filter(|m| done.as_ref().is_none_or(|d| !d.contains(m.id)))
        .map(|m| Job::new(post.clone(), Arc::new(m)))
        .collect();
    let queued = jobs.len() as u64;
    queue_jobs(&ctx, &post, jobs).await?;
    report_expanded(&ctx, id, queued, already_done).await;
    Ok(queued)
}

/// Generated mail (confirmations, notices) is given up after two days.
const GENERATED_MAX_AGE_MS: u64 = 2 * 24 * 3600 * 1000;

/// Longest pause between two tries of a directory call while the store is unreachable.
const STORE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs a directory call off the async runtime, again and again while the store cannot be
/// reached (PostgreSQL down or restarting: [`DirectoryError::is_unavailable`]), with
/// backoff from 100 ms to [`STORE_RETRY_MAX`]: the fan-out pauses where it is and resumes when
/// the store answers, rather than ending and leaving the post in the spool until a restart.
/// Any other error ends the expansion. The expansion's task is dropped at shutdown, which
/// ends the wait.
///
/// [`DirectoryError::is_unavailable`]: herald_directory::DirectoryError::is_unavailable
async fn store_call<T, F>(post: PostId, f: F) -> Result<T, ExpandError>
where
    F: Fn() -> Result<T, herald_directory::DirectoryError> + Send + Sync + 'static,
    T: Send + 'static,
{
    let f = Arc::new(f);
    let mut backoff = std::time::Duration::from_millis(100);
    let mut failed = 0u32;
    loop {
        let g = f.clone();
        match blocking(move || g()).await? {
            Ok(v) => {
                if failed > 0 {
                    tracing::info!(%post, tries = failed + 1, "the store answers again; fan-out resumes");
                }
                return Ok(v);
            }
            Err(e) if e.is_unavailable() => {
                if failed == 0 {
                    tracing::warn!(%post, error = %e, "the store cannot be reached; fan-out paused, retrying");
                }
                failed = failed.saturating_add(1);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(STORE_RETRY_MAX);
            }
            Err(source) => return Err(ExpandError::Directory { post, source }),
        }
    }
}

/// Runs a directory call off the async runtime (rusqlite blocks).
async fn blocking<T, F>(f: F) -> Result<T, tokio::task::JoinError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await
}

#[cfg(test)]
mod tests;
