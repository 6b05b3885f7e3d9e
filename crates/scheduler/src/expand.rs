//! Fan-out expansion: render the post once, then read the list's members in pages and turn each
//! enabled member (within the post's member-id snapshot, minus those already finished before a
//! restart) into a job. The job channel is bounded, so a million-member list is read only as fast
//! as the scheduler takes copies: memory stays bounded by the window, not the list.

use crate::job::{Job, PostCtx};
use crate::report::Report;
use herald_directory::Directory;
use herald_fanout::ListContext;
use herald_spool::{DoneSet, PostMeta};
use herald_types::{MemberId, PostId};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What an expansion needs besides the post.
pub struct ExpandCtx {
    pub directory: Directory,
    pub list_ctx: ListContext,
    pub jobs: mpsc::Sender<Vec<Job>>,
    pub reports: mpsc::Sender<Report>,
    pub page_size: usize,
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
    let list = blocking(move || dir.list_by_id(list_id))
        .await?
        .map_err(|source| ExpandError::Directory { post: id, source })?
        .ok_or_else(|| ExpandError::ListGone {
            post: id,
            list: meta.list_address.to_string(),
        })?;
    let template = herald_fanout::render(&list, &ctx.list_ctx, &body)
        .map_err(|source| ExpandError::Render { post: id, source })?;
    let post = Arc::new(PostCtx {
        id,
        template,
        accepted_at_ms: meta.received_at_ms,
        max_age_ms: list.settings.max_age_secs.saturating_mul(1000),
    });
    let already_done = done.as_ref().map_or(0, |d| d.len());
    let mut after = MemberId(0);
    let mut queued = 0u64;
    loop {
        let dir = ctx.directory.clone();
        let (page, up_to) = (ctx.page_size, meta.max_member_id);
        let members = blocking(move || dir.members_page(list_id, after, up_to, page, true))
            .await?
            .map_err(|source| ExpandError::Directory { post: id, source })?;
        let Some(last) = members.last() else { break };
        after = last.id;
        let jobs: Vec<Job> = members
            .into_iter()
            .filter(|m| done.as_ref().is_none_or(|d| !d.contains(m.id)))
            .map(|m| Job::new(post.clone(), Arc::new(m)))
            .collect();
        queued += jobs.len() as u64;
        if !jobs.is_empty() {
            let t = std::time::Instant::now();
            let sent = ctx.jobs.send(jobs).await;
            ctx.telemetry
                .contention()
                .stage_wait_since(herald_telemetry::StageId::JobsSend, t);
            if sent.is_err() {
                return Err(ExpandError::ShuttingDown { post: id });
            }
        }
    }
    let _ = ctx
        .reports
        .send(Report::Expanded {
            post: id,
            recipients: queued + already_done,
            already_done,
        })
        .await;
    Ok(queued)
}

/// Runs a directory call off the async runtime (rusqlite blocks).
async fn blocking<T, F>(f: F) -> Result<T, tokio::task::JoinError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await
}
