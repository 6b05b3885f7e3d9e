//! Handing out work: batches to connected workers, and new connections where a destination can
//! use them — within the global budget, the slow lane's share, the destination's shaping budget
//! (AIMD connection limit and message rate) and host health (no connection to a down host before
//! its probe; only one connection at a time while a destination has not proven itself, so a
//! hung host holds one worker, not twenty).
//!
//! When the global budget is spent, destinations wait in a heap ordered by observed latency:
//! fastest first (seeds/000: deliver to the hosts that answer fast first).
//!
//! Tarpits: a destination whose every usable host is a tarpit is served by
//! the slow lane alone — first attempts too — with up to `tarpit_connections` connections,
//! each kept while copies are ready and given an even share of them; the first pass never
//! plans a tarpit host (a destination with another host uses that one).

use crate::actor::queue::Parked;
use crate::actor::{Actor, Starved};
use crate::messages::Job;
use crate::workers::{self, WorkerPlan};
use herald_types::LaneKind;
use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

impl Actor {
    pub(crate) fn on_need_work(
        &mut self,
        dest: Arc<str>,
        lane: LaneKind,
        max: usize,
        reply: oneshot::Sender<Vec<Job>>,
    ) {
        let idle = Duration::from_millis(self.cfg.idle_connection_ms);
        if self.shutting_down {
            let _ = reply.send(Vec::new());
            return;
        }
        let batch = self.take_batch(&dest, lane, max);
        if !self.dests.contains_key(&dest) {
            let _ = reply.send(Vec::new());
            return;
        }
        if batch.is_empty() {
            if self.starving() {
                // The global budget is spent and another destination has copies ready: this
                // idle connection's slot serves them now instead of waiting out its idle time
                // (on 2,000 domains, 890 idle connections held all 1,000 slots while 926
                // destinations with 126,000 ready copies waited).
                let _ = reply.send(Vec::new());
                return;
            }
            let Some(d) = self.dests.get_mut(&dest) else {
                let _ = reply.send(Vec::new());
                return;
            };
            d.parked.push(Parked {
                until: Instant::now() + idle,
                max,
                reply,
            });
            if self.idle_set.insert(dest.clone()) {
                self.idle_dests.push_back(dest);
            }
            return;
        }
        if let Err(batch) = reply.send(batch) {
            // The worker is gone; its copies go back to the front of their lanes.
            self.put_back(&dest, batch);
        }
    }

    /// Copies a worker could not take go back to the front of their lanes.
    pub(crate) fn put_back(&mut self, dest: &Arc<str>, batch: Vec<Job>) {
        let slow = batch.iter().filter(|j| j.lane == LaneKind::Slow).count();
        self.queued += batch.len();
        self.slow_queued += slow;
        if let Some(d) = self.dests.get_mut(dest) {
            d.put_back(batch);
        }
    }

    /// A batch of at most `max` copies (and `max_copies_per_batch`) from a destination within
    /// its budget's message rate.
    fn take_batch(&mut self, dest: &Arc<str>, lane: LaneKind, max: usize) -> Vec<Job> {
        let (mut max, bytes) = (self.cfg.max_copies_per_batch.min(max), self.cfg.batch_bytes);
        let now_ms = self.clock.now_ms();
        let Some(d) = self.dests.get_mut(dest) else {
            return Vec::new();
        };
        if self.health.all_tarpits(&d.hosts, now_ms) {
            // Each copy costs a tarpit seconds of trickled replies: an even share per connection,
            // so they all finish together instead of one carrying a full batch at the end.
            let share = d.ready_len().div_ceil(self.cfg.tarpit_connections.max(1));
            max = max.min(share.max(1));
        }
        let want = max.min(d.ready_len());
        if want == 0 {
            return Vec::new();
        }
        let allowed = match self.budgets.get_mut(&d.budget) {
            Some(b) => b.take(want, Instant::now()),
            None => want,
        };
        if allowed == 0 {
            return Vec::new();
        }
        let batch = d.take_batch(lane, allowed, bytes);
        let has_overflow = !d.overflow.is_empty();
        // In flight is not queued: deferred copies are counted again when they come back.
        let slow = batch.iter().filter(|j| j.lane == LaneKind::Slow).count();
        self.queued = self.queued.saturating_sub(batch.len());
        self.slow_queued = self.slow_queued.saturating_sub(slow);
        if has_overflow {
            // Copies waiting for room come back now, not at the next tick: a destination
            // that takes its work fast is never held up by its own bound.
            self.top_up(dest);
        }
        batch
    }

