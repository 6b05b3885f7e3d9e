//! The scheduler actor: one task that owns every destination queue, the domain → destination
//! routes, host health, shaping budgets, the straggler index and the connection budget.
//! Expanders feed it jobs through a bounded channel (it stops reading when its window is full:
//! backpressure up to the directory reads); workers ask it for batches and report each batch and
//! connection; it never blocks on a worker.
//!
//! The actor is split by concern: this file (the loop, housekeeping), `routes.rs` (domains →
//! destinations: DNS, MTA-STS, DANE, refresh), `dispatch.rs` (batches and starting
//! connections), `outcome.rs` (what worker reports change), `snapshot.rs` (the queue view),
//! `operator.rs` (retry-now, give-up), `parking.rs` and `overflow.rs` (copies to and from the
//! deferred queue: waiting for a time, or for room at their destination); and the state it
//! owns: `queue.rs` (destination queues and lanes), `health.rs` (host health), `shaping.rs` (AIMD budgets), `stragglers.rs`,
//! `backoff.rs` (the retry schedule); `knowledge.rs` (what the cluster's nodes tell each
//! other). Its inbox is [`crate::messages::Ctrl`]; resolver tasks it
//! spawns answer on a private channel. It starts workers (`crate::workers`) and never imports
//! anything a worker defines but the worker's context and plan.
//!
//! Time: monotonic time is tokio's (`tokio::time::Instant`), wall time is [`Clock::now_ms`], so
//! the actor runs unchanged under a paused tokio clock (see `paused_tests.rs`).
//!
//! Invariants:
//! - every job is in exactly one place: a route waiting for DNS, a destination's `fast`, `slow`,
//!   `waiting` or `overflow` queue, a worker's batch, or reported final;
//! - a destination's ready copies stay within its share of the window (`overflow.rs`), but for
//!   retries, which may fill it and one batch past it, and copies moved by a route change;
//! - `connections` counts started workers and never exceeds `max_connections`; slow-lane workers
//!   never exceed `slow_lane_max_connections`;
//! - no connection is opened to a host marked down before its probe time, and at most one probe
//!   per down host is out (see [`health`]).

use crate::clock::Clock;
use crate::config::SchedulerConfig;
use crate::messages::{Ctrl, Job, OutcomeReport, PolicyNotes, Report};
use crate::workers::WorkerCtx;
use health::{HealthConfig, HostHealth};
use herald_telemetry::{Event, SchedulerEvent};
use herald_types::LaneKind;
use herald_types::{FailureCause, RcptOutcome, Reply};
use queue::Destination;
use routes::Resolvers;
use shaping::Budget;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use stragglers::Stragglers;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long after shutdown the actor stops even with connections open: past every bound a
/// worker keeps while stopping (drain, journal wait, QUIT), so reached only if one hangs.
const STOP_BACKSTOP: Duration = Duration::from_secs(30);

pub mod backoff;
pub mod deferred;
#[cfg(test)]
mod deferred_tests;
mod dispatch;
#[cfg(test)]
mod dispatch_tests;
mod egress;
#[cfg(test)]
mod hand_rig;
pub mod health;
mod knowledge;
pub mod operator;
mod outcome;
#[cfg(test)]
mod outcome_tests;
mod overflow;
#[cfg(test)]
mod overflow_tests;
pub mod pace;
mod parking;
#[cfg(test)]
mod paused_tests;
pub mod queue;
pub mod routes;
#[cfg(test)]
mod routes_tests;
pub mod shaping;
mod shortage;
mod snapshot;
pub mod stragglers;
#[cfg(test)]
mod verdict_tests;

pub use routes::{RouteError, Routing};

