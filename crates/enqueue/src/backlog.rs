//! The hand-off backlog: posts already durable in the spool — and so already
//! acknowledged to whoever submitted them — waiting to be handed to the stage that owns their
//! kind (fan-out, the bounce stage, the lists stage; [`Handoff`]).
//!
//! Why: the `250` after DATA used to wait for that hand-off, a bounded channel drained as
//! fast as the next stage (the archive's FTS5 indexing, then expansion) takes posts, so a
//! slow downstream stage set the intake's pace and its latency. The spool is what makes the
//! `250` true; the hand-off is done by [`run`], a task of its own, the way Postfix's qmgr
//! takes mail from the incoming queue at its own pace, not smtpd's.
//!
//! Flow: [`Backlog::reserve`] (before the spool write: room for one more post and its bytes;
//! waits when the backlog is full, so a downstream stage that stays slower than the intake
//! slows the senders again and memory stays bounded) → spool accept → [`Reservation::hand`]
//! (never waits) → [`run`] → the stage's channel (waits for room there, not the sender).
//!
//! Invariants: every post handed here is durable in the spool first; [`run`] hands each post
//! over exactly once; what it has not handed over when it stops (a shutdown) or cannot hand
//! over (the stage's receiver is gone: the server is stopping) stays in the spool, and the
//! spool's recovery gives it to its stage at the next start — nothing is lost, and nothing
//! is handed over twice within one run of the process.
//!
//! Limits: `[intake] backlog_max_posts` posts and `backlog_max_bytes` bytes of bodies at
//! once (a post larger than the byte budget waits for all of it and goes alone).

use crate::handoff::Handoff;
use herald_spool::SpooledPost;
use serde::Deserialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Most posts `backlog_max_posts` may allow (each waiting post costs its metadata in memory,
/// a few hundred bytes, besides its body).
pub const MAX_BACKLOG_POSTS: usize = 1_000_000;
/// Most bytes `backlog_max_bytes` may allow (the byte budget is a semaphore of u32 permits).
pub const MAX_BACKLOG_BYTES: u64 = u32::MAX as u64;
/// Fewest bytes `backlog_max_bytes` may allow: below that, every post of ordinary size would
/// wait for the one before it.
pub const MIN_BACKLOG_BYTES: u64 = 1 << 20;

/// `[intake]`: how much acknowledged mail may wait for its hand-off to the next stage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntakeSection {
    /// Posts acknowledged (durable in the spool) and not yet handed to their stage, at most.
    /// Beyond it the next post waits before it is spooled: its sender waits for the `250`.
    pub backlog_max_posts: usize,
    /// Bytes of those posts' bodies, at most (they are held in memory until handed over).
    pub backlog_max_bytes: u64,
    /// Copies accepted and not yet done that may be tried now (`herald_unfinished_copies`:
    /// the scheduler's in-memory queue, copies on connections, copies of posts still being
    /// fanned out; never the deferred queue's), at most: above it list posts get `452 4.3.1`
    /// at RCPT until the count is back under 90 % of it (`pressure.rs`). 0: never refuse.
    pub max_unfinished_copies: u64,
}

impl Default for IntakeSection {
    fn default() -> Self {
        IntakeSection {
            backlog_max_posts: 50_000,
            backlog_max_bytes: 256 << 20,
            // Minutes of sending at the rates BENCHMARKS.md measures, and five times the
            // default in-memory queue: a sign the spool is not draining, not a busy moment.
            max_unfinished_copies: 5_000_000,
        }
    }
}

impl IntakeSection {
    /// Checked when the server's configuration is loaded; each error names its key.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_BACKLOG_POSTS).contains(&self.backlog_max_posts) {
            return Err(format!(
                "intake.backlog_max_posts: must be between 1 and {MAX_BACKLOG_POSTS}"
            ));
        }
        if !(MIN_BACKLOG_BYTES..=MAX_BACKLOG_BYTES).contains(&self.backlog_max_bytes) {
            return Err(format!(
                "intake.backlog_max_bytes: must be between {MIN_BACKLOG_BYTES} and {MAX_BACKLOG_BYTES}"
            ));
        }
        Ok(())
    }
}

/// A post waiting for its hand-off, with the bytes it holds of the budget.
struct Waiting {
    post: SpooledPost,
    _bytes: OwnedSemaphorePermit,
}

/// Depth of the backlog, for `/metrics` and tests.
#[derive(Debug, Default)]
pub struct BacklogDepth {
    posts: AtomicU64,
    bytes: AtomicU64,
    /// Posts handed to their stage since start.
    handed: AtomicU64,
}

impl BacklogDepth {
    /// Posts waiting now.
    pub fn posts(&self) -> u64 {
        self.posts.load(Relaxed)
    }

    /// Bytes of bodies waiting now.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// Posts handed to their stage since start.
    pub fn handed(&self) -> u64 {
        self.handed.load(Relaxed)
    }
}

/// The enqueue path's end of the backlog (cheap to clone).
#[derive(Clone)]
pub struct Backlog {
    tx: mpsc::Sender<Waiting>,
    bytes: Arc<Semaphore>,
    max_bytes: u32,
    depth: Arc<BacklogDepth>,
}

/// The hand-off task's end of the backlog: give it to [`run`].
pub struct BacklogQueue {
    rx: mpsc::Receiver<Waiting>,
    bytes: Arc<Semaphore>,
    depth: Arc<BacklogDepth>,
}

/// Room for one post in the backlog, taken before the post is spooled.
pub struct Reservation {
    slot: mpsc::OwnedPermit<Waiting>,
    bytes: OwnedSemaphorePermit,
    depth: Arc<BacklogDepth>,
}

