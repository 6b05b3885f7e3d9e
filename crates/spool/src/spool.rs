//! The `Spool` handle: the async API the rest of Herald calls.
//!
//! `Spool` is `Clone` and cheap (one `Arc`); every clone talks to the same writer thread through
//! one bounded channel. Dropping the last clone closes the channel: the writer commits what is
//! queued and exits, and the drop joins it (a short blocking wait — one fdatasync at most).
//!
//! Post ids: `open` seeds the counter with the largest of (highest id in the journal + 1, every
//! segment header's id floor, `unix_ms << 20`). The time term makes ids differ across a wiped
//! spool, so ids already written to delivery logs or used in Message-IDs are never reused; the
//! other terms keep ids monotonic if the clock steps back. Ids stay below 2^62 until year ~2100.
//!
//! Cancellation: dropping an `accept` future after its request was queued does not un-queue it;
//! the post may still become durable and will then be recovered (as live) at the next `open`.
//! Like any MTA, Herald prefers a possible duplicate to a lost post.
//!
//! SECURITY / robustness: bodies are opaque bytes and are never parsed here; metadata is
//! re-validated (addresses) when read back from disk.

use crate::config::SpoolConfig;
use crate::error::SpoolError;
use crate::journal::{Journal, Resume};
use crate::model::{
    FinalState, PostKind, PostMeta, PostProgress, RecoveredPost, SnapshotSegment, SpoolStats,
};
use crate::record::{self, MAX_BODY_BYTES};
use crate::recovery;
use crate::shared::Shared;
use crate::writer::{self, Policy, PostRequest, Request};
use bytes::Bytes;
use herald_types::{MemberId, PostId};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Requests the writer channel holds before `record` and friends wait for room.
pub const QUEUE_CAPACITY: usize = 16_384;
/// Bits of room per millisecond in the time-seeded post-id counter.
const ID_TIME_SHIFT: u32 = 20;

/// Durable posts and per-recipient final states.
#[derive(Clone)]
pub struct Spool {
    inner: Arc<Inner>,
}

struct Inner {
    // Fields drop in declaration order: the sender goes first, which closes the channel and tells
    // the writer to commit and exit, then `_writer` joins it (held only for its Drop).
    tx: mpsc::Sender<Request>,
    shared: Arc<Shared>,
    /// Message-IDs of digests found completed in the journal at `open`.
    completed_digests: Vec<String>,
    _writer: WriterThread,
}

struct WriterThread(Option<JoinHandle<()>>);

impl Drop for WriterThread {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            if handle.join().is_err() {
                tracing::error!("spool writer thread panicked");
            }
        }
    }
}

/// A promise that what was queued before [`Spool::commit_point`] is durable once
/// [`Durable::wait`] returns `Ok`.
pub struct Durable {
    rx: oneshot::Receiver<Result<(), SpoolError>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable").finish_non_exhaustive()
    }
}

impl Durable {
    pub async fn wait(self) -> Result<(), SpoolError> {
        match self.rx.await {
            Ok(result) => result,
            Err(_) => Err(self.shared.failure().unwrap_or(SpoolError::Closed)),
        }
    }
}

impl std::fmt::Debug for Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spool").finish_non_exhaustive()
    }
}

impl Spool {
    /// Opens (or creates) the spool, recovers the journal, and starts the writer thread.
    /// Returns the posts that were live, sorted by id, each with the members already final.
    /// Blocking (file I/O); call it before serving, or from `spawn_blocking`.
    pub fn open(cfg: SpoolConfig) -> Result<(Spool, Vec<RecoveredPost>), SpoolError> {
        cfg.validate()?;
        let dir = cfg.dir.join("journal");
        std::fs::create_dir_all(&dir).map_err(SpoolError::io("create directory", &dir))?;
        let rec = recovery::recover(&dir)?;
        let time_seed = herald_types::unix_ms_now().saturating_mul(1 << ID_TIME_SHIFT);
        let shared = Arc::new(Shared::new(rec.live, rec.id_floor.max(time_seed)));
        let stats = &shared.stats;
        stats.quarantined.store(rec.quarantined, Relaxed);
        stats.torn_bytes.store(rec.torn_bytes, Relaxed);
        let resume = Resume {
            segments: rec.segments,
            tail: rec.tail,
            next_seq: rec.next_seq,
        };
        let mut journal = Journal::open(dir, cfg.segment_max_bytes, resume, shared.clone())?;
        if rec.quarantined > 0 {
            journal.checkpoint_all(&rec.bodies)?;
        }
        journal.compact();
        let posts = shared.live().recovered(&rec.bodies);
        drop(rec.bodies);
        let policy = Policy {
            interval: Duration::from_millis(cfg.commit_interval_ms),
            max_records: cfg.commit_max_records as u64,
        };
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let handle = writer::spawn(journal, rx, policy, shared.clone())?;
        tracing::info!(dir = %cfg.dir.display(), live_posts = posts.len(), "spool opened");
        let inner = Inner {
            tx,
            shared,
            completed_digests: rec.completed_digests,
            _writer: WriterThread(Some(handle)),
        };
        Ok((
            Spool {
                inner: Arc::new(inner),
            },
            posts,
        ))
    }