    /// Gives ready work to parked workers and starts the connections the destination can use.
    pub(crate) fn pump(&mut self, key: &Arc<str>) {
        if self.shutting_down {
            return;
        }
        self.feed_parked(key);
        loop {
            let Some(lane) = self.wanted_lane(key) else {
                return;
            };
            if self.connections >= self.cfg.max_connections {
                if self.starved_set.insert(key.clone()) {
                    self.release_idle_worker();
                    self.seq += 1;
                    let latency = self
                        .dests
                        .get(key)
                        .map_or(0.0, |d| self.health.latency_ms(&d.hosts));
                    self.starved.push(Starved {
                        neg_latency_us: -((latency * 1000.0) as i64),
                        seq: Reverse(self.seq),
                        key: key.clone(),
                    });
                }
                return;
            }
            if lane == LaneKind::Slow && self.slow_connections >= self.cfg.slow_lane_max_connections
            {
                if !self.slow_starved.contains(key) {
                    self.slow_starved.push_back(key.clone());
                }
                return;
            }
            if !self.spawn_worker(key, lane) {
                return;
            }
        }
    }

    fn feed_parked(&mut self, key: &Arc<str>) {
        loop {
            let Some(d) = self.dests.get_mut(key) else {
                return;
            };
            if d.ready_len() == 0 || d.parked.is_empty() {
                return;
            }
            let Some(p) = d.parked.pop() else { return };
            // Parked workers of either lane take either lane's work (see Destination::take_batch).
            let batch = self.take_batch(key, LaneKind::Fast, p.max);
            if batch.is_empty() {
                if let Some(d) = self.dests.get_mut(key) {
                    d.parked.push(p); // rate-limited: wait for tokens
                }
                return;
            }
            if let Err(batch) = p.reply.send(batch) {
                self.put_back(key, batch);
            }
        }
    }

    /// The lane of the next connection this destination could use, if any.
    fn wanted_lane(&self, key: &Arc<str>) -> Option<LaneKind> {
        let d = self.dests.get(key)?;
        let budget = self.budgets.get(&d.budget)?;
        let batch = self.cfg.max_copies_per_batch.max(1);
        let cap = budget
            .connection_limit()
            .min(self.cfg.max_connections_per_destination.max(1));
        if d.workers() >= cap || budget.active >= budget.connection_limit() {
            return None;
        }
        // Until a host of the destination has answered (or while it fails), one connection
        // attempt at a time: a hung host costs one worker, and the first success opens the rest.
        if d.connecting > 0 && !self.health.proven(&d.hosts) {
            return None;
        }
        let now_ms = self.clock.now_ms();
        let probe_due = self
            .health
            .next_probe_ms(&d.hosts)
            .is_some_and(|t| t <= now_ms);
        if self.health.all_tarpits(&d.hosts, now_ms) {
            // Tarpits: the slow lane only (patient timeouts, never holding first-pass capacity),
            // first attempts included, with a few connections to divide the trickle.
            let work = d.ready_len() + if probe_due { d.parked_len().min(1) } else { 0 };
            let want = work.min(self.cfg.tarpit_connections.max(1));
            return (d.workers() < want).then_some(LaneKind::Slow);
        }
        if d.fast.len().div_ceil(batch) > d.fast_workers {
            return Some(LaneKind::Fast);
        }
        // Retries: served by fast workers already open; otherwise by the slow lane.
        let slow_work = d.slow.len() + if probe_due { d.parked_len().min(1) } else { 0 };
        if slow_work.div_ceil(batch) > d.slow_workers && d.fast_workers == 0 {
            return Some(LaneKind::Slow);
        }
        None
    }

