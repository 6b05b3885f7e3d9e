//! Parking and resuming: how copies move between the in-memory queue (copies that may be tried
//! now, bounded by `max_queued_copies`) and the deferred queue (`deferred.rs`: on disk, with a
//! compact index per destination in `Destination::waiting`).
//!
//! - A deferred copy is parked with its retry time ([`Actor::park`]); so is a new copy for a
//!   destination whose every host is down, with the probe time (while the probe is out,
//!   `destination_backoff_secs` from now: a probe that connects makes it due at once).
//! - Each tick, due copies come back in bounded batches ([`Actor::resume_due`]): at most
//!   [`RESUME_PER_TICK`] lines read, and no more than the in-memory queue has room for (at
//!   least one batch a tick, so retries are never starved by fresh work), nor past their
//!   destination's share of it by more than a batch (`overflow.rs`). Destinations whose
//!   time came earliest go first.
//! - A due copy whose destination is still down is parked again until the probe time (its line
//!   written anew, so old segments empty); while the probe is due or out, its copies wait where
//!   they are — the probe needs none of them: when it connects, `host_back` makes every parked
//!   copy of the destination due at once.
//! - A resumed copy follows its domain's current route (`place`), like a deferral does.

use crate::actor::queue::Waiting;
use crate::actor::{Actor, Route};
use crate::messages::{Job, Selector};
use herald_types::{DeferralKind, LaneKind};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Lines read back from the deferred queue per tick at most (5 ticks a second by default:
/// 20,000 copies a second, far above what comes due at once outside a host coming back).
pub const RESUME_PER_TICK: usize = 4096;

/// What a due copy of a destination should do now.
enum DueAction {
    /// Back to the in-memory queue.
    Resume,
    /// Every host is down until this time: park again until then.
    ParkUntil(Instant),
    /// Every host is down and its probe is due or out: leave the copies be.
    Wait,
}

impl Actor {
    /// Parks `job` for destination `key` until `at` (the destination's index keeps it; the
    /// copy itself goes to the deferred queue). The caller has taken it out of the queue counts.
    pub(crate) fn park(&mut self, key: &Arc<str>, at: Instant, kind: DeferralKind, job: Job) {
        let Some(d) = self.dests.get_mut(key) else {
            tracing::error!(dest = %key, post = %job.post.id, "a copy parked for an unknown destination stays undelivered until the next start");
            return;
        };
        self.seq += 1;
        let copy = self.deferred.park(job);
        d.push_waiting(Waiting {
            at,
            seq: self.seq,
            kind,
            copy,
        });
    }

    /// When a destination's copies may be tried again if every host of it is down: its next
    /// probe, or `None` while it has a host that may be tried (or no such destination).
    pub(crate) fn down_until(&self, key: &Arc<str>) -> Option<DownUntil> {
        let d = self.dests.get(key)?;
        let now_ms = self.clock.now_ms();
        // (A host set without addresses is not "down": nothing was tried.)
        let addressed = d.hosts.iter().any(|h| !h.addrs.is_empty());
        if !addressed || !self.health.plan_is_empty(&d.hosts, now_ms) {
            return None;
        }
        Some(match self.health.next_probe_ms(&d.hosts) {
            Some(t) if t > now_ms => {
                DownUntil::Probe(Instant::now() + Duration::from_millis(t - now_ms))
            }
            _ => DownUntil::ProbeDue,
        })
    }

    /// When a new copy for `key` may be tried if it is parked on arrival: `None` when the
    /// destination has a host that may be tried; else its probe time, or, while the probe is
    /// due or out, `destination_backoff_secs` from now (a probe that connects makes it due).
    pub(crate) fn arrival_park_time(&self, key: &Arc<str>) -> Option<Instant> {
        match self.down_until(key)? {
            DownUntil::Probe(at) => Some(at),
            DownUntil::ProbeDue => {
                Some(Instant::now() + Duration::from_secs(self.cfg.destination_backoff_secs.max(1)))
            }
        }
    }

    fn due_action(&self, key: &Arc<str>) -> DueAction {
        match self.down_until(key) {
            None => DueAction::Resume,
            Some(DownUntil::Probe(at)) => DueAction::ParkUntil(at),
            Some(DownUntil::ProbeDue) => DueAction::Wait,
        }
    }

    /// Brings due parked copies back (see the module doc).
    pub(crate) async fn resume_due(&mut self, now: Instant) {
        let mut reads = RESUME_PER_TICK;
        let mut room = self
            .cfg
            .max_queued_copies
            .saturating_sub(self.queued)
            .max(self.cfg.max_copies_per_batch.max(1));
        let mut due: Vec<(Instant, Arc<str>)> = self
            .dests
            .iter()
            .filter_map(|(k, d)| {
                d.waiting
                    .peek()
                    .filter(|w| w.at <= now)
                    .map(|w| (w.at, k.clone()))
            })
            .collect();
        due.sort_unstable();
        let mut touched = Vec::new();
        for (_, key) in due {
            if reads == 0 {
                break;
            }
            let action = self.due_action(&key);
            if matches!(action, DueAction::Wait) {
                continue;
            }
            let (n, placed) = self.resume_from(&key, now, &action, reads, &mut room).await;
            reads -= n;
            touched.extend(placed);
        }
        touched.sort_unstable();
        touched.dedup();
        for key in touched {
            self.pump(&key);
        }
    }

    /// Resumes (or parks again) the due copies of one destination, within `reads` lines and
    /// `room` places. Returns the lines read and the destinations that got copies.
    async fn resume_from(
        &mut self,
        key: &Arc<str>,
        now: Instant,
        action: &DueAction,
        reads: usize,
        room: &mut usize,
    ) -> (usize, Vec<Arc<str>>) {
        let now_ms = self.clock.now_ms();
        // Retries may fill the destination's share of the window and one batch past it: copies
        // waiting for room (`overflow.rs`) fill it only to the share, so they never starve
        // retries, and a slow destination's retries never pile up in memory either.
        let cap = self.room_bound(key) + self.cfg.max_copies_per_batch.max(1);
        let mut read = 0;
        let mut placed = Vec::new();
        while read < reads {
            let Some(d) = self.dests.get_mut(key) else {
                break;
            };
            let resume = matches!(action, DueAction::Resume);
            let expired = d.waiting.peek().is_some_and(|w| w.copy.expires_ms < now_ms);
            if resume && (*room == 0 || d.ready_len() >= cap) && !expired {
                break;
            }
            let Some(w) = d.pop_due(now) else { break };
            read += 1;
            let kind = w.kind;
            let Some(job) = self.deferred.resume(w.copy) else {
                continue;
            };
            if job.expired(now_ms) {
                self.forget_straggler(&job);
                self.expire(job).await;
                continue;
            }
            match action {
                DueAction::ParkUntil(at) => self.park(key, *at, kind, job),
                _ => {
                    *room = room.saturating_sub(1);
                    placed.push(self.place(key, job).await);
                }
            }
        }
        (read, placed)
    }

    /// Puts a resumed copy in the in-memory queue: where its domain's route leads now (in its
    /// egress pool's variant), else back in `from`; waiting with the route while it is being
    /// resolved. Returns the destination to pump.
    pub(crate) async fn place(&mut self, from: &Arc<str>, job: Job) -> Arc<str> {
        let slow = usize::from(job.lane == LaneKind::Slow);
        let target = match self.routes.get_mut(job.domain()) {
            Some(Route::Resolving(jobs)) | Some(Route::RetryDns { jobs, .. }) => {
                self.queued += 1;
                self.slow_queued += slow;
                jobs.push(job);
                return from.clone();
            }
            Some(Route::Dead { cause, .. }) => {
                let cause = cause.clone();
                self.forget_straggler(&job);
                self.finish(job, cause).await;
                return from.clone();
            }
            Some(Route::Routed { key, .. }) => {
                let key = key.clone();
                let key = self.pooled(&key, &job);
                if self.dests.contains_key(&key) {
                    key
                } else {
                    from.clone()
                }
            }
            None => from.clone(),
        };
        let Some(d) = self.dests.get_mut(&target) else {
            tracing::error!(dest = %target, post = %job.post.id, "a resumed copy has no destination; it stays undelivered until the next start");
            return target;
        };
        self.queued += 1;
        self.slow_queued += slow;
        match job.lane {
            LaneKind::Fast => d.fast.push_back(job),
            LaneKind::Slow => d.slow.push_back(job),
        }
        target
    }

    /// A slow-lane copy that leaves the scheduler for good leaves the straggler index.
    pub(crate) fn forget_straggler(&mut self, job: &Job) {
        if job.lane == LaneKind::Slow {
            self.stragglers.remove(&job.member.address.to_string());
        }
    }

    /// Takes every parked copy `sel` matches out of the deferred queue (the hashes say which
    /// lines to read back; a line read for nothing is parked again as it was).
    pub(crate) fn take_parked(&mut self, sel: &Selector) -> Vec<(Arc<str>, DeferralKind, Job)> {
        let keys: Vec<Arc<str>> = self.dests.keys().cloned().collect();
        let mut out = Vec::new();
        for key in keys {
            let Some(d) = self.dests.get_mut(&key) else {
                continue;
            };
            let (candidates, keep): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut d.waiting)
                .into_vec()
                .into_iter()
                .partition(|w| sel.may_match(&w.copy));
            d.waiting = keep.into();
            for w in candidates {
                let (at, kind) = (w.at, w.kind);
                let Some(job) = self.deferred.resume(w.copy) else {
                    continue;
                };
                if sel.matches(&job) {
                    out.push((key.clone(), kind, job));
                } else {
                    self.park(&key, at, kind, job);
                }
            }
            if let Some(d) = self.dests.get_mut(&key) {
                if d.waiting.is_empty() {
                    d.oldest_waiting_ms = None;
                }
            }
        }
        out
    }
}

/// A down destination's next chance.
pub(crate) enum DownUntil {
    /// Its first probe is due then.
    Probe(Instant),
    /// A probe is due now or out.
    ProbeDue,
}

impl Selector {
    /// True when a parked copy may match (by post id, or by its hashes: confirmed on its job).
    pub(crate) fn may_match(&self, copy: &crate::actor::deferred::ParkedCopy) -> bool {
        use crate::actor::deferred::fold_hash;
        match self {
            Selector::Recipient(a) => copy.rcpt_hash == fold_hash(a),
            Selector::Domain(d) => copy.domain_hash == fold_hash(d),
            Selector::Post(p) => copy.post == *p,
        }
    }
}