    /// Message-IDs (as stored, with their angle brackets) of the digests whose fan-out had
    /// completed in the journal found at `open`. With the live posts, this is every digest the
    /// spool took that is still on disk: the digest stage must not send those again. A
    /// completed digest whose segment was compacted away before the crash is not listed.
    pub fn completed_digests_at_open(&self) -> &[String] {
        &self.inner.completed_digests
    }

    /// Stores a post. Returns only after its Post record is fsync'd (shared with concurrent
    /// accepts: group commit) — this is what allows inbound to answer 250.
    pub async fn accept(&self, meta: PostMeta, body: Bytes) -> Result<PostId, SpoolError> {
        self.check_failed()?;
        if body.len() as u64 > MAX_BODY_BYTES {
            return Err(SpoolError::TooLarge {
                size: body.len() as u64,
                limit: MAX_BODY_BYTES,
            });
        }
        let id = PostId(self.inner.shared.next_id.fetch_add(1, Relaxed));
        // Encoding (and the body's CRC) happens here, on the caller's task, not the writer.
        let head = record::encode_post_head(id, &meta, &body)?;
        let (reply, rx) = oneshot::channel();
        let req = PostRequest {
            id,
            meta,
            head,
            body,
            reply,
        };
        self.send(Request::Post(Box::new(req))).await?;
        self.wait(rx).await?;
        Ok(id)
    }

    /// Journals a final state for one recipient. Waits only for channel room (backpressure); the
    /// record is committed within `commit_interval_ms` or `commit_max_records`, whichever first.
    /// A second final state for the same member, or one for a post that is not live, is ignored.
    pub async fn record(
        &self,
        post: PostId,
        member: MemberId,
        state: FinalState,
    ) -> Result<(), SpoolError> {
        // Not refused while the journal is unwritable: the writer keeps the state in memory and
        // its repair writes it (a delivered copy must never be forgotten).
        self.send(Request::Outcome {
            post,
            member,
            state,
        })
        .await
    }

    /// Queues one final state if the writer's channel has room now, without waiting; false
    /// when it is full (the caller records it later, e.g. with [`Spool::record_batch`]). For a
    /// delivery worker journaling each copy the moment it is delivered, from inside the SMTP
    /// exchange, where it must not wait. Committed within `commit_interval_ms`.
    pub fn try_record(&self, post: PostId, member: MemberId, state: FinalState) -> bool {
        self.inner
            .tx
            .try_send(Request::Outcome {
                post,
                member,
                state,
            })
            .is_ok()
    }

