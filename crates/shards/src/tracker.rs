//! The shards this node holds, and what has become of their copies here: the scheduler's
//! report loop tells it of every final outcome ([`FinalSink`]), the reporter reads it once per
//! interval and writes one batched report for all of them.
//!
//! Why a std `Mutex`: the report loop calls in once per final copy and never awaits under the
//! lock; the reporter holds it only to copy out the dirty shards' bitmaps. No `.await` happens
//! under it anywhere.
//!
//! It also wakes the node's loop ([`Tracker::wake`]) when a held shard completes here or this
//! node published a post: the loop reports and claims at once instead of at its next interval,
//! so a node does not sit idle between two shards (the fixed cost of sharing on short posts).

use herald_directory::{ShardKey, ShardNext, ShardReport};
use herald_scheduler::FinalSink;
use herald_spool::DoneSet;
use herald_types::{MemberId, PostId};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

/// One shard held here: the local post that fans it out, and its finished members.
#[derive(Debug)]
pub(crate) struct Held {
    pub key: ShardKey,
    pub lo: MemberId,
    pub hi: MemberId,
    /// Finished members of the shard: those reported before the claim plus this node's.
    pub done: DoneSet,
    /// Finished here since the last report written.
    pub dirty: bool,
    /// Every recipient of the local post is final.
    pub completed: bool,
    /// A drain asked for it back: the local copies are being given up; when the local post
    /// completes, the shard goes back open with what really finished.
    pub handing_back: bool,
    /// Copies a drain gave up here: not finished, the next owner sends them.
    pub gave_up: u64,
}

impl Held {
    /// Where this shard goes with the report being written.
    fn next(&self) -> ShardNext {
        match (self.completed, self.handing_back) {
            (false, _) => ShardNext::Keep,
            (true, false) => ShardNext::Done,
            (true, true) => ShardNext::HandBack,
        }
    }
}

/// Every shard held by this node, by local post id.
#[derive(Debug, Default)]
pub struct Tracker {
    held: Mutex<HashMap<PostId, Held>>,
    /// Something for the node's loop to do before its next interval. A `Notify` keeps one
    /// permit: wakes while the loop is busy collapse into one more pass, never a backlog.
    wake: Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Tracker {
    /// Asks the node's loop for a report-and-claim pass now.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Until [`Tracker::wake`] is called (at once if it was since the last wait).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    pub(crate) fn insert(&self, post: PostId, held: Held) {
        lock(&self.held).insert(post, held);
    }

    /// The local post fanning out `key`, if this node holds it.
    pub(crate) fn local_post(&self, key: ShardKey) -> Option<PostId> {
        lock(&self.held)
            .iter()
            .find(|(_, h)| h.key == key)
            .map(|(p, _)| *p)
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.held).len()
    }

    /// Marks every held shard not yet complete as being handed back; returns their local posts.
    pub(crate) fn hand_back_all(&self) -> Vec<PostId> {
        let mut held = lock(&self.held);
        held.iter_mut()
            .filter(|(_, h)| !h.completed)
            .map(|(p, h)| {
                h.handing_back = true;
                *p
            })
            .collect()
    }

    /// Local posts still being handed back (not complete yet).
    pub(crate) fn handing_back(&self) -> Vec<PostId> {
        lock(&self.held)
            .iter()
            .filter(|(_, h)| h.handing_back && !h.completed)
            .map(|(p, _)| *p)
            .collect()
    }

    /// Forgets the shard of `post` (its lease was lost to another node).
    pub(crate) fn forget(&self, key: ShardKey) -> Option<PostId> {
        let mut held = lock(&self.held);
        let post = held.iter().find(|(_, h)| h.key == key).map(|(p, _)| *p)?;
        held.remove(&post);
        Some(post)
    }

    /// The reports to write now: every shard with new finished members or a new end. The
    /// bitmaps are copied under the lock (a shard's bitmap is small: its range only).
    pub(crate) fn reports(&self) -> Vec<(PostId, ShardReport)> {
        lock(&self.held)
            .iter()
            .filter(|(_, h)| h.dirty || h.completed)
            .map(|(p, h)| {
                (
                    *p,
                    ShardReport {
                        key: h.key,
                        done: h.done.to_bytes(),
                        copies_done: h.done.len(),
                        next: h.next(),
                    },
                )
            })
            .collect()
    }

    /// After the reports were written: complete shards leave the tracker, the others are
    /// clean unless more finished meanwhile (then the next report carries it).
    pub(crate) fn written(&self, reports: &[(PostId, ShardReport)]) {
        let mut held = lock(&self.held);
        for (post, r) in reports {
            let Some(h) = held.get_mut(post) else {
                continue;
            };
            if r.next != ShardNext::Keep {
                held.remove(post);
            } else if h.done.len() == r.copies_done {
                h.dirty = false;
            }
        }
    }
}

