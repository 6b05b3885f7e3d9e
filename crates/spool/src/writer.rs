//! The writer thread: the one place that appends to the journal, and where group commit happens.
//!
//! Requests arrive on a bounded tokio channel (so `record` awaits capacity: backpressure). The
//! loop takes one request, then everything else already queued (up to the batch limits), then
//! decides whether to commit:
//!
//! - at once if anyone waits for durability (`accept`, `flush`) — concurrent accepts that queued
//!   up while the previous fdatasync ran all share the next one;
//! - otherwise when `commit_max_records` records are pending or the oldest pending record is
//!   `commit_interval_ms` old (`record` and `complete` never force a commit on their own).
//!
//! It is a std thread, not a tokio task, because every step is blocking file I/O. It sleeps with
//! `thread::park_timeout` and is woken by the channel through a waker that unparks it.
//!
//! Invariants: requests are applied in channel order, so a `complete` sent after a post's
//! `record`s is written after them.
//!
//! Outages: a failed write or fdatasync (a full disk, an I/O error) makes the journal
//! *unwritable*. The posts of the failed batch are forgotten and their `accept`s answered with
//! [`SpoolError::Unwritable`] (inbound says `452 4.3.1`; the sender keeps the message). Outcomes
//! and completions are not refused: they are applied in memory, and `flush`/`complete` callers
//! wait. The writer retries the repair ([`Journal::heal`]: cut the file back to its last
//! durable length — never trusting an fsync retry on pages the kernel may have dropped — and
//! restate every live post's state) with backoff from [`HEAL_BACKOFF_MIN`] to
//! [`HEAL_BACKOFF_MAX`]; when it succeeds every waiter is answered and new posts are taken again.
//! No restart is needed and nothing in memory is lost. Delivery workers wait for their batch to
//! be durable before taking more (see the scheduler), so fan-out pauses during an outage by
//! itself.
//!
//! Limits: a batch stops growing at `commit_max_records` records or [`MAX_BATCH_BYTES`] bytes.

use crate::error::SpoolError;
use crate::journal::Journal;
use crate::live::Applied;
use crate::model::{FinalState, PostMeta, SnapshotSegment};
use crate::shared::Shared;
use bytes::Bytes;
use herald_types::{MemberId, PostId};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Most bytes gathered into one commit before it is written out.
const MAX_BATCH_BYTES: usize = 16 << 20;
/// How long a delivery worker's batch may wait for others to share its commit. Workers wait
/// for their batch to be durable before sending more, so this is latency on every batch; but a
/// commit per batch (an fdatasync each) costs more CPU than the waiting saves when thousands
/// of connections finish batches every second.
pub(crate) const BATCH_LINGER: Duration = Duration::from_micros(1000);
/// Longest the writer sleeps without looking at its channel while records wait (see `nap`).
pub(crate) const COALESCE: Duration = Duration::from_micros(1000);
/// First wait before retrying a repair after the journal failed, doubled on each failure.
pub(crate) const HEAL_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest wait between repair attempts: a freed disk is noticed within this.
pub(crate) const HEAL_BACKOFF_MAX: Duration = Duration::from_secs(2);

pub(crate) type Reply = oneshot::Sender<Result<(), SpoolError>>;

pub(crate) struct PostRequest {
    pub id: PostId,
    pub meta: PostMeta,
    /// Frame header and encoded metadata, CRC already computed over the body too.
    pub head: Vec<u8>,
    pub body: Bytes,
    pub reply: Reply,
}

pub(crate) enum Request {
    /// Boxed so the common small requests keep the channel slots small.
    Post(Box<PostRequest>),
    Outcome {
        post: PostId,
        member: MemberId,
        state: FinalState,
    },
    /// A delivery worker's batch: its final states, committed at once (like a flush), the
    /// reply sent when they are durable.
    Batch {
        outcomes: Vec<(PostId, MemberId, FinalState)>,
        reply: Reply,
    },
    Complete {
        post: PostId,
        reply: Reply,
    },
    Flush {
        reply: Reply,
    },
    /// Read a live post's body back (moderation).
    Body {
        post: PostId,
        reply: oneshot::Sender<Result<Option<Bytes>, SpoolError>>,
    },
    /// While the journal is unwritable: try the repair at once (space was just freed).
    RetryRepair,
    /// Commit what is queued, then hard-link every segment into `into` with its durable length
    /// (a backup's consistent cut, see [`crate::Spool::snapshot`]).
    Snapshot {
        into: PathBuf,
        reply: oneshot::Sender<Result<Vec<SnapshotSegment>, SpoolError>>,
    },
}

