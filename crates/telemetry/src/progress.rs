//! Per-post progress: how many copies are delivered, failed and pending, and how long it took to
//! reach 50 %, 95 % and 100 % of the deliverable recipients. Fed by events; read by the status API,
//! the demo's progress bar and the summary.
//!
//! Limits: the book keeps at most [`MAX_POSTS`] posts; the oldest completed posts are evicted
//! first. Delivery times are kept per post as u32 millisecond offsets (4 bytes a copy) so the
//! percentiles are exact; a 1,000,000-member post costs 4 MB here while it is in the book.

use crate::contention::{Contention, LockId};
use crate::event::Event;
use herald_types::{Address, PostId, RcptOutcome};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

/// Posts remembered at once.
pub const MAX_POSTS: usize = 1000;

struct PostState {
    list: Address,
    accepted_at_ms: u64,
    /// u64::MAX until fan-out has expanded the member list.
    recipients: AtomicU64,
    already_done: AtomicU64,
    delivered: AtomicU64,
    failed: AtomicU64,
    deferred_attempts: AtomicU64,
    complete: AtomicBool,
    /// Delivery times in ms after acceptance. A std Mutex: held for one push, never across await.
    delivered_at: Mutex<Vec<u32>>,
}

/// A snapshot of one post's progress.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PostSummary {
    pub post: String,
    pub list: String,
    pub accepted_at_ms: u64,
    /// Known once fan-out has expanded the member list.
    pub recipients: Option<u64>,
    /// Recipients finished before a restart (not counted in delivered/failed below).
    pub already_done: u64,
    pub delivered: u64,
    pub failed: u64,
    /// Attempts that ended in a temporary failure (a recipient may count several times).
    pub deferred_attempts: u64,
    /// Recipients without a final outcome yet.
    pub pending: Option<u64>,
    pub complete: bool,
    /// Milliseconds after acceptance at which the first copy and 50 %, 95 %, 100 % of the
    /// deliverable recipients (recipients minus failed ones) were delivered.
    pub t_first_ms: Option<u64>,
    pub t50_ms: Option<u64>,
    pub t95_ms: Option<u64>,
    pub t100_ms: Option<u64>,
}

#[derive(Default)]
pub(crate) struct ProgressBook {
    // RwLock: writers only add or evict posts; every attempt takes a read lock.
    posts: RwLock<HashMap<PostId, Arc<PostState>>>,
}

impl ProgressBook {
    pub(crate) fn observe(&self, event: &Event, c: &Contention) {
        match event {
            Event::PostAccepted {
                post,
                list,
                received_at_ms,
                ..
            } => self.insert(*post, list.clone(), *received_at_ms),
            Event::PostExpanded {
                post,
                recipients,
                already_done,
            } => {
                if let Some(p) = self.get(*post, c) {
                    p.already_done.store(*already_done, Relaxed);
                    p.recipients.store(*recipients, Relaxed);
                }
            }
            Event::Attempt(a) => {
                let Some(p) = self.get(a.post, c) else { return };
                match a.outcome {
                    RcptOutcome::Delivered(_) => {
                        let off = herald_types::unix_ms_now().saturating_sub(p.accepted_at_ms);
                        c.lock(LockId::ProgressTimes, &p.delivered_at)
                            .push(u32::try_from(off).unwrap_or(u32::MAX));
                        p.delivered.fetch_add(1, Relaxed);
                    }
                    RcptOutcome::Failed(_) => {
                        p.failed.fetch_add(1, Relaxed);
                    }
                    RcptOutcome::Deferred(_) => {
                        p.deferred_attempts.fetch_add(1, Relaxed);
                    }
                }
            }
            Event::PostCompleted { post } => {
                if let Some(p) = self.get(*post, c) {
                    p.complete.store(true, Relaxed);
                }
            }
            Event::Scheduler(_) | Event::Postmaster(_) => {}
        }
    }

    fn get(&self, post: PostId, c: &Contention) -> Option<Arc<PostState>> {
        c.read(LockId::ProgressIndex, &self.posts)
            .get(&post)
            .cloned()
    }

    fn get_untimed(&self, post: PostId) -> Option<Arc<PostState>> {
        self.posts
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&post)
            .cloned()
    }

    fn insert(&self, post: PostId, list: Address, accepted_at_ms: u64) {
        let mut posts = self.posts.write().unwrap_or_else(|e| e.into_inner());
        if posts.len() >= MAX_POSTS {
            evict_one(&mut posts);
        }
        posts.insert(
            post,
            Arc::new(PostState {
                list,
                accepted_at_ms,
                recipients: AtomicU64::new(u64::MAX),
                already_done: AtomicU64::new(0),
                delivered: AtomicU64::new(0),
                failed: AtomicU64::new(0),
                deferred_attempts: AtomicU64::new(0),
                complete: AtomicBool::new(false),
                delivered_at: Mutex::new(Vec::new()),
            }),
        );
    }

    pub(crate) fn summary(&self, post: PostId) -> Option<PostSummary> {
        self.get_untimed(post).map(|p| summarize(post, &p))
    }

    pub(crate) fn all(&self) -> Vec<PostSummary> {
        let posts = self.posts.read().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<PostSummary> = posts.iter().map(|(id, p)| summarize(*id, p)).collect();
        all.sort_by(|a, b| b.post.cmp(&a.post));
        all
    }
}