    /// Starts one worker if host health allows a connection now. False when it does not.
    fn spawn_worker(&mut self, key: &Arc<str>, lane: LaneKind) -> bool {
        if self.shortage.active(Instant::now()) {
            return false; // short of descriptors or memory here: the tick tries again
        }
        let port = self.ctx.port;
        let Some(d) = self.dests.get_mut(key) else {
            return false;
        };
        let targets = self
            .health
            .plan_lane(&d.hosts, port, self.clock.now_ms(), lane);
        if targets.is_empty() {
            return false; // every host is down until its probe time
        }
        let Some(budget) = self.budgets.get_mut(&d.budget) else {
            return false;
        };
        budget.active += 1;
        let plan = WorkerPlan {
            dest: key.clone(),
            lane,
            targets,
            max_messages: budget.messages_per_connection,
            sts: d.sts.clone(),
            dane: d.dane.clone(),
            egress_pool: d.egress_pool.clone(),
        };
        d.connecting += 1;
        match lane {
            LaneKind::Fast => d.fast_workers += 1,
            LaneKind::Slow => {
                d.slow_workers += 1;
                self.slow_connections += 1;
            }
        }
        self.connections += 1;
        tokio::spawn(workers::run(plan, self.ctx.clone()));
        true
    }

    /// True when a destination waits for a connection of the spent global budget with copies
    /// ready. Entries whose copies were taken meanwhile (by the destination's own workers) are
    /// dropped on the way, so a stale entry never makes an idle connection close for nothing.
    fn starving(&mut self) -> bool {
        while let Some(top) = self.starved.peek() {
            if self.dests.get(&top.key).is_some_and(|d| d.ready_len() > 0) {
                return true;
            }
            if let Some(stale) = self.starved.pop() {
                self.starved_set.remove(&stale.key);
            }
        }
        false
    }

    /// Lets the longest-idle parked worker go (its connection closes and frees a slot of the
    /// global budget for a starved destination). A destination's parked workers are left alone
    /// while it has ready copies (they wait for its rate's tokens, not for work). Does nothing
    /// when no worker is idle.
    fn release_idle_worker(&mut self) {
        while let Some(key) = self.idle_dests.pop_front() {
            self.idle_set.remove(&key);
            let Some(d) = self.dests.get_mut(&key) else {
                continue;
            };
            if d.ready_len() > 0 || d.parked.is_empty() {
                continue;
            }
            // The one parked first has waited longest: its idle time ends soonest.
            let oldest = (0..d.parked.len()).min_by_key(|&i| d.parked[i].until);
            let Some(p) = oldest.map(|i| d.parked.swap_remove(i)) else {
                continue;
            };
            if !d.parked.is_empty() && self.idle_set.insert(key.clone()) {
                self.idle_dests.push_back(key);
            }
            let _ = p.reply.send(Vec::new());
            return;
        }
    }

    /// After a connection ends: the slow lane's waiting destinations first (their share just
    /// freed up, if it was a slow one), then the starved ones, fastest first.
    pub(crate) fn pump_starved(&mut self) {
        let mut n = self.slow_starved.len();
        while n > 0 && self.slow_connections < self.cfg.slow_lane_max_connections {
            n -= 1;
            let Some(key) = self.slow_starved.pop_front() else {
                break;
            };
            self.pump(&key);
        }
        while self.connections < self.cfg.max_connections {
            let Some(s) = self.starved.pop() else { break };
            self.starved_set.remove(&s.key);
            self.pump(&s.key);
        }
    }
}