/// How a recipient domain is reached.
pub(crate) enum Route {
    Resolving(Vec<Job>),
    /// Copies go to destination `key`. At `refresh_at` the domain is resolved again (MX hosts
    /// and MTA-STS policy); `refreshing` while that runs, copies still going to `key`.
    Routed {
        key: Arc<str>,
        refresh_at: Instant,
        refreshing: bool,
    },
    /// DNS failed temporarily: jobs wait, resolution is tried again at `until`.
    RetryDns {
        until: Instant,
        jobs: Vec<Job>,
    },
    /// DNS failed permanently: new jobs fail at once, with this cause (a `NoRoute`), until
    /// `until` (negative cache).
    Dead {
        until: Instant,
        cause: FailureCause,
    },
}

/// A destination waiting for a connection while the budget is spent, ordered fastest first.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Starved {
    /// Negated estimated latency in µs: the max-heap pops the fastest destination first.
    pub neg_latency_us: i64,
    pub seq: std::cmp::Reverse<u64>,
    pub key: Arc<str>,
}

pub struct Actor {
    pub(crate) cfg: Arc<SchedulerConfig>,
    pub(crate) ctx: Arc<WorkerCtx>,
    pub(crate) routes: HashMap<String, Route>,
    pub(crate) dests: HashMap<Arc<str>, Destination>,
    pub(crate) budgets: HashMap<Arc<str>, Budget>,
    pub(crate) health: HostHealth,
    pub(crate) stragglers: Stragglers,
    /// Destinations that wanted a connection while the global budget was spent (fastest first).
    pub(crate) starved: BinaryHeap<Starved>,
    pub(crate) starved_set: HashSet<Arc<str>>,
    /// Destinations that wanted a slow-lane connection while the slow share was spent.
    pub(crate) slow_starved: VecDeque<Arc<str>>,
    /// Destinations where a worker parked idle (out of ready copies), in the order they parked:
    /// when the global budget is spent and another destination starves, the longest-idle
    /// connection is let go (`dispatch.rs`). At most one entry per destination.
    pub(crate) idle_dests: VecDeque<Arc<str>>,
    pub(crate) idle_set: HashSet<Arc<str>>,
    pub(crate) connections: usize,
    pub(crate) slow_connections: usize,
    /// Copies in the in-memory queue — ready, or with their route being resolved — which
    /// `max_queued_copies` bounds. Parked copies (the deferred queue) are not among them.
    pub(crate) queued: usize,
    /// Of `queued`, copies of the slow lane (retries).
    pub(crate) slow_queued: usize,
    /// The deferred queue: copies waiting for a retry time or a down host (`deferred.rs`).
    pub(crate) deferred: deferred::DeferredStore,
    pub(crate) seq: u64,
    resolvers: Resolvers,
    resolve_permits: Arc<Semaphore>,
    /// Resolver tasks' answers (see `routes.rs`): bounded by `resolve_concurrency`, since a
    /// task holds its permit until its answer is in the channel.
    resolved_tx: mpsc::Sender<routes::Resolved>,
    resolved_rx: Option<mpsc::Receiver<routes::Resolved>>,
    /// Wall time (expiry, host health); monotonic time is tokio's.
    pub(crate) clock: Clock,
    pub(crate) shutting_down: bool,
    last_persist: Instant,
    /// Hosts marked down here since the last exchange of shared knowledge, so the other nodes
    /// skip them too (bounded, see `knowledge.rs`).
    pub(crate) shared_down: Vec<crate::messages::knowledge::SharedDownHost>,
    /// New connections wait while this machine is short of descriptors, memory or ports.
    pub(crate) shortage: shortage::ShortagePause,
}

