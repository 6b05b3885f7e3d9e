//! Room per destination: each destination holds at most its share of the in-memory queue; the
//! copies beyond it wait in the deferred queue on disk, in arrival order, until it has room.
//!
//! Why: a destination that answers but slowly (500 ms a reply, a tarpit, a provider that
//! throttles hard) cannot take its share of a busy site's load under a sane connection limit.
//! Without a bound of its own, its copies piled up in the in-memory queue — 160,000 to 400,000
//! of them in a 25-minute soak, each keeping its post's rendered template alive — until they
//! filled `max_queued_copies` and the scheduler took no new fan-out work: members on healthy
//! hosts starved as they did behind dead hosts before the deferred queue. Postfix keeps its
//! active queue apart from the incoming queue for this reason; here the bound is per
//! destination, so one slow destination never takes the place of the others.
//!
//! - The bound ([`Actor::room_bound`]) is what the destination can use soon: its connection
//!   limit now × the batch size × [`BATCHES_AHEAD`], at least [`ROOM_FLOOR`] (a destination
//!   ramping up is not cut short), and at most a [`WINDOW_SHARE`]th of `max_queued_copies` (a
//!   few slow destinations never fill the window). A fast destination at 20 connections may
//!   hold 2,560 copies (defaults): more than it sends in a tick, so it is never slowed.
//! - A copy that may be tried now for a destination over its bound — or with copies already
//!   waiting for room, so arrival order holds — is parked ([`Actor::queue_or_overflow`]). This is
//!   no deferral: no try is charged, nothing reaches bounce scoring, no event or log line per
//!   copy, and its expiry clock (its post's acceptance time) is unchanged. Its line is written
//!   once and read once (no churn); its post's bytes go to disk with the other parked posts'
//!   once no copy of it is in memory (`DeferredStore::spill_idle`), so memory follows the
//!   window, not the backlog.
//! - They come back, oldest first, when the destination's ready copies fall below half its
//!   bound (the low-water mark), up to the bound: at once when a batch is taken
//!   ([`Actor::top_up`], within the window's room), and each tick ([`Actor::refill_overflow`],
//!   at most `RESUME_PER_TICK` lines, destinations with the oldest copies first, at least one
//!   batch past a full window). Retries due come back first each tick, and may fill the share
//!   and one batch past it (`parking.rs`), so copies waiting for room never starve them. A
//!   destination whose every host is down keeps its copies here until a host answers.
//! - Like every parked copy, they are an index of work, not the truth: after `kill -9` the
//!   spool's journal re-expands every undelivered copy.

use crate::actor::parking::RESUME_PER_TICK;
use crate::actor::Actor;
use crate::messages::{Job, Selector};
use herald_types::LaneKind;
use std::collections::VecDeque;
use std::sync::Arc;

/// No destination's share is cut below this many copies (a destination just met starts with two
/// connections: this keeps it fed while its connection limit ramps up).
pub const ROOM_FLOOR: usize = 256;

/// Batches per connection a destination may have waiting in memory: enough that its connections
/// never wait for the next refill (one per batch taken, and each tick).
pub const BATCHES_AHEAD: usize = 8;

/// A destination holds at most this fraction of `max_queued_copies` (the denominator).
pub const WINDOW_SHARE: usize = 4;

impl Actor {
    /// The most copies destination `key` holds in memory for first attempts and copies that
    /// waited for room (see the module doc).
    pub(crate) fn room_bound(&self, key: &Arc<str>) -> usize {
        let batch = self.cfg.max_copies_per_batch.max(1);
        let mut conns = self.cfg.max_connections_per_destination.max(1);
        if let Some(d) = self.dests.get(key) {
            if let Some(b) = self.budgets.get(&d.budget) {
                conns = conns.min(b.connection_limit());
            }
            if self.health.all_tarpits(&d.hosts, self.clock.now_ms()) {
                conns = conns.min(self.cfg.tarpit_connections.max(1));
            }
        }
        let usable = conns
            .saturating_mul(batch)
            .saturating_mul(BATCHES_AHEAD)
            .max(ROOM_FLOOR);
        usable.min((self.cfg.max_queued_copies / WINDOW_SHARE).max(batch))
    }

    /// Queues `job` (not counted in the queue yet), which may be tried now, for destination
    /// `key`: in memory while the destination is under `bound` and none of its copies waits for
    /// room, else parked until it has room. True when it went to memory (pump the destination).
    pub(crate) fn queue_or_overflow(&mut self, key: &Arc<str>, job: Job, bound: usize) -> bool {
        let Some(d) = self.dests.get_mut(key) else {
            tracing::error!(dest = %key, post = %job.post.id, "a copy for an unknown destination stays undelivered until the next start");
            return false;
        };
        if d.overflow.is_empty() && d.ready_len() < bound {
            self.push_ready(key, job);
            return true;
        }
        if d.overflow.is_empty() {
            tracing::debug!(dest = %key, bound, "destination holds its share of the in-memory queue: further copies wait on disk for room");
        }
        d.overflow.push_back(self.deferred.park(job));
        false
    }

    /// After a batch was taken from `key`: copies waiting for room come back if it fell below
    /// its low-water mark, within the window's room (the tick gives at least a batch).
    pub(crate) fn top_up(&mut self, key: &Arc<str>) {
        let room = self.cfg.max_queued_copies.saturating_sub(self.queued);
        let (_, expired) = self.refill(key, RESUME_PER_TICK.min(room), None);
        // Without `now_ms`, refill expires nothing.
        debug_assert!(expired.is_empty());
    }