    /// Journals a delivery worker's batch of final states and asks for them to be committed
    /// now (shared with every other batch and accept in flight: group commit). The returned
    /// [`Durable`] resolves once they are on disk — while the journal is unwritable, once a
    /// repair has made them so. One channel message for the whole batch.
    pub async fn record_batch(
        &self,
        outcomes: Vec<(PostId, MemberId, FinalState)>,
    ) -> Result<Durable, SpoolError> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Batch { outcomes, reply }).await?;
        Ok(Durable {
            rx,
            shared: self.inner.shared.clone(),
        })
    }

    /// Ends a post: it will not be recovered again and its records may be compacted away.
    /// Returns once the PostDone record is committed (within `commit_interval_ms`; while the
    /// journal is unwritable, once a repair succeeds).
    pub async fn complete(&self, post: PostId) -> Result<(), SpoolError> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Complete { post, reply }).await?;
        self.wait(rx).await
    }

    /// Ends a post like [`Spool::complete`], waiting only for room in the writer's channel,
    /// not for the PostDone record's commit (it comes within `commit_interval_ms`, or with the
    /// next flush). For the report loop, which completes posts one after another: waiting for
    /// each commit there allowed one completion per commit interval (~150 posts/s), and a stop
    /// with thousands of finished posts queued took minutes. A crash before the commit leaves
    /// the post live: recovery gives it back with every member final (those records precede
    /// the PostDone record in the channel), and fan-out finds nobody left to send to.
    pub async fn complete_queued(&self, post: PostId) -> Result<(), SpoolError> {
        // The writer answers the reply when the record is durable; nobody listens for it.
        let (reply, _unheard) = oneshot::channel();
        self.send(Request::Complete { post, reply }).await
    }

    /// Commits everything queued before this call and waits for it to be durable (while the
    /// journal is unwritable: until a repair succeeds).
    pub async fn flush(&self) -> Result<(), SpoolError> {
        self.commit_point().await?.wait().await
    }

    /// Asks for everything queued before this call to be committed now, without waiting for
    /// it: the returned [`Durable`] resolves once it is. Concurrent callers share one
    /// fdatasync (group commit). This is how a delivery worker waits for its batch's outcomes
    /// to be journaled before it takes more work, while the report loop goes on.
    pub async fn commit_point(&self) -> Result<Durable, SpoolError> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Flush { reply }).await?;
        Ok(Durable {
            rx,
            shared: self.inner.shared.clone(),
        })
    }

    /// The body of a live post (`None` when it is not live), read back from the journal. Used
    /// by moderation and the bounce/request stages; not on the fan-out path.
    pub async fn body(&self, post: PostId) -> Result<Option<Bytes>, SpoolError> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Body { post, reply }).await?;
        rx.await.map_err(|_| self.closed())?
    }

    /// A consistent cut of the journal for a backup, taken without stopping the spool: the
    /// writer commits what is queued, hard-links every segment into `into` (a directory on the
    /// journal's file system, e.g. under the spool directory) and returns each with its length
    /// at that commit. Copying those bytes gives a journal that recovers to exactly the state
    /// of that moment: every post accepted before it, every outcome committed before it. The
    /// caller removes the links when done.
    pub async fn snapshot(&self, into: &Path) -> Result<Vec<SnapshotSegment>, SpoolError> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Snapshot {
            into: into.to_path_buf(),
            reply,
        })
        .await?;
        rx.await.map_err(|_| self.closed())?
    }

    /// Flushes and drops this handle. When it is the last one, the writer thread is stopped and
    /// joined before this returns.
    pub async fn close(self) -> Result<(), SpoolError> {
        let result = self.flush().await;
        drop(self);
        result
    }

    pub fn stats(&self) -> SpoolStats {
        let live = self.inner.shared.live().len() as u64;
        let shared = &self.inner.shared;
        shared.stats.snapshot(live, shared.is_writable())
    }

    /// False while the journal cannot be written (a full disk, an I/O error): new posts would
    /// be refused. It turns true by itself when the writer's repair succeeds.
    pub fn is_writable(&self) -> bool {
        self.inner.shared.is_writable()
    }

    /// Why new posts are refused now (the journal cannot be written, or posts are held off),
    /// `None` while they are taken. For readiness probes and status pages.
    pub fn refusing_posts(&self) -> Option<String> {
        self.inner.shared.failure().map(reason_of)
    }

    /// Why the journal itself cannot be written now (outcomes wait in memory for the
    /// repair), `None` while it can. Posts held off do not count.
    pub fn journal_outage(&self) -> Option<String> {
        self.inner.shared.outage().map(reason_of)
    }

    /// Refuses new posts for `reason` (inbound says `452 4.3.1`) while outcomes and
    /// completions are still journaled: the data disk is short and what is left of it is kept
    /// for what the server owes its members. Until [`Spool::release_posts`].
    pub fn hold_posts(&self, reason: impl Into<String>) {
        self.inner.shared.hold_posts(reason.into());
    }

    /// Takes new posts again after [`Spool::hold_posts`].
    pub fn release_posts(&self) {
        self.inner.shared.release_posts();
    }

    /// Asks the writer to try its repair now rather than at the end of its backoff (space was
    /// just freed, e.g. at the stop). Does nothing when the journal is writable or the
    /// writer's channel is full (a repair is then retried on its own schedule anyway).
    pub fn retry_repair_now(&self) {
        let _ = self.inner.tx.try_send(Request::RetryRepair);
    }

    /// Every live post and its metadata, sorted by id (for status pages).
    pub fn live_posts(&self) -> Vec<(PostId, PostMeta)> {
        self.inner.shared.live().metas()
    }

    /// How many live posts are of `kind` (O(1): kept as posts come and go). Inbound uses it to
    /// bound stored postmaster mail before accepting more.
    pub fn live_count(&self, kind: PostKind) -> usize {
        self.inner.shared.live().count(kind)
    }

    /// Delivered/failed counts of a live post (including records not yet committed).
    pub fn progress(&self, post: PostId) -> Option<PostProgress> {
        self.inner.shared.live().progress(post)
    }

    fn check_failed(&self) -> Result<(), SpoolError> {
        match self.inner.shared.failure() {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    fn closed(&self) -> SpoolError {
        self.inner.shared.failure().unwrap_or(SpoolError::Closed)
    }

    async fn send(&self, req: Request) -> Result<(), SpoolError> {
        self.inner.tx.send(req).await.map_err(|_| self.closed())
    }

    async fn wait(&self, rx: oneshot::Receiver<Result<(), SpoolError>>) -> Result<(), SpoolError> {
        rx.await.map_err(|_| self.closed())?
    }
}

/// The operator-facing reason of a refusal (`Unwritable` carries it; others say themselves).
fn reason_of(e: SpoolError) -> String {
    match e {
        SpoolError::Unwritable { reason } => reason,
        other => other.to_string(),
    }
}