impl Actor {
    pub fn new(
        cfg: Arc<SchedulerConfig>,
        ctx: Arc<WorkerCtx>,
        resolvers: Resolvers,
        health_path: Option<PathBuf>,
        clock: Clock,
    ) -> Actor {
        let (resolved_tx, resolved_rx) = mpsc::channel(cfg.resolve_concurrency.max(1));
        let permits = Arc::new(Semaphore::new(cfg.resolve_concurrency.max(1)));
        let health = HostHealth::open(
            HealthConfig {
                down_after_failures: cfg.host_down_after_failures,
                down_initial: Duration::from_secs(cfg.destination_backoff_secs),
                down_max: Duration::from_secs(cfg.destination_backoff_max_secs),
                max_hosts: cfg.host_health_max_hosts.max(1),
            },
            health_path,
        );
        Actor {
            cfg,
            ctx,
            routes: HashMap::new(),
            dests: HashMap::new(),
            budgets: HashMap::new(),
            health,
            stragglers: Stragglers::default(),
            starved: BinaryHeap::new(),
            starved_set: HashSet::new(),
            slow_starved: VecDeque::new(),
            idle_dests: VecDeque::new(),
            idle_set: HashSet::new(),
            connections: 0,
            slow_connections: 0,
            queued: 0,
            slow_queued: 0,
            deferred: deferred::DeferredStore::open(None),
            seq: 0,
            resolvers,
            resolve_permits: permits,
            resolved_tx,
            resolved_rx: Some(resolved_rx),
            clock,
            shutting_down: false,
            last_persist: Instant::now(),
            shared_down: Vec::new(),
            shortage: shortage::ShortagePause::default(),
        }
    }

    /// Keeps the deferred queue in `dir` (emptied now: the spool's recovery is the truth)
    /// instead of in memory.
    pub fn with_deferred_dir(mut self, dir: PathBuf) -> Actor {
        self.deferred = deferred::DeferredStore::open(Some(dir));
        self
    }

    pub async fn run(
        mut self,
        mut jobs_rx: mpsc::Receiver<Vec<Job>>,
        mut ctrl_rx: mpsc::Receiver<Ctrl>,
        shutdown: CancellationToken,
    ) {
        // `new` always leaves a receiver; `run` consumes the actor, so it is taken once.
        let mut resolved_rx = match self.resolved_rx.take() {
            Some(rx) => rx,
            None => {
                let (tx, rx) = mpsc::channel(self.cfg.resolve_concurrency.max(1));
                self.resolved_tx = tx;
                rx
            }
        };
        let mut tick = tokio::time::interval(Duration::from_millis(self.cfg.tick_ms.max(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.update_gauges();
        let mut shutdown_at = Instant::now();
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled(), if !self.shutting_down => {
                    shutdown_at = Instant::now();
                    self.begin_shutdown();
                }
                Some(msg) = ctrl_rx.recv() => self.handle(msg).await,
                Some(r) = resolved_rx.recv() => self.on_resolved(r.domain, r.result).await,
                Some(jobs) = jobs_rx.recv(), if !self.shutting_down && self.queued < self.cfg.max_queued_copies => {
                    self.accept_jobs(jobs).await;
                }
                _ = tick.tick() => {
                    if self.shutting_down && self.connections == 0 {
                        break;
                    }
                    // Workers bound their own stop (`workers::DRAIN_AT_SHUTDOWN`, the journal
                    // wait, QUIT); this is the backstop should one of them not return.
                    if self.shutting_down && shutdown_at.elapsed() > STOP_BACKSTOP {
                        tracing::warn!(connections = self.connections, "stopping with connections still open");
                        break;
                    }
                    self.on_tick().await;
                }
            }
        }
        self.persist_health(true).await;
    }

    /// Stop handing out work; connected workers finish their batch (within
    /// `workers::DRAIN_AT_SHUTDOWN`) and exit.
    fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        for d in self.dests.values_mut() {
            for p in d.parked.drain(..) {
                let _ = p.reply.send(Vec::new());
            }
        }
    }