    /// Each tick: copies waiting for room come back to the destinations below their low-water
    /// mark, the ones with the oldest copies first, within `RESUME_PER_TICK` lines and the
    /// window's room (at least one batch). Copies past their list's age expire instead.
    pub(crate) async fn refill_overflow(&mut self) {
        let batch = self.cfg.max_copies_per_batch.max(1);
        let mut room = self
            .cfg
            .max_queued_copies
            .saturating_sub(self.queued)
            .max(batch);
        let mut reads = RESUME_PER_TICK;
        let mut keys: Vec<(u64, Arc<str>)> = self
            .dests
            .iter()
            .filter_map(|(k, d)| d.overflow.front().map(|c| (c.accepted_ms, k.clone())))
            .collect();
        keys.sort_unstable();
        let now_ms = self.clock.now_ms();
        for (_, key) in keys {
            if reads == 0 || room == 0 {
                break;
            }
            let (read, expired) = self.refill(&key, reads.min(room), Some(now_ms));
            reads -= read;
            room = room.saturating_sub(read);
            for job in expired {
                self.forget_straggler(&job);
                self.expire(job).await;
            }
            if read > 0 {
                self.pump(&key);
            }
        }
    }

    /// Brings back up to `reads` copies waiting for room at `key`, oldest first, when its ready
    /// copies are below half its bound, and not past the bound; none while every host of it is
    /// down. A copy whose domain's route changed meanwhile goes where it leads now (as a
    /// resumed retry does; that destination is pumped by the tick). With `now_ms`, copies past
    /// their list's age are returned instead (to expire). Returns the lines read and those.
    fn refill(&mut self, key: &Arc<str>, reads: usize, now_ms: Option<u64>) -> (usize, Vec<Job>) {
        let bound = self.room_bound(key);
        let down = self.down_until(key).is_some();
        let Some(d) = self.dests.get_mut(key) else {
            return (0, Vec::new());
        };
        if d.overflow.is_empty() || down || d.ready_len() >= bound / 2 {
            return (0, Vec::new());
        }
        let want = bound
            .saturating_sub(d.ready_len())
            .min(reads)
            .min(d.overflow.len());
        let copies: Vec<_> = d.overflow.drain(..want).collect();
        let mut expired = Vec::new();
        for copy in copies {
            let Some(job) = self.deferred.resume(copy) else {
                continue;
            };
            if now_ms.is_some_and(|t| job.expired(t)) {
                expired.push(job);
                continue;
            }
            let target = self.route_now(key, &job);
            if target == *key {
                self.push_ready(key, job);
            } else {
                let bound = self.room_bound(&target);
                self.queue_or_overflow(&target, job, bound);
            }
        }
        (want, expired)
    }

    /// Where a copy for `from` goes now: its domain's current route (in its egress pool's
    /// variant), else `from`.
    fn route_now(&mut self, from: &Arc<str>, job: &Job) -> Arc<str> {
        match self.current_destination(job.domain()).cloned() {
            Some(key) => {
                let key = self.pooled(&key, job);
                if self.dests.contains_key(&key) {
                    key
                } else {
                    from.clone()
                }
            }
            None => from.clone(),
        }
    }

    /// Puts `job` in `key`'s ready queue of its lane, counted.
    fn push_ready(&mut self, key: &Arc<str>, job: Job) {
        let Some(d) = self.dests.get_mut(key) else {
            tracing::error!(dest = %key, post = %job.post.id, "a copy for an unknown destination stays undelivered until the next start");
            return;
        };
        self.queued += 1;
        match job.lane {
            LaneKind::Fast => d.fast.push_back(job),
            LaneKind::Slow => {
                self.slow_queued += 1;
                d.slow.push_back(job);
            }
        }
    }

    /// Copies waiting for room in destinations' overflow `sel` matches, taken out of the
    /// deferred queue (a line read for nothing is parked again in its place).
    pub(crate) fn take_overflow(&mut self, sel: &Selector) -> Vec<(Arc<str>, Job)> {
        let keys: Vec<Arc<str>> = self
            .dests
            .iter()
            .filter(|(_, d)| d.overflow.iter().any(|c| sel.may_match(c)))
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for key in keys {
            let Some(d) = self.dests.get_mut(&key) else {
                continue;
            };
            let all = std::mem::take(&mut d.overflow);
            let mut keep = VecDeque::with_capacity(all.len());
            for copy in all {
                if !sel.may_match(&copy) {
                    keep.push_back(copy);
                    continue;
                }
                let Some(job) = self.deferred.resume(copy) else {
                    continue;
                };
                if sel.matches(&job) {
                    out.push((key.clone(), job));
                } else {
                    keep.push_back(self.deferred.park(job));
                }
            }
            if let Some(d) = self.dests.get_mut(&key) {
                d.overflow = keep;
            }
        }
        out
    }

    /// The operator's retry-now for copies waiting for room: they go to the front of their
    /// destination's overflow (they are tried before the others as soon as it has room).
    /// Returns how many.
    pub(crate) fn overflow_first(&mut self, sel: &Selector) -> u64 {
        let hits = self.take_overflow(sel);
        let n = hits.len() as u64;
        for (key, job) in hits.into_iter().rev() {
            // (Taken from a destination of this map a moment ago, in this call.)
            if self.dests.contains_key(&key) {
                let copy = self.deferred.park(job);
                if let Some(d) = self.dests.get_mut(&key) {
                    d.overflow.push_front(copy);
                }
            }
        }
        n
    }

    /// Copies waiting for room, over every destination.
    pub(crate) fn overflow_len(&self) -> usize {
        self.dests.values().map(|d| d.overflow.len()).sum()
    }
}
