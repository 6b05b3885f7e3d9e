//! What workers' reports change: host health (connect successes and failures), shaping budgets
//! (throttling and success), lanes (a deferred first attempt moves to the slow lane), retry
//! times (greylisting after the server's interval, throttling after `throttle_retry_secs`, other
//! failures on the exponential schedule) and the straggler index.
//!
//! When a down host answers its probe, every copy waiting for any destination it serves is made
//! ready at once (except greylisted ones): the pending copies go out over reused connections.
//!
//! Pacing: a batch's deliveries and rate refusals feed its budget's [`Pace`]
//! (`actor/pace.rs`); copies refused for rate go straight back to the ready queue, released at
//! the learned rate (at most [`MAX_RATE_REFUSALS`] times, then the throttle backoff); copies a
//! batch never tried go back untouched; a `421` at MAIL after some messages teaches the budget
//! the provider's messages per connection. A copy cut off by a connection dropped mid-DATA is
//! retried at once on a new connection (after [`DROP_RETRY_JITTER_MS`] of jitter); only a
//! second drop of the same copy counts against the host and follows the retry schedule.
//!
//! Tarpits: a host whose replies trickle past the first pass's patience
//! (a connection attempt or a batch that ended `TooSlow`) is marked a tarpit in host health,
//! never down for it; the destination's copies stay ready (no try charged) and `dispatch.rs`
//! serves them from the slow lane.
//!
//! [`Pace`]: crate::actor::pace::Pace