/// Commit policy from the config.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    pub interval: Duration,
    pub max_records: u64,
}

pub(crate) fn spawn(
    journal: Journal,
    rx: mpsc::Receiver<Request>,
    policy: Policy,
    shared: Arc<Shared>,
) -> Result<JoinHandle<()>, SpoolError> {
    let dir = journal.dir().to_path_buf();
    let writer = Writer {
        journal,
        rx,
        policy,
        shared,
        waiters: Vec::new(),
        post_waiters: Vec::new(),
        urgent: false,
        batch_since: None,
        dirty_since: None,
        outage: None,
    };
    thread::Builder::new()
        .name("herald-spool-writer".into())
        .spawn(move || writer.run())
        .map_err(SpoolError::io("spawn writer thread for", &dir))
}

struct Writer {
    journal: Journal,
    rx: mpsc::Receiver<Request>,
    policy: Policy,
    shared: Arc<Shared>,
    /// Replies owed once the current batch is durable (flushes, completions).
    waiters: Vec<Reply>,
    /// `accept` replies owed once the current batch is durable; refused if it fails.
    post_waiters: Vec<Reply>,
    /// Someone waits for durability: commit as soon as the queue is drained.
    urgent: bool,
    /// When the oldest batch still waiting for a commit arrived (see [`BATCH_LINGER`]).
    batch_since: Option<Instant>,
    /// When the oldest uncommitted record was appended.
    dirty_since: Option<Instant>,
    /// The journal is unwritable: when the next repair is due (see the module docs).
    outage: Option<Outage>,
}

struct Outage {
    since: Instant,
    next_try: Instant,
    backoff: Duration,
    attempts: u64,
}

/// Wakes the parked writer thread when the channel has something for it.
struct Unparker(Thread);

impl Wake for Unparker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

enum Next {
    Request(Request),
    Timeout,
    Closed,
}

/// Waits for the next request until `deadline` (forever if `None`).
fn next_request(
    rx: &mut mpsc::Receiver<Request>,
    cx: &mut Context<'_>,
    deadline: Option<Instant>,
) -> Next {
    loop {
        match rx.poll_recv(cx) {
            Poll::Ready(Some(req)) => return Next::Request(req),
            Poll::Ready(None) => return Next::Closed,
            Poll::Pending => {}
        }
        // park may return spuriously or because of an unpark: either way, poll again.
        match deadline {
            None => thread::park(),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Next::Timeout;
                }
                thread::park_timeout(d - now);
            }
        }
    }
}

