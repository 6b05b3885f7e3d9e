//! Per-destination queues. A destination is the set of MX hosts that serves one or more recipient
//! domains (keyed by the sorted MX host names, plus the MTA-STS and DANE requirements when they
//! apply: `actor/routes.rs`), so every domain hosted at one provider shares one queue;
//! pending copies of every post for it are one entry (stragglers are coalesced).
//!
//! Each destination has two lanes: `fast` (first attempts) and the slow lane (`slow` ready
//! retries); beside them `waiting`, the index of its copies parked in the deferred queue
//! (`actor/deferred.rs`: on disk, not counted in the in-memory queue) until their time, and
//! `overflow`, the copies parked because the destination already had its share of the
//! in-memory queue (`actor/overflow.rs`), oldest first. Ready queues are round robin over posts
//! ([`ReadyQueue`]): a batch is taken from one post, then the next post gets its turn, so a
//! 50-member post is not queued behind a million-member one (Postfix's preemptive scheduling in
//! its simplest form).
//!
//! Owned by the scheduler actor alone: no locks. Workers get batches through the actor.

use crate::actor::deferred::ParkedCopy;
use crate::messages::Job;
use herald_routing::{DaneRoute, MxHost, StsRoute};
use herald_types::PostId;
use herald_types::{DeferralKind, LaneKind};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A copy parked in the deferred queue until `at` (its retry time, or its down destination's
/// probe time). Ordered so the earliest time is at the top of the heap.
pub struct Waiting {
    pub at: Instant,
    pub seq: u64,
    pub kind: DeferralKind,
    pub copy: ParkedCopy,
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A connected worker waiting for its next batch.
pub struct Parked {
    pub until: Instant,
    /// Copies the worker can take now (its share of the unjournaled window).
    pub max: usize,
    pub reply: oneshot::Sender<Vec<Job>>,
}

/// Posts' room an empty ready queue keeps (see [`ReadyQueue::release_if_empty`]).
const KEEP_POSTS: usize = 16;

/// One post's ready copies within a destination.
struct PostQueue {
    post: PostId,
    accepted_ms: u64,
    jobs: VecDeque<Job>,
}

/// Ready copies of one lane, round robin over posts.
#[derive(Default)]
pub struct ReadyQueue {
    posts: VecDeque<PostQueue>,
    len: usize,
}

impl ReadyQueue {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Acceptance time of the oldest post with ready copies.
    pub fn oldest_ms(&self) -> Option<u64> {
        self.posts.iter().map(|p| p.accepted_ms).min()
    }

    fn queue_of(&mut self, post: PostId, accepted_ms: u64) -> &mut PostQueue {
        // Most pushes are for the post pushed last (pages arrive in order): look there first.
        let i = match self.posts.iter().rposition(|p| p.post == post) {
            Some(i) => i,
            None => {
                self.posts.push_back(PostQueue {
                    post,
                    accepted_ms,
                    jobs: VecDeque::new(),
                });
                self.posts.len() - 1
            }
        };
        &mut self.posts[i]
    }

    pub fn push_back(&mut self, job: Job) {
        self.len += 1;
        self.queue_of(job.post.id, job.post.accepted_at_ms)
            .jobs
            .push_back(job);
    }

    /// Puts a job back where it was taken from (a worker went away before using it).
    pub fn push_front(&mut self, job: Job) {
        self.len += 1;
        self.queue_of(job.post.id, job.post.accepted_at_ms)
            .jobs
            .push_front(job);
    }

    /// Up to `max` jobs within `max_bytes` of spliced size (at least one), taken from the post
    /// whose turn it is, then from the next ones; each post served goes to the back.
    pub fn take_batch(&mut self, max: usize, max_bytes: usize, batch: &mut Vec<Job>) {
        let mut bytes = 0;
        let mut turns = self.posts.len();
        while batch.len() < max && turns > 0 {
            turns -= 1;
            let Some(mut q) = self.posts.pop_front() else {
                break;
            };
            while batch.len() < max {
                let Some(job) = q.jobs.front() else { break };
                let size = job.post.template.size_hint();
                if !batch.is_empty() && bytes + size > max_bytes {
                    turns = 0;
                    break;
                }
                bytes += size;
                if let Some(job) = q.jobs.pop_front() {
                    self.len -= 1;
                    batch.push(job);
                }
            }
            if !q.jobs.is_empty() {
                self.posts.push_back(q);
            }
        }
        self.release_if_empty();
    }

    /// An emptied queue gives back the room its posts took at their peak: a destination that
    /// once had hundreds of posts queued (a backlog, a slow host) would otherwise keep 48 bytes
    /// a post of capacity, in each lane, for the life of the process (at idle after a 150-post
    /// backlog to 300 destinations: 1.1 MB, a third of the heap the drained process held more
    /// than a fresh one). Small queues keep theirs, so a destination fed one post at a time does
    /// not reallocate for every batch.
    fn release_if_empty(&mut self) {
        if self.posts.is_empty() && self.posts.capacity() > KEEP_POSTS {
            self.posts = VecDeque::new();
        }
    }

    /// Takes every job out.
    pub fn drain(&mut self) -> Vec<Job> {
        self.len = 0;
        let jobs = self.posts.drain(..).flat_map(|q| q.jobs).collect();
        self.release_if_empty();
        jobs
    }

    /// Room for posts the queue holds now (for tests of what it gives back).
    #[cfg(test)]
    pub fn posts_capacity(&self) -> usize {
        self.posts.capacity()
    }
}

/// One destination's queues and state.
pub struct Destination {
    pub key: Arc<str>,
    pub hosts: Arc<Vec<MxHost>>,
    /// The shaping budget this destination draws from (a rule's name or its MX host set).
    pub budget: Arc<str>,
    /// What the MTA-STS policy of the domains routed here requires (None: no policy applies).
    pub sts: Option<Arc<StsRoute>>,
    /// What DANE requires of the hosts (None: DANE is off). Replaced on each resolution of a
    /// domain routed here: TLSA records belong to the hosts, so the newest answer is right for
    /// every domain that shares them (the key keeps apart domains whose MX answers differ).
    pub dane: Option<Arc<DaneRoute>>,
    pub fast: ReadyQueue,
    pub slow: ReadyQueue,
    pub waiting: BinaryHeap<Waiting>,
    /// Copies that may be tried now but wait in the deferred queue for room in this
    /// destination's in-memory share (`actor/overflow.rs`), in arrival order.
    pub overflow: VecDeque<ParkedCopy>,
    /// Oldest acceptance time among waiting copies (reset when `waiting` empties; may be older
    /// than the oldest still waiting — an upper bound on age, kept in O(1)).
    pub oldest_waiting_ms: Option<u64>,
    /// Workers started, per lane (connecting or connected).
    pub fast_workers: usize,
    pub slow_workers: usize,
    /// Workers still connecting.
    pub connecting: usize,
    pub parked: Vec<Parked>,
    pub last_error: Option<String>,
    pub delivered: u64,
    pub deferred: u64,
    pub failed: u64,
    /// The greylisting interval learned here: the shortest wait after which a greylisted copy
    /// got through (an upper bound of the server's interval).
    pub grey_interval: Option<std::time::Duration>,
    /// The egress pool its connections leave from (its key ends `|egress=<pool>`).
    pub egress_pool: Option<Arc<str>>,
}

impl Destination {
    pub fn new(key: Arc<str>, hosts: Arc<Vec<MxHost>>, budget: Arc<str>) -> Destination {
        Destination {
            key,
            hosts,
            budget,
            sts: None,
            dane: None,
            fast: ReadyQueue::default(),
            slow: ReadyQueue::default(),
            waiting: BinaryHeap::new(),
            overflow: VecDeque::new(),
            oldest_waiting_ms: None,
            fast_workers: 0,
            slow_workers: 0,
            connecting: 0,
            parked: Vec::new(),
            last_error: None,
            delivered: 0,
            deferred: 0,
            failed: 0,
            grey_interval: None,
            egress_pool: None,
        }
    }

    /// A greylisted copy got through `waited` after it was first greylisted.
    pub fn learn_greylist(&mut self, waited: std::time::Duration) {
        self.grey_interval = Some(self.grey_interval.map_or(waited, |g| g.min(waited)));
    }

    pub fn workers(&self) -> usize {
        self.fast_workers + self.slow_workers
    }

    pub fn ready_len(&self) -> usize {
        self.fast.len() + self.slow.len()
    }

    pub fn queued(&self) -> usize {
        self.ready_len() + self.parked_len()
    }

    /// Copies of the destination in the deferred queue: waiting for a time, or for room.
    pub fn parked_len(&self) -> usize {
        self.waiting.len() + self.overflow.len()
    }

    pub fn oldest_ms(&self) -> Option<u64> {
        [
            self.fast.oldest_ms(),
            self.slow.oldest_ms(),
            self.oldest_waiting_ms,
            self.overflow.front().map(|c| c.accepted_ms),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub fn push_waiting(&mut self, w: Waiting) {
        let accepted = w.copy.accepted_ms;
        self.oldest_waiting_ms = Some(self.oldest_waiting_ms.map_or(accepted, |o| o.min(accepted)));
        self.waiting.push(w);
    }

    /// The next parked copy whose time has come, if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<Waiting> {
        if self.waiting.peek().is_none_or(|w| w.at > now) {
            return None;
        }
        let w = self.waiting.pop();
        self.after_waiting_pop();
        w
    }

    /// The host came back: every parked copy may be tried now, except greylisted ones (whose
    /// interval the server set). Only times change; the copies come back from the deferred
    /// queue in bounded batches (`actor/parking.rs`).
    pub fn wake_waiting(&mut self, now: Instant) {
        let mut all = std::mem::take(&mut self.waiting).into_vec();
        for w in &mut all {
            if w.kind != DeferralKind::Greylist {
                w.at = w.at.min(now);
            }
        }
        self.waiting = all.into();
    }

    fn after_waiting_pop(&mut self) {
        if self.waiting.is_empty() {
            self.oldest_waiting_ms = None;
        }
        // A destination that once had many copies parked (a big domain down for an hour)
        // would otherwise keep the heap's peak capacity, 96 bytes a copy, for the life of the
        // process: give it back once three quarters of it are unused.
        if self.waiting.capacity() > 1024 && self.waiting.len() < self.waiting.capacity() / 4 {
            self.waiting.shrink_to(self.waiting.len() * 2);
        }
    }

    /// A batch for a worker of `lane`: its own lane first, then the other one (an open, healthy
    /// connection carries whatever is ready: stragglers ride along with first attempts).
    pub fn take_batch(&mut self, lane: LaneKind, max: usize, max_bytes: usize) -> Vec<Job> {
        let mut batch = Vec::new();
        let (first, second) = match lane {
            LaneKind::Fast => (&mut self.fast, &mut self.slow),
            LaneKind::Slow => (&mut self.slow, &mut self.fast),
        };
        first.take_batch(max, max_bytes, &mut batch);
        if batch.is_empty() {
            second.take_batch(max, max_bytes, &mut batch);
        }
        batch
    }

    /// Puts jobs a worker could not take back at the front of their lanes.
    pub fn put_back(&mut self, batch: Vec<Job>) {
        for job in batch.into_iter().rev() {
            match job.lane {
                LaneKind::Fast => self.fast.push_front(job),
                LaneKind::Slow => self.slow.push_front(job),
            }
        }
    }
}

/// The queue key of a resolved domain: its MX host names, sorted, joined by commas. Domains that
/// share all their MX hosts share a destination.
pub fn destination_key(hosts: &[MxHost]) -> Arc<str> {
    let mut names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    Arc::from(names.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::hand_rig::job;
    use crate::workers::scripted::test_post_at;

    /// A destination that had 500 posts queued at once (a backlog) gives their room back when
    /// its queue empties, through batches or a drain; one that never held more than a few
    /// keeps its small room.
    #[test]
    fn an_emptied_ready_queue_gives_back_its_peak_room() {
        let posts: Vec<_> = (1..=500).map(|i| test_post_at(i, 0, u64::MAX)).collect();
        let mut q = ReadyQueue::default();
        for (i, p) in posts.iter().enumerate() {
            q.push_back(job(p, i as i64, "a@x.test"));
        }
        assert!(q.posts_capacity() >= 500);
        let mut taken = 0;
        while !q.is_empty() {
            let mut batch = Vec::new();
            q.take_batch(100, usize::MAX, &mut batch);
            assert!(
                !batch.is_empty(),
                "a batch from a queue with jobs came back empty"
            );
            taken += batch.len();
        }
        assert_eq!(taken, 500);
        assert_eq!(q.posts_capacity(), 0, "an emptied queue kept its peak room");

        for (i, p) in posts.iter().enumerate() {
            q.push_back(job(p, i as i64, "a@x.test"));
        }
        assert_eq!(q.drain().len(), 500);
        assert_eq!(q.posts_capacity(), 0, "a drained queue kept its peak room");

        q.push_back(job(&posts[0], 1, "a@x.test"));
        let small = q.posts_capacity();
        let mut batch = Vec::new();
        q.take_batch(100, usize::MAX, &mut batch);
        assert_eq!(
            q.posts_capacity(),
            small,
            "a small queue reallocates for every batch"
        );
    }
}