use crate::actor::backoff::retry_delay;
use crate::actor::{Actor, Route};
use crate::classify::implied_interval;
use crate::messages::Job;
use crate::messages::PolicyNotes;
use crate::messages::{BatchDone, ConnectTimings, FailKind, HostFailure, HostKey};
use herald_telemetry::SchedulerEvent;
use herald_types::Reply;
use herald_types::{DaneNote, DeferralKind, LaneKind, MtaStsNote};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Recipient domains named per failed TLS attempt at most (one destination can serve thousands
/// of domains that share a provider's MX hosts).
const MAX_TLS_REPORT_DOMAINS: usize = 1000;

/// Times a copy refused for rate goes straight back to the ready queue before it waits out the
/// throttle backoff instead (a provider that keeps refusing is not asked again and again).
pub const MAX_RATE_REFUSALS: u8 = 8;
/// Upper bound of the random delay before a copy cut off by a drop is tried again (plus 50 ms).
pub const DROP_RETRY_JITTER_MS: u64 = 250;

impl Actor {
    pub(crate) fn on_connected(
        &mut self,
        dest: Arc<str>,
        host: HostKey,
        timings: ConnectTimings,
        failed: Vec<HostFailure>,
    ) {
        if let Some(d) = self.dests.get_mut(&dest) {
            d.connecting = d.connecting.saturating_sub(1);
        }
        self.shortage.clear();
        self.record_failures(&dest, &failed);
        let now_ms = self.clock.now_ms();
        if let Some(ev) = self.health.record_success(&host, &timings, now_ms) {
            tracing::info!(host = %host.name, addr = %host.addr, "host is back up");
            self.emit(ev);
            self.host_back(&host);
        }
        self.pump(&dest);
    }

    /// Every destination served by `host` may try its parked copies now: they come back from
    /// the deferred queue in bounded batches from the next tick (`parking.rs`).
    fn host_back(&mut self, host: &HostKey) {
        let now = Instant::now();
        for d in self.dests.values_mut() {
            let served = d
                .hosts
                .iter()
                .any(|h| h.name.as_str() == host.name.as_ref() && h.addrs.contains(&host.addr));
            if served {
                d.wake_waiting(now);
            }
        }
    }

    fn record_failures(&mut self, dest: &Arc<str>, failed: &[HostFailure]) {
        let now_ms = self.clock.now_ms();
        self.report_tls_failures(dest, failed);
        for f in failed {
            match f.kind {
                FailKind::Host => {
                    if let Some(ev) = self.health.record_failure(&f.key, &f.reason, now_ms) {
                        tracing::warn!(host = %f.key.name, addr = %f.key.addr, reason = %f.reason, "host marked down");
                        self.emit(ev);
                        self.tell_down(&f.key, &f.reason);
                    }
                }
                FailKind::Throttle => {
                    // The host answers (busy): no verdict on its health, but the budget is cut.
                    self.health.release_probe(&f.key);
                    self.throttle(dest);
                }
                FailKind::Tarpit => self.mark_tarpit(dest, &f.key),
                FailKind::Local(resource) => {
                    // This machine's shortage, not the host's: no verdict on its health.
                    self.health.release_probe(&f.key);
                    self.ctx
                        .telemetry
                        .metrics()
                        .descriptors
                        .count_shortage(resource);
                    self.shortage.record(resource, tokio::time::Instant::now());
                }
                FailKind::Other => self.health.release_probe(&f.key),
            }
        }
    }

    /// A host's replies trickle past the first pass's patience: it answers, so it is up, and
    /// from now on (for `tarpit_remember_secs`) the slow lane serves it with patient timeouts.
    fn mark_tarpit(&mut self, dest: &Arc<str>, key: &HostKey) {
        let remember = Duration::from_secs(self.cfg.tarpit_remember_secs);
        let now_ms = self.clock.now_ms();
        if self.health.record_tarpit(key, remember, now_ms) {
            tracing::info!(%dest, host = %key.name, addr = %key.addr, "host replies slowly but steadily (tarpit): served by the slow lane");
        }
    }

    /// Tells TLS reporting (RFC 8460) of attempts that failed their TLS requirement, once for
    /// each recipient domain routed to `dest` (the attempt failed for all of them). Routes are
    /// scanned only when such a failure happened, and at most [`MAX_TLS_REPORT_DOMAINS`] of them
    /// are named.
    fn report_tls_failures(&self, dest: &Arc<str>, failed: &[HostFailure]) {
        if self.ctx.tls_sessions.is_none() || failed.iter().all(|f| f.tls.is_none()) {
            return;
        }
        let domains: Vec<&String> = self
            .routes
            .iter()
            .filter(|(_, r)| matches!(r, Route::Routed { key, .. } if key == dest))
            .map(|(d, _)| d)
            .take(MAX_TLS_REPORT_DOMAINS)
            .collect();
        for f in failed {
            let Some(tls) = &f.tls else { continue };
            for domain in &domains {
                self.ctx.report_tls(herald_types::TlsSessionRecord {
                    policy_domain: domain.to_ascii_lowercase(),
                    policy: tls.policy.clone(),
                    mx_host: f.key.name.to_string(),
                    receiving_ip: f.key.addr,
                    failure: Some((tls.result, f.reason.clone())),
                });
            }
        }
    }

    pub(crate) async fn on_connect_failed(
        &mut self,
        dest: Arc<str>,
        failed: Vec<HostFailure>,
        error: Reply,
        dane_failed: bool,
        local: Option<DeferralKind>,
    ) {
        self.record_failures(&dest, &failed);
        let Some(d) = self.dests.get_mut(&dest) else {
            return;
        };
        d.connecting = d.connecting.saturating_sub(1);
        d.last_error = Some(error.text.clone());
        if failed.iter().any(|f| f.kind == FailKind::Tarpit) {
            // Nothing was tried: the copies stay ready, for the slow lane's patient connections
            // (or the destination's other hosts). No try is charged, no deferral reported.
            return;
        }
        if failed.iter().any(|f| matches!(f.kind, FailKind::Local(_))) {
            // This machine was short (see `shortage.rs`): the copies stay ready for when new
            // connections resume. No try is charged, no deferral reported.
            return;
        }
        let connected = d.workers() - d.connecting;
        // The worker's own exit message follows (release_worker); here only the copies matter.
        // Others still connected serve the destination: leave its copies to them.
        if connected > 1 || (connected == 1 && d.workers() > 1) {
            return;
        }
        let mut jobs = d.fast.drain();
        jobs.extend(d.slow.drain());
        // Out of the queue now; `defer` counts them in again.
        let slow = jobs.iter().filter(|j| j.lane == LaneKind::Slow).count();
        self.queued = self.queued.saturating_sub(jobs.len());
        self.slow_queued = self.slow_queued.saturating_sub(slow);
        let kind = if let Some(kind) = local {
            // No egress source: nothing was tried, no host is to blame.
            kind
        } else if failed.iter().any(|f| f.kind == FailKind::Throttle) {
            DeferralKind::Throttle
        } else {
            DeferralKind::HostDown
        };
        // A failed connection under an enforced policy is MTA-STS at work (or at least in play);
        // DANE is named only when it was why (a refused connection is not DANE's result).
        let notes = PolicyNotes {
            mta_sts: d
                .sts
                .as_ref()
                .filter(|r| r.mode == herald_routing::mta_sts::Mode::Enforce)
                .map(|_| MtaStsNote::Enforce),
            dane: dane_failed.then_some(DaneNote::Failed),
        };
        for job in &jobs {
            self.report_deferred(job, &error, notes).await;
        }
        let jobs = jobs
            .into_iter()
            .map(|mut j| {
                j.tries += 1;
                j.deferral = Some((kind, Box::new(error.clone())));
                j
            })
            .collect();
        self.defer(&dest, jobs).await;
    }

    pub(crate) async fn on_batch_done(&mut self, b: BatchDone) {
        let now_ms = self.clock.now_ms();
        self.health.record_reply(&b.host, b.per_copy, now_ms);
        for rcpt in &b.finished_slow {
            self.stragglers.remove(rcpt);
        }
        self.pace(&b);
        let mut throttled = b.throttled;
        let mut deferred = b.deferred;
        let mut ready = b.unsent;
        for mut job in b.paced {
            job.rate_refusals = job.rate_refusals.saturating_add(1);
            if job.rate_refusals <= MAX_RATE_REFUSALS {
                ready.push(job);
            } else {
                deferred.push(job);
            }
        }
        for mut job in b.dropped {
            job.drops = job.drops.saturating_add(1);
            if job.drops == 1 {
                self.retry_soon(&b.dest, job);
                continue;
            }
            // A second drop of the same copy: the host's doing, not a passing drop.
            throttled = true;
            if let Some(ev) =
                self.health
                    .record_failure(&b.host, "connection dropped mid-DATA again", now_ms)
            {
                tracing::warn!(host = %b.host.name, addr = %b.host.addr, "host marked down after repeated drops mid-DATA");
                self.emit(ev);
            }
            deferred.push(job);
        }
        if b.tarpit {
            // A first-pass session the host's slowness broke: the host is a tarpit, and the
            // copies it left without a reply go to the slow lane at once, not after a backoff.
            self.mark_tarpit(&b.dest, &b.host);
            for mut job in std::mem::take(&mut deferred) {
                job.tries = job.tries.saturating_sub(1);
                ready.push(job);
            }
        }
        if throttled {
            self.throttle(&b.dest);
        } else if b.delivered > 0 {
            self.restore(&b.dest);
        }
        if let Some(d) = self.dests.get_mut(&b.dest) {
            d.delivered += b.delivered as u64;
        }
        if !ready.is_empty() {
            self.put_back(&b.dest, ready);
        }
        self.defer(&b.dest, deferred).await;
    }

    /// A batch's deliveries, rate refusals, per-connection cap and greylisting waits teach its
    /// budget and destination (deliveries first: the first refusal's rate is what was accepted).
    fn pace(&mut self, b: &BatchDone) {
        let now = Instant::now();
        let refused = b.paced.len();
        if let Some(passed) = b.greylist_passed.iter().min() {
            if let Some(d) = self.dests.get_mut(&b.dest) {
                d.learn_greylist(*passed);
            }
        }
        let Some(budget) = self.dests.get(&b.dest).map(|d| d.budget.clone()) else {
            return;
        };
        let Some(bud) = self.budgets.get_mut(&budget) else {
            return;
        };
        bud.pace.delivered(b.delivered, now);
        if let Some(n) = b.conn_cap {
            if bud.learn_per_connection(n) {
                tracing::info!(budget = %bud.name, messages = bud.messages_per_connection, "provider closes connections after this many messages: learned");
            }
        }
        if refused == 0 {
            return;
        }
        bud.end_slow_start();
        let was_paced = bud.pace.rate().is_some();
        if let Some(rate) = bud.pace.refused(now) {
            // News for the other nodes sending to this provider: the share
            // of what they accept together that the provider takes now.
            bud.cut = Some(match was_paced {
                true => crate::actor::pace::CUT,
                false => crate::actor::pace::START_FRACTION,
            });
            let connections = bud.connection_limit() as u32;
            let per_minute = Some((rate * 60.0).round() as u32);
            tracing::info!(budget = %bud.name, copies_per_sec = rate, connections, "provider refused for rate: paced");
            let name = bud.name.to_string();
            self.emit(SchedulerEvent::Shaped {
                budget: name,
                connections,
                per_minute,
                throttled: true,
            });
        }
    }

    /// A copy cut off by a dropped connection: ready again after a short jitter, on whichever
    /// connection takes it next (a new one: the dropped one is gone).
    fn retry_soon(&mut self, dest: &Arc<str>, job: Job) {
        let jitter = rand::random::<u64>() % DROP_RETRY_JITTER_MS.max(1);
        let at = Instant::now() + Duration::from_millis(50 + jitter);
        if let Some(d) = self.dests.get_mut(dest) {
            d.deferred += 1;
        }
        self.park(dest, at, DeferralKind::Other, job);
    }

    /// Deferred copies (not counted as queued: in flight, or just taken out) are parked in the
    /// deferred queue until the time their reason implies, in the slow lane. Copies past their
    /// list's maximum age are given up instead.
    pub(crate) async fn defer(&mut self, dest: &Arc<str>, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        let now = Instant::now();
        let now_ms = self.clock.now_ms();
        let mut moved = 0u64;
        let mut by_kind: HashMap<DeferralKind, (u64, Duration)> = HashMap::new();
        for mut job in jobs {
            if job.expired(now_ms) {
                if job.lane == LaneKind::Slow {
                    self.stragglers.remove(&job.member.address.to_string());
                }
                self.expire(job).await;
                continue;
            }
            let (kind, delay) = self.retry_after(dest, &job);
            if kind == DeferralKind::Greylist {
                job.greylisted_at.get_or_insert(now);
                job.grey_delay = Some(delay);
            }
            let e = by_kind.entry(kind).or_insert((0, delay));
            e.0 += 1;
            if job.lane == LaneKind::Fast {
                job.lane = LaneKind::Slow;
                moved += 1;
                self.stragglers
                    .add(&job.member.address.to_string(), job.post.accepted_at_ms);
            }
            // A copy follows its domain's current route: if that changed while the copy was
            // out (a new MX set, a new MTA-STS policy), it waits in the new destination.
            let target = match self.current_destination(job.domain()).cloned() {
                Some(key) => {
                    // In the copy's egress pool's variant of the route.
                    let key = self.pooled(&key, &job);
                    if self.dests.contains_key(&key) {
                        key
                    } else {
                        dest.clone()
                    }
                }
                None => dest.clone(),
            };
            match self.dests.get_mut(&target) {
                Some(d) => {
                    d.deferred += 1;
                    self.park(&target, now + delay, kind, job);
                }
                None => tracing::error!(%dest, "deferral for an unknown destination"),
            }
        }
        let first = by_kind
            .keys()
            .next()
            .copied()
            .unwrap_or(DeferralKind::Other);
        if moved > 0 {
            tracing::info!(%dest, copies = moved, reason = first.word(), "copies moved to the slow lane");
            self.emit(SchedulerEvent::LaneMove {
                destination: dest.to_string(),
                to: LaneKind::Slow,
                copies: moved,
                reason: first,
            });
        }
        for (kind, (copies, delay)) in by_kind {
            self.emit(SchedulerEvent::Deferred {
                destination: dest.to_string(),
                kind,
                copies,
                retry_in_secs: delay.as_secs(),
            });
        }
    }

    /// Why a job was deferred and when to retry it. Every delay has jitter, so copies deferred
    /// together do not all come back in the same second.
    fn retry_after(&self, dest: &Arc<str>, job: &Job) -> (DeferralKind, Duration) {
        let cfg = &self.cfg;
        let (kind, reply) = match &job.deferral {
            Some((k, r)) => (*k, Some(r)),
            None => (DeferralKind::Other, None),
        };
        let r = rand::random::<f64>();
        let delay = match kind {
            DeferralKind::Greylist => {
                let learned = self.dests.get(dest).and_then(|d| d.grey_interval);
                let d = greylist_delay(
                    reply.and_then(|r| implied_interval(r)),
                    learned,
                    job.grey_delay,
                    Duration::from_secs(cfg.greylist_first_retry_secs),
                    Duration::from_secs(cfg.greylist_retry_secs),
                );
                // After the interval, never before it: 1 s and up to 10 % more.
                d + Duration::from_secs(1) + d.mul_f64(0.1 * r)
            }
            DeferralKind::Throttle => {
                Duration::from_secs(cfg.throttle_retry_secs).mul_f64(0.8 + 0.4 * r)
            }
            DeferralKind::HostDown | DeferralKind::Other => retry_delay(
                job.tries,
                Duration::from_secs(cfg.retry_initial_secs),
                Duration::from_secs(cfg.retry_max_secs),
                cfg.retry_jitter,
                r,
            ),
        };
        (kind, delay)
    }

    /// A throttling signal for a destination: halve its budget (once per cooldown).
    pub(crate) fn throttle(&mut self, dest: &Arc<str>) {
        let Some(d) = self.dests.get(dest) else {
            return;
        };
        let Some(b) = self.budgets.get_mut(&d.budget) else {
            return;
        };
        if b.throttle(Instant::now()) {
            let (connections, per_minute) = (b.connection_limit() as u32, b.per_minute());
            tracing::info!(budget = %b.name, connections, ?per_minute, "destination throttled: concurrency and rate cut");
            let name = b.name.to_string();
            self.emit(SchedulerEvent::Shaped {
                budget: name,
                connections,
                per_minute,
                throttled: true,
            });
        }
    }

    fn restore(&mut self, dest: &Arc<str>) {
        let Some(d) = self.dests.get(dest) else {
            return;
        };
        let Some(b) = self.budgets.get_mut(&d.budget) else {
            return;
        };
        if b.success() {
            let (connections, per_minute) = (b.connection_limit() as u32, b.per_minute());
            let name = b.name.to_string();
            self.emit(SchedulerEvent::Shaped {
                budget: name,
                connections,
                per_minute,
                throttled: false,
            });
        }
    }
}

/// How long a greylisted copy waits (before jitter): the interval the server names; else, on
/// the copy's first greylisting, the one learned for the destination or `first`; on a further
/// greylisting (the last wait was too short), twice the last wait; never more than `max`.
pub fn greylist_delay(
    implied: Option<Duration>,
    learned: Option<Duration>,
    last: Option<Duration>,
    first: Duration,
    max: Duration,
) -> Duration {
    let d = match (implied, last, learned) {
        (Some(said), _, _) => return said,
        (None, Some(last), _) => last.saturating_mul(2),
        (None, None, Some(learned)) => learned,
        (None, None, None) => first,
    };
    d.min(max).max(Duration::from_secs(1))
}