impl Writer {
    fn run(mut self) {
        let waker = Waker::from(Arc::new(Unparker(thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            let deadline = match &self.outage {
                Some(o) => Some(o.next_try),
                None => {
                    let dirty = self.dirty_since.map(|t| t + self.policy.interval);
                    let batch = self.batch_since.map(|t| t + BATCH_LINGER);
                    dirty.into_iter().chain(batch).min()
                }
            };
            self.nap(deadline);
            match next_request(&mut self.rx, &mut cx, deadline) {
                Next::Request(req) => {
                    self.handle(req);
                    self.drain();
                }
                Next::Timeout => {}
                Next::Closed => {
                    // Every handle is gone: commit what is left (this is what makes Drop flush).
                    if self.outage.is_some() {
                        self.try_heal();
                    } else {
                        self.commit();
                    }
                    self.give_up_waiters();
                    break;
                }
            }
            match &self.outage {
                Some(o) if Instant::now() >= o.next_try => self.try_heal(),
                Some(_) => {}
                None if self.commit_due() => self.commit(),
                None => {}
            }
        }
        tracing::debug!("spool writer stopped");
    }

    /// With records waiting for a commit that is not due yet, sleeps up to [`COALESCE`] without
    /// watching the channel, so the records that arrive meanwhile are taken in one wake rather
    /// than one each: delivery workers queue a record per delivered copy, and a thread wake per
    /// record cost more CPU than the journal itself. An `accept` or `flush` arriving then waits
    /// at most that long.
    fn nap(&self, deadline: Option<Instant>) {
        if self.outage.is_some() || self.urgent || self.dirty_since.is_none() {
            return;
        }
        let now = Instant::now();
        let until = deadline.map_or(now + COALESCE, |d| d.min(now + COALESCE));
        if until > now {
            thread::sleep(until - now);
        }
    }

    /// Takes whatever is already queued, up to the batch limits.
    fn drain(&mut self) {
        while self.journal.pending_records() < self.policy.max_records
            && self.journal.pending_bytes() < MAX_BATCH_BYTES
        {
            match self.rx.try_recv() {
                Ok(req) => self.handle(req),
                Err(_) => break,
            }
        }
    }

    fn commit_due(&self) -> bool {
        self.urgent
            || self
                .batch_since
                .is_some_and(|t| t.elapsed() >= BATCH_LINGER)
            || self.journal.pending_records() >= self.policy.max_records
            || self.journal.pending_bytes() >= MAX_BATCH_BYTES
            || self
                .dirty_since
                .is_some_and(|t| t.elapsed() >= self.policy.interval)
    }

    fn mark_dirty(&mut self) {
        self.dirty_since.get_or_insert_with(Instant::now);
    }

    fn handle(&mut self, req: Request) {
        if self.outage.is_some() {
            self.handle_in_outage(req);
            return;
        }
        match req {
            Request::Post(p) => {
                let PostRequest {
                    id,
                    meta,
                    head,
                    body,
                    reply,
                } = *p;
                self.journal.append_post(id, meta, &head, &body);
                self.post_waiters.push(reply);
                self.urgent = true;
                self.mark_dirty();
            }
            Request::Outcome {
                post,
                member,
                state,
            } => self.outcome(post, member, state),
            Request::Batch { outcomes, reply } => {
                for (post, member, state) in outcomes {
                    self.outcome(post, member, state);
                }
                self.waiters.push(reply);
                self.batch_since.get_or_insert_with(Instant::now);
            }
            Request::Complete { post, reply } => {
                if self.journal.append_done(post) {
                    self.waiters.push(reply);
                    self.mark_dirty();
                } else {
                    let _ = reply.send(Err(SpoolError::UnknownPost(post)));
                }
            }
            Request::Flush { reply } => {
                self.waiters.push(reply);
                self.urgent = true;
            }
            Request::Snapshot { into, reply } => {
                // The cut is taken right after a commit, on this thread, so nothing is
                // half-written in it; linking is cheap, the copying happens elsewhere.
                self.commit();
                let cut = match self.outage {
                    Some(_) => Err(self.shared.failure().unwrap_or(SpoolError::Closed)),
                    None => self.journal.link_segments(&into),
                };
                let _ = reply.send(cut);
            }
            Request::RetryRepair => {}
            Request::Body { post, reply } => {
                let _ = reply.send(self.journal.read_body(post));
                if self.journal.is_broken() {
                    // Writing out the buffer to read a fresh post failed.
                    self.fail(SpoolError::Unwritable {
                        reason: "a journal write failed while reading a post back".into(),
                    });
                }
            }
        }
    }

    fn outcome(&mut self, post: PostId, member: MemberId, state: FinalState) {
        match self.journal.append_outcome(post, member, state) {
            Applied::New => self.mark_dirty(),
            Applied::Duplicate => {}
            Applied::UnknownPost => {
                self.shared.stats.ignored.fetch_add(1, Relaxed);
                tracing::warn!(%post, %member, "outcome for a post that is not live; ignored");
            }
        }
    }

    /// While the journal is unwritable: new posts are refused; outcomes and completions are
    /// applied in memory (the repair writes them); flushes and completions wait for the repair.
    fn handle_in_outage(&mut self, req: Request) {
        match req {
            Request::Post(p) => {
                let err = self.shared.failure().unwrap_or(SpoolError::Closed);
                let _ = p.reply.send(Err(err));
            }
            Request::Outcome {
                post,
                member,
                state,
            } => self.note_outcome(post, member, state),
            Request::Batch { outcomes, reply } => {
                for (post, member, state) in outcomes {
                    self.note_outcome(post, member, state);
                }
                self.waiters.push(reply);
            }
            Request::Complete { post, reply } => {
                if self.journal.forget(post) {
                    self.waiters.push(reply);
                } else {
                    let _ = reply.send(Err(SpoolError::UnknownPost(post)));
                }
            }
            Request::Flush { reply } => self.waiters.push(reply),
            Request::Snapshot { reply, .. } => {
                let _ = reply.send(Err(self.shared.failure().unwrap_or(SpoolError::Closed)));
            }
            Request::Body { post, reply } => {
                let _ = reply.send(self.journal.read_body(post));
            }
            Request::RetryRepair => {
                if let Some(o) = self.outage.as_mut() {
                    o.next_try = Instant::now();
                    o.backoff = HEAL_BACKOFF_MIN;
                }
            }
        }
    }

    fn note_outcome(&mut self, post: PostId, member: MemberId, state: FinalState) {
        if self.journal.note_outcome(post, member, state) == Applied::UnknownPost {
            self.shared.stats.ignored.fetch_add(1, Relaxed);
        }
    }

    /// One repair attempt (see the module docs); on success everyone waiting is answered.
    fn try_heal(&mut self) {
        let Some(outage) = self.outage.as_mut() else {
            return;
        };
        outage.attempts += 1;
        match self.journal.heal() {
            Ok(()) => {
                let since = outage.since;
                let attempts = outage.attempts;
                self.outage = None;
                self.shared.set_writable();
                tracing::warn!(
                    outage_ms = since.elapsed().as_millis() as u64,
                    attempts,
                    "spool journal writable again: taking posts and resuming fan-out"
                );
                for w in self.waiters.drain(..) {
                    let _ = w.send(Ok(()));
                }
                if let Err(e) = self.journal.after_commit() {
                    self.fail(e);
                }
            }
            Err(e) => {
                outage.backoff = (outage.backoff * 2).min(HEAL_BACKOFF_MAX);
                outage.next_try = Instant::now() + outage.backoff;
                // Once per doubling, then every HEAL_BACKOFF_MAX: enough to follow, not a flood.
                tracing::debug!(error = %e, attempts = outage.attempts, "spool journal repair failed; will retry");
            }
        }
    }

    /// The writer is stopping: whoever still waits will not get an answer from us.
    fn give_up_waiters(&mut self) {
        let err = self.shared.failure().unwrap_or(SpoolError::Closed);
        for w in self.waiters.drain(..).chain(self.post_waiters.drain(..)) {
            let _ = w.send(Err(clone_err(&err)));
        }
    }

    /// Commits the batch, answers its waiters, then does segment maintenance.
    fn commit(&mut self) {
        self.urgent = false;
        self.batch_since = None;
        self.dirty_since = None;
        match self.journal.commit() {
            Ok(()) => {
                // A dropped receiver is a caller that stopped waiting; the work is done anyway.
                for w in self.waiters.drain(..).chain(self.post_waiters.drain(..)) {
                    let _ = w.send(Ok(()));
                }
                if let Err(e) = self.journal.after_commit() {
                    self.fail(e);
                }
            }
            Err(e) => self.fail(e),
        }
    }

    /// Starts an outage (see the module docs): the failed batch's posts are refused, everyone
    /// else waits for the repair.
    fn fail(&mut self, e: SpoolError) {
        let forgotten = self.journal.abandon_batch();
        self.urgent = false;
        self.batch_since = None;
        self.dirty_since = None;
        let reason = e.to_string();
        if self.outage.is_none() {
            tracing::error!(
                error = %reason, refused_posts = forgotten.len(),
                "spool journal cannot be written: refusing new posts (452 4.3.1) and pausing fan-out; \
                 retrying by itself, no restart needed"
            );
            let now = Instant::now();
            self.outage = Some(Outage {
                since: now,
                next_try: now + HEAL_BACKOFF_MIN,
                backoff: HEAL_BACKOFF_MIN,
                attempts: 0,
            });
        }
        self.shared.set_unwritable(reason);
        let err = self.shared.failure().unwrap_or(SpoolError::Closed);
        for w in self.post_waiters.drain(..) {
            let _ = w.send(Err(clone_err(&err)));
        }
    }
}

/// `SpoolError` holds an `io::Error`, which is not `Clone`; the errors answered to waiters are
/// always `Unwritable` or `Closed`, which are.
fn clone_err(e: &SpoolError) -> SpoolError {
    match e {
        SpoolError::Unwritable { reason } => SpoolError::Unwritable {
            reason: reason.clone(),
        },
        other => SpoolError::Unwritable {
            reason: other.to_string(),
        },
    }
}