    async fn handle(&mut self, msg: Ctrl) {
        match msg {
            Ctrl::NeedWork {
                dest,
                lane,
                max,
                delivered_here,
                reply,
            } => {
                // A connection at the provider's learned messages-per-connection ends here, and
                // gets no batch that would take it past (its next MAIL would get a 421).
                let cap = self
                    .dests
                    .get(&dest)
                    .and_then(|d| self.budgets.get(&d.budget))
                    .map_or(usize::MAX, |b| b.messages_per_connection);
                if delivered_here >= cap {
                    let _ = reply.send(Vec::new());
                } else {
                    self.on_need_work(dest, lane, max.min(cap - delivered_here), reply)
                }
            }
            Ctrl::Connected {
                dest,
                host,
                timings,
                failed,
            } => self.on_connected(dest, host, timings, failed),
            Ctrl::ConnectFailed {
                dest,
                failed,
                error,
                dane_failed,
                local,
            } => {
                self.on_connect_failed(dest, failed, error, dane_failed, local)
                    .await
            }
            Ctrl::BatchDone(b) => self.on_batch_done(*b).await,
            Ctrl::WorkerExit { dest, lane } => {
                self.release_worker(&dest, lane);
                self.pump(&dest);
                self.pump_starved();
            }
            Ctrl::Snapshot(req, reply) => {
                let _ = reply.send(self.snapshot(req));
            }
            Ctrl::Operator(cmd) => self.on_operator(cmd).await,
            Ctrl::Reshape(rules) => self.reshape(rules),
            Ctrl::Knowledge(k, reply) => {
                let local = self.on_knowledge(k);
                let _ = reply.send(local);
                self.pump_starved();
            }
        }
    }