impl Reservation {
    /// Puts a post, durable in the spool, in the backlog. Never waits (the room was reserved).
    pub fn hand(self, post: SpooledPost) {
        let size = post.body.len() as u64;
        self.depth.posts.fetch_add(1, Relaxed);
        self.depth.bytes.fetch_add(size, Relaxed);
        // A closed queue (the hand-off task stopped) drops the post here: it is durable in the
        // spool and resumed at the next start. `run` counts it out on its side only when it
        // received it, so undo the count.
        let tx = self.slot.send(Waiting {
            post,
            _bytes: self.bytes,
        });
        if tx.is_closed() {
            self.depth.posts.fetch_sub(1, Relaxed);
            self.depth.bytes.fetch_sub(size, Relaxed);
        }
    }
}

impl Backlog {
    /// A backlog sized by `cfg` (checked: see [`IntakeSection::check`]; out-of-range values
    /// are clamped here so a `Config` built in code cannot panic).
    pub fn new(cfg: &IntakeSection) -> (Backlog, BacklogQueue) {
        let posts = cfg.backlog_max_posts.clamp(1, MAX_BACKLOG_POSTS);
        let max_bytes = cfg
            .backlog_max_bytes
            .clamp(MIN_BACKLOG_BYTES, MAX_BACKLOG_BYTES) as u32;
        let (tx, rx) = mpsc::channel(posts);
        let bytes = Arc::new(Semaphore::new(max_bytes as usize));
        let depth = Arc::new(BacklogDepth::default());
        (
            Backlog {
                tx,
                bytes: bytes.clone(),
                max_bytes,
                depth: depth.clone(),
            },
            BacklogQueue { rx, bytes, depth },
        )
    }

    /// Waits for room for a post of `size` bytes. `None` when the hand-off task has stopped
    /// (the server is stopping): the post can still be spooled and acknowledged, and its
    /// stage gets it from the spool at the next start.
    pub async fn reserve(&self, size: usize) -> Option<Reservation> {
        let want = u32::try_from(size).unwrap_or(u32::MAX).min(self.max_bytes);
        let bytes = self.bytes.clone().acquire_many_owned(want).await.ok()?;
        let slot = self.tx.clone().reserve_owned().await.ok()?;
        Some(Reservation {
            slot,
            bytes,
            depth: self.depth.clone(),
        })
    }

    /// How much is waiting now.
    pub fn depth(&self) -> Arc<BacklogDepth> {
        self.depth.clone()
    }
}

/// The hand-off task: gives each post of the backlog to the stage that owns its kind, in the
/// order they were spooled, waiting for room in that stage's channel. Ends at `stop` (or when
/// every [`Backlog`] is gone); posts not handed over by then stay in the spool for the next
/// start, and later [`Backlog::reserve`] calls answer `None`.
pub async fn run(mut queue: BacklogQueue, handoff: Handoff, stop: CancellationToken) {
    loop {
        let waiting = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            w = queue.rx.recv() => match w {
                Some(w) => w,
                None => break,
            },
        };
        let Waiting { post, _bytes } = waiting;
        let (id, size) = (post.id, post.body.len() as u64);
        queue.depth.posts.fetch_sub(1, Relaxed);
        queue.depth.bytes.fetch_sub(size, Relaxed);
        tokio::select! {
            biased;
            _ = stop.cancelled() => {
                tracing::debug!(post = %id, "stopping: the post stays in the spool for the next start");
                break;
            }
            handed = handoff.send(post) => {
                if handed {
                    queue.depth.handed.fetch_add(1, Relaxed);
                }
            }
        }
        drop(_bytes);
    }
    // New reservations fail from now on (their posts are spooled and resumed at the next
    // start); the posts still queued are dropped with the receiver, durable in the spool.
    queue.bytes.close();
    queue.rx.close();
    let left = queue.depth.posts();
    if left > 0 {
        tracing::info!(
            posts = left,
            "hand-off stopped: posts not yet handed over stay in the spool for the next start"
        );
    }
}

/// What the hand-off stage offers: the backlog enqueue fills (acknowledged posts waiting for
/// their stage) and the receiving ends of the hand-over, for the stages downstream.
pub struct HandoffStarted {
    pub backlog: Backlog,
    pub handed: crate::HandoffReceivers,
}

/// Starts the hand-off: a backlog sized by `cfg` and the task that hands each acknowledged
/// post to the stage that owns its kind. The first stage stopped after the listeners: what it
/// still holds stays in the spool for the next start.
pub fn start(cfg: &IntakeSection) -> herald_stage::Started<HandoffStarted> {
    let (handoff, handed) = Handoff::channels(crate::HANDOFF_CAPACITY);
    let (backlog, queue) = Backlog::new(cfg);
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(run(queue, handoff, stop.clone()));
    herald_stage::Started::new(
        "hand-off",
        herald_stage::StopAt::Handoff,
        stop,
        HandoffStarted { backlog, handed },
    )
    .with_task(task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_checks_its_bounds_by_name() {
        assert!(IntakeSection::default().check().is_ok());
        let none = IntakeSection {
            backlog_max_posts: 0,
            ..Default::default()
        };
        assert!(none
            .check()
            .is_err_and(|e| e.contains("intake.backlog_max_posts")));
        let tiny = IntakeSection {
            backlog_max_bytes: 10,
            ..Default::default()
        };
        assert!(tiny
            .check()
            .is_err_and(|e| e.contains("intake.backlog_max_bytes")));
        let huge = IntakeSection {
            backlog_max_bytes: u64::MAX,
            ..Default::default()
        };
        assert!(huge.check().is_err());
        // Built in code past the checks: clamped, never a panic.
        let (b, _q) = Backlog::new(&huge);
        assert_eq!(u64::from(b.max_bytes), MAX_BACKLOG_BYTES);
    }
}
