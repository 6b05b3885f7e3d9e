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
//! `record`s is written after them. A failed write or fdatasync latches the journal as failed
//! (the kernel may have dropped the dirty pages; retrying the fsync would lie), every waiter gets
//! the error, and later requests are refused until the process restarts and recovery re-reads
//! what is really on disk.
//!
//! Limits: a batch stops growing at `commit_max_records` records or [`MAX_BATCH_BYTES`] bytes.

use crate::error::SpoolError;
use crate::journal::Journal;
use crate::live::Applied;
use crate::model::{FinalState, PostMeta};
use crate::shared::Shared;
use bytes::Bytes;
use herald_types::{MemberId, PostId};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Most bytes gathered into one commit before it is written out.
const MAX_BATCH_BYTES: usize = 16 << 20;

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
        urgent: false,
        dirty_since: None,
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
    /// Replies owed once the current batch is durable.
    waiters: Vec<Reply>,
    /// Someone waits for durability: commit as soon as the queue is drained.
    urgent: bool,
    /// When the oldest uncommitted record was appended.
    dirty_since: Option<Instant>,
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
            let deadline = self.dirty_since.map(|t| t + self.policy.interval);
            match next_request(&mut self.rx, &mut cx, deadline) {
                Next::Request(req) => {
                    self.handle(req);
                    self.drain();
                }
                Next::Timeout => {}
                Next::Closed => {
                    // Every handle is gone: commit what is left (this is what makes Drop flush).
                    self.commit();
                    break;
                }
            }
            if self.commit_due() {
                self.commit();
            }
        }
        tracing::debug!("spool writer stopped");
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
        if let Some(err) = self.shared.failure() {
            refuse(req, err);
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
                self.waiters.push(reply);
                self.urgent = true;
                self.mark_dirty();
            }
            Request::Outcome {
                post,
                member,
                state,
            } => match self.journal.append_outcome(post, member, state) {
                Applied::New => self.mark_dirty(),
                Applied::Duplicate => {}
                Applied::UnknownPost => {
                    self.shared.stats.ignored.fetch_add(1, Relaxed);
                    tracing::warn!(%post, %member, "outcome for a post that is not live; ignored");
                }
            },
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
            Request::Body { post, reply } => {
                let _ = reply.send(self.journal.read_body(post));
            }
        }
    }

    /// Commits the batch, answers its waiters, then does segment maintenance.
    fn commit(&mut self) {
        self.urgent = false;
        self.dirty_since = None;
        let result = match self.shared.failure() {
            Some(err) => Err(err),
            None => self.journal.commit(),
        };
        match result {
            Ok(()) => {
                for w in self.waiters.drain(..) {
                    // A dropped receiver is a caller that stopped waiting; the work is done anyway.
                    let _ = w.send(Ok(()));
                }
                if let Err(e) = self.journal.after_commit() {
                    self.fail(e);
                }
            }
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: SpoolError) {
        let reason = match e {
            SpoolError::Failed { reason } => reason,
            other => {
                tracing::error!(error = %other, "spool journal write failed; refusing further writes until restart");
                self.shared.fail(other.to_string());
                other.to_string()
            }
        };
        for w in self.waiters.drain(..) {
            let reason = reason.clone();
            let _ = w.send(Err(SpoolError::Failed { reason }));
        }
    }
}

fn refuse(req: Request, err: SpoolError) {
    let reply = match req {
        Request::Post(p) => p.reply,
        Request::Complete { reply, .. } | Request::Flush { reply } => reply,
        Request::Outcome { .. } => return,
        Request::Body { reply, .. } => {
            let _ = reply.send(Err(err));
            return;
        }
    };
    let _ = reply.send(Err(err));
}