    async fn accept_jobs(&mut self, jobs: Vec<Job>) {
        let mut touched: Vec<Arc<str>> = Vec::new();
        // Per run of one destination: its health (`None`: may be tried) and its room bound.
        let mut last_down: Option<(Arc<str>, Option<Instant>, usize)> = None;
        for job in jobs {
            let domain = job.domain().to_string();
            match self.routes.get_mut(&domain) {
                Some(Route::Routed { key, .. }) => {
                    let key = key.clone();
                    let key = self.pooled(&key, &job);
                    // Every host down: the copy waits in the deferred queue, not in the window
                    // live destinations need (pages come in runs of one destination: its
                    // health is looked at once per run).
                    let (park_at, bound) = match &last_down {
                        Some((k, at, bound)) if *k == key => (*at, *bound),
                        _ => {
                            let (at, bound) = (self.arrival_park_time(&key), self.room_bound(&key));
                            last_down = Some((key.clone(), at, bound));
                            (at, bound)
                        }
                    };
                    if let Some(at) = park_at {
                        self.park(&key, at, herald_types::DeferralKind::HostDown, job);
                        continue;
                    }
                    // Past its share of the window, the copy waits on disk for room.
                    if self.queue_or_overflow(&key, job, bound) && touched.last() != Some(&key) {
                        touched.push(key);
                    }
                }
                Some(Route::Resolving(waiting)) | Some(Route::RetryDns { jobs: waiting, .. }) => {
                    self.queued += 1;
                    waiting.push(job)
                }
                Some(Route::Dead { cause, .. }) => {
                    let cause = cause.clone();
                    self.finish(job, cause).await;
                }
                None => {
                    self.queued += 1;
                    self.routes
                        .insert(domain.clone(), Route::Resolving(vec![job]));
                    self.spawn_resolve(domain);
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for key in touched {
            self.pump(&key);
        }
    }

    pub(crate) fn release_worker(&mut self, dest: &Arc<str>, lane: LaneKind) {
        self.connections = self.connections.saturating_sub(1);
        if lane == LaneKind::Slow {
            self.slow_connections = self.slow_connections.saturating_sub(1);
        }
        if let Some(d) = self.dests.get_mut(dest) {
            match lane {
                LaneKind::Fast => d.fast_workers = d.fast_workers.saturating_sub(1),
                LaneKind::Slow => d.slow_workers = d.slow_workers.saturating_sub(1),
            }
            if let Some(b) = self.budgets.get_mut(&d.budget) {
                b.active = b.active.saturating_sub(1);
            }
        }
    }

    async fn on_tick(&mut self) {
        let now = Instant::now();
        let now_ms = self.clock.now_ms();
        let mut due_keys = Vec::new();
        for (key, d) in self.dests.iter_mut() {
            let probe_due = self
                .health
                .next_probe_ms(&d.hosts)
                .is_some_and(|t| t <= now_ms);
            if (d.ready_len() > 0 || (probe_due && d.queued() > 0)) && !self.shutting_down {
                due_keys.push(key.clone());
            }
            let mut i = 0;
            while i < d.parked.len() {
                if d.parked[i].until <= now || self.shutting_down {
                    let _ = d.parked.swap_remove(i).reply.send(Vec::new());
                } else {
                    i += 1;
                }
            }
        }
        // Destinations whose parked workers all left (idle time over, fed, closed) leave the
        // idle list, so it stays as short as the connections open.
        let dests = &self.dests;
        let parked = |k: &Arc<str>| dests.get(k).is_some_and(|d| !d.parked.is_empty());
        self.idle_dests.retain(parked);
        self.idle_set.retain(parked);
        if !self.shutting_down {
            self.resume_due(now).await;
            self.refill_overflow().await;
        }
        self.deferred.spill_idle(now);
        due_keys.sort_unstable();
        due_keys.dedup();
        for key in due_keys {
            self.pump(&key);
        }
        self.pump_starved();
        self.retry_routes(now);
        self.update_gauges();
        if self.last_persist.elapsed()
            >= Duration::from_secs(self.cfg.host_health_persist_secs.max(1))
        {
            self.persist_health(false).await;
        }
    }

    /// Writes host health to its file (periodically, and at shutdown), serialized and written
    /// off the actor's task.
    async fn persist_health(&mut self, wait: bool) {
        self.last_persist = Instant::now();
        let Some(path) = self.health.path().map(|p| p.to_path_buf()) else {
            return;
        };
        let rows = self.health.to_rows();
        let task = tokio::task::spawn_blocking(move || {
            if let Err(e) = crate::actor::health::save(&path, &rows) {
                tracing::warn!(path = %path.display(), error = %e, "cannot save host health");
            }
        });
        if wait {
            let _ = task.await;
        }
    }

    /// Reports a deferral decided without a connection (DNS, MTA-STS, DANE, a failed connect),
    /// with the policy notes that apply, if any.
    pub(crate) async fn report_deferred(&self, job: &Job, reply: &Reply, notes: PolicyNotes) {
        let mut report =
            OutcomeReport::new(job, RcptOutcome::Deferred(reply.clone()), "none".into(), 0);
        report.mta_sts = notes.mta_sts;
        report.dane = notes.dane;
        let _ = self
            .ctx
            .reports
            .send(Report::Outcome(Box::new(report)))
            .await;
    }

    /// Reports a final failure decided by the scheduler itself (no route, expiry, the operator's
    /// give-up), with its cause for the bounce stage. The caller has already taken the job out
    /// of the queue counts.
    pub(crate) async fn finish(&mut self, job: Job, cause: FailureCause) {
        let report = OutcomeReport::failed(&job, cause);
        let _ = self
            .ctx
            .reports
            .send(Report::Outcome(Box::new(report)))
            .await;
    }

    /// Gives up a copy older than its list allows: a failed outcome (5.4.7) for the journal, an
    /// `Expired` event, and a [`FailureCause::Expired`] that the bounce stage scores as a soft
    /// failure of its own kind (an address that never answers leaves the list as bounces do;
    /// an operator's give-up is another cause and never scored).
    pub(crate) async fn expire(&mut self, job: Job) {
        let now_ms = self.clock.now_ms();
        let last_reply = job.deferral.as_ref().map(|(_, r)| (**r).clone());
        tracing::info!(post = %job.post.id, rcpt = %job.member.address, tries = job.tries, "copy expired: given up after the list's maximum age");
        self.ctx
            .telemetry
            .emit(Event::Scheduler(Box::new(SchedulerEvent::Expired {
                post: job.post.id,
                member: job.member.id,
                rcpt: job.member.address.to_string(),
                tries: job.tries,
                age_secs: job.age_ms(now_ms) / 1000,
                last_reply: last_reply.clone(),
            })));
        self.finish(job, FailureCause::Expired { last_reply }).await;
    }

    /// A job leaves the queue for good (its count and, in the slow lane, its straggler entry).
    pub(crate) fn leave_queue(&mut self, job: &Job) {
        self.queued = self.queued.saturating_sub(1);
        if job.lane == LaneKind::Slow {
            self.slow_queued = self.slow_queued.saturating_sub(1);
            self.stragglers.remove(&job.member.address.to_string());
        }
    }

    pub(crate) fn emit(&self, e: SchedulerEvent) {
        self.ctx.telemetry.emit(Event::Scheduler(Box::new(e)));
    }

    pub(crate) fn update_gauges(&self) {
        let g = self.ctx.telemetry.gauges();
        let parked = self.deferred.len() as i64;
        g.queued_recipients.set(self.queued as i64 + parked);
        g.deferred_copies.set(parked);
        // Copies waiting for room are counted as first attempts (the few retries among them,
        // moved by a DNS answer, too): counting them by lane would walk every one each tick.
        let for_room = self.overflow_len() as i64;
        g.deferred_copies_for_room.set(for_room);
        g.destination_ready_max.set(
            self.dests
                .values()
                .map(|d| d.ready_len())
                .max()
                .unwrap_or(0) as i64,
        );
        g.deferred_bytes
            .set(i64::try_from(self.deferred.disk_bytes()).unwrap_or(i64::MAX));
        g.deferred_posts.set(self.deferred.posts() as i64);
        g.deferred_posts_in_memory
            .set(self.deferred.posts_in_memory() as i64);
        // Work that may be tried now and is not done: the in-memory queue, copies waiting for
        // room at their destination, what connections hold, and what expansions have still to
        // queue. Copies parked for a time or a down host are not in it: a backlog of dead
        // destinations never makes intake refuse mail for live ones. Copies waiting for room
        // are: without them a Herald that cannot keep up (or a destination days behind) would
        // pile its backlog on disk and answer 250 forever.
        g.unfinished_copies.set(
            self.queued as i64
                + for_room
                + g.inflight_copies.get().max(0)
                + g.expansion_pending.get().max(0),
        );
        g.destinations_active
            .set(self.dests.values().filter(|d| d.queued() > 0).count() as i64);
        g.hosts_down.set(self.health.down_count() as i64);
        g.lane_slow.set(self.slow_queued as i64 + parked - for_room);
        g.lane_fast
            .set(self.queued.saturating_sub(self.slow_queued) as i64 + for_room);
        g.slow_connections.set(self.slow_connections as i64);
        let mut rows: Vec<(usize, &Destination)> = self
            .dests
            .values()
            .filter(|d| d.queued() > 0 || d.workers() > 0)
            .map(|d| (d.queued(), d))
            .collect();
        let n = herald_telemetry::scheduling::MAX_DESTINATION_ROWS;
        if rows.len() > n {
            rows.select_nth_unstable_by(n - 1, |a, b| b.0.cmp(&a.0));
            rows.truncate(n);
        }
        let rows = rows
            .into_iter()
            .map(|(_, d)| {
                let limit = self
                    .budgets
                    .get(&d.budget)
                    .map_or(0, |b| b.connection_limit());
                (d.key.to_string(), d.workers() as i64, limit as i64)
            })
            .collect();
        self.ctx
            .telemetry
            .metrics()
            .scheduling
            .set_destinations(rows);
    }
}