/// Evicts the oldest completed post, or the oldest post when none is complete.
fn evict_one(posts: &mut HashMap<PostId, Arc<PostState>>) {
    let victim = posts
        .iter()
        .filter(|(_, p)| p.complete.load(Relaxed))
        .map(|(id, _)| *id)
        .min()
        .or_else(|| posts.keys().min().copied());
    if let Some(id) = victim {
        posts.remove(&id);
    }
}

fn summarize(id: PostId, p: &PostState) -> PostSummary {
    let recipients = p.recipients.load(Relaxed);
    let recipients = (recipients != u64::MAX).then_some(recipients);
    let already_done = p.already_done.load(Relaxed);
    let delivered = p.delivered.load(Relaxed);
    let failed = p.failed.load(Relaxed);
    let mut times = p
        .delivered_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    times.sort_unstable();
    let deliverable = recipients.map(|r| r.saturating_sub(already_done + failed));
    let at = |fraction: f64| -> Option<u64> {
        let d = deliverable?;
        if d == 0 {
            return None;
        }
        let need = ((d as f64) * fraction).ceil().max(1.0) as usize;
        times.get(need - 1).map(|&t| u64::from(t))
    };
    PostSummary {
        post: id.to_string(),
        list: p.list.to_string(),
        accepted_at_ms: p.accepted_at_ms,
        recipients,
        already_done,
        delivered,
        failed,
        deferred_attempts: p.deferred_attempts.load(Relaxed),
        pending: recipients.map(|r| r.saturating_sub(already_done + delivered + failed)),
        complete: p.complete.load(Relaxed),
        t_first_ms: times.first().map(|&t| u64::from(t)),
        t50_ms: at(0.50),
        t95_ms: at(0.95),
        t100_ms: at(1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Attempt;
    use herald_types::{MemberId, Reply};

    fn observe(book: &ProgressBook, e: &Event) {
        book.observe(e, &Contention::default());
    }

    fn attempt(post: PostId, outcome: RcptOutcome) -> Event {
        Event::Attempt(Box::new(Attempt {
            post,
            member: MemberId(1),
            rcpt: "a@b.example".into(),
            relay: "none".into(),
            accepted_at_ms: 0,
            xdelay_ms: 0,
            tries: 1,
            tls: None,
            mta_sts: None,
            dane: None,
            source: None,
            outcome,
        }))
    }

    #[test]
    fn counts_outcomes_and_percentiles() {
        let book = ProgressBook::default();
        let post = PostId(9);
        let list = Address::parse("l@x.example").unwrap();
        observe(
            &book,
            &Event::PostAccepted {
                post,
                list,
                size: 10,
                received_at_ms: herald_types::unix_ms_now(),
                recovered: false,
            },
        );
        observe(
            &book,
            &Event::PostExpanded {
                post,
                recipients: 4,
                already_done: 0,
            },
        );
        let ok = || RcptOutcome::Delivered(Reply::new(250, None, "ok"));
        observe(&book, &attempt(post, ok()));
        observe(
            &book,
            &attempt(post, RcptOutcome::Deferred(Reply::new(451, None, "later"))),
        );
        observe(
            &book,
            &attempt(post, RcptOutcome::Failed(Reply::new(550, None, "no"))),
        );
        let s = book.summary(post).unwrap();
        assert_eq!((s.delivered, s.failed, s.deferred_attempts), (1, 1, 1));
        assert_eq!(s.pending, Some(2));
        assert!(s.t_first_ms.is_some());
        assert_eq!(s.t50_ms, None, "1 of 3 deliverable is not yet 50 %: {s:?}");
        observe(&book, &attempt(post, ok()));
        observe(&book, &attempt(post, ok()));
        observe(&book, &Event::PostCompleted { post });
        let s = book.summary(post).unwrap();
        assert_eq!(s.pending, Some(0));
        assert!(s.complete && s.t100_ms.is_some() && s.t95_ms.is_some());
    }

    #[test]
    fn book_is_bounded() {
        let book = ProgressBook::default();
        let list = Address::parse("l@x.example").unwrap();
        for i in 0..(MAX_POSTS as u64 + 10) {
            book.insert(PostId(i), list.clone(), 0);
        }
        assert_eq!(book.all().len(), MAX_POSTS);
        assert!(book.summary(PostId(0)).is_none());
    }
}