impl FinalSink for Tracker {
    fn finished(&self, post: PostId, member: MemberId, gave_up: bool) {
        let mut held = lock(&self.held);
        let Some(h) = held.get_mut(&post) else { return };
        // A drain's give-up lets the copy go to the next owner; an operator's give-up (herald
        // stragglers) is a verdict on the copy, final for the whole cluster.
        if gave_up && h.handing_back {
            h.gave_up += 1;
        } else if member >= h.lo && member <= h.hi && h.done.insert(member) {
            h.dirty = true;
        }
    }

    fn completed(&self, post: PostId) {
        let held = match lock(&self.held).get_mut(&post) {
            Some(h) => {
                h.completed = true;
                true
            }
            None => false,
        };
        if held {
            self.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(lo: i64, hi: i64) -> Held {
        Held {
            key: ShardKey {
                post: 1,
                shard_no: 0,
            },
            lo: MemberId(lo),
            hi: MemberId(hi),
            done: DoneSet::new(),
            dirty: false,
            completed: false,
            handing_back: false,
            gave_up: 0,
        }
    }

    /// Finals in range are reported once, out-of-range ones ignored, a given-up copy is not a
    /// finished one, and a complete shard is reported done (or handed back after a give-up)
    /// and then forgotten.
    #[test]
    fn finals_become_batched_reports() {
        let t = Tracker::default();
        let p = PostId(9);
        t.insert(p, held(10, 20));
        t.finished(p, MemberId(10), false);
        t.finished(p, MemberId(11), false);
        t.finished(p, MemberId(99), false);
        t.finished(PostId(8), MemberId(12), false);
        let r = t.reports();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].1.copies_done, r[0].1.next), (2, ShardNext::Keep));
        let set = DoneSet::from_bytes(&r[0].1.done).expect("decodes");
        assert!(set.contains(MemberId(10)) && set.contains(MemberId(11)));
        t.written(&r);
        assert!(t.reports().is_empty(), "nothing new");
        // The operator's give-up is final; a drain's is not.
        t.finished(p, MemberId(12), true);
        assert_eq!(t.hand_back_all(), vec![p]);
        t.finished(p, MemberId(13), true);
        t.completed(p);
        let r = t.reports();
        assert_eq!((r[0].1.copies_done, r[0].1.next), (3, ShardNext::HandBack));
        t.written(&r);
        assert_eq!(t.len(), 0);

        t.insert(p, held(1, 2));
        t.finished(p, MemberId(1), false);
        t.finished(p, MemberId(2), false);
        t.completed(p);
        assert_eq!(t.reports()[0].1.next, ShardNext::Done);
    }

    /// A held shard completing wakes the node's loop (once, however many wakes came while it
    /// was busy); a post that is not a held shard does not.
    #[tokio::test]
    async fn a_completed_shard_wakes_the_loop_at_once() {
        let short = std::time::Duration::from_millis(50);
        let t = Tracker::default();
        t.completed(PostId(77));
        assert!(tokio::time::timeout(short, t.woken()).await.is_err());
        t.insert(PostId(1), held(1, 2));
        t.insert(PostId(2), held(3, 4));
        t.completed(PostId(1));
        t.completed(PostId(2));
        tokio::time::timeout(short, t.woken())
            .await
            .expect("woken by a completed shard");
        assert!(
            tokio::time::timeout(short, t.woken()).await.is_err(),
            "two wakes while busy are one pass"
        );
    }
}
