//! The scheduler actor: one task that owns every destination queue, the domain → destination
//! routes and the connection budget. Expanders feed it jobs through a bounded channel (it stops
//! reading when its window is full: backpressure up to the directory reads); workers ask it for
//! batches and hand back deferred copies; it never blocks on a worker.
//!
//! Invariants:
//! - every job is in exactly one place: a route waiting for DNS, a destination's `ready` or
//!   `waiting` queue, a worker's batch, or reported final;
//! - `connections` counts started workers and never exceeds `max_connections`;
//! - a destination marked down gets no new connection before `down_until`, then one probe.

use crate::backoff::retry_delay;
use crate::job::Job;
use crate::queue::{destination_key, Destination, Parked, QueueSnapshot, Waiting};
use crate::report::{OutcomeReport, Report};
use crate::worker::{self, WorkerCtx};
use crate::SchedulerConfig;
use herald_delivery::{MxHost, ResolveError};
use herald_types::{EnhancedStatus, RcptOutcome, Reply};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

pub mod operator;

/// Messages to the actor from workers, resolver tasks and the API.
pub enum Ctrl {
    Resolved {
        domain: String,
        result: Result<Vec<MxHost>, ResolveError>,
    },
    NeedWork {
        dest: Arc<str>,
        reply: oneshot::Sender<Vec<Job>>,
    },
    /// Deferred copies going back to their queue (tries already counted, attempt reported).
    Requeue {
        dest: Arc<str>,
        jobs: Vec<Job>,
    },
    Connected {
        dest: Arc<str>,
    },
    ConnectFailed {
        dest: Arc<str>,
        error: String,
    },
    WorkerExit {
        dest: Arc<str>,
    },
    Snapshot(oneshot::Sender<QueueSnapshot>),
    /// An operator's retry-now or give-up (see `operator`).
    Operator(operator::Command),
}

/// How a recipient domain is reached.
enum Route {
    Resolving(Vec<Job>),
    Routed(Arc<str>),
    /// DNS failed temporarily: jobs wait, resolution is tried again at `until`.
    RetryDns {
        until: Instant,
        jobs: Vec<Job>,
    },
    /// DNS failed permanently: new jobs fail at once until `until` (negative cache).
    Dead {
        until: Instant,
        reply: Reply,
    },
}

pub struct Actor {
    cfg: Arc<SchedulerConfig>,
    ctx: Arc<WorkerCtx>,
    routes: HashMap<String, Route>,
    dests: HashMap<Arc<str>, Destination>,
    /// Destinations that wanted a connection while the global budget was spent.
    starved: VecDeque<Arc<str>>,
    connections: usize,
    queued: usize,
    seq: u64,
    resolve_permits: Arc<Semaphore>,
    shutting_down: bool,
}

impl Actor {
    pub fn new(cfg: Arc<SchedulerConfig>, ctx: Arc<WorkerCtx>) -> Actor {
        let permits = Arc::new(Semaphore::new(cfg.resolve_concurrency.max(1)));
        Actor {
            cfg,
            ctx,
            routes: HashMap::new(),
            dests: HashMap::new(),
            starved: VecDeque::new(),
            connections: 0,
            queued: 0,
            seq: 0,
            resolve_permits: permits,
            shutting_down: false,
        }
    }

    pub async fn run(
        mut self,
        mut jobs_rx: mpsc::Receiver<Vec<Job>>,
        mut ctrl_rx: mpsc::Receiver<Ctrl>,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(Duration::from_millis(self.cfg.tick_ms.max(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled(), if !self.shutting_down => self.begin_shutdown(),
                Some(msg) = ctrl_rx.recv() => self.handle(msg).await,
                Some(jobs) = jobs_rx.recv(), if !self.shutting_down && self.queued < self.cfg.max_queued_copies => {
                    self.accept_jobs(jobs).await;
                }
                _ = tick.tick() => {
                    if self.shutting_down && self.connections == 0 {
                        break;
                    }
                    self.on_tick().await;
                }
            }
        }
    }

    /// Stop handing out work; connected workers finish their batch and exit.
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
            Ctrl::Resolved { domain, result } => self.on_resolved(domain, result).await,
            Ctrl::NeedWork { dest, reply } => self.on_need_work(dest, reply),
            Ctrl::Requeue { dest, jobs } => self.on_requeue(&dest, jobs).await,
            Ctrl::Connected { dest } => {
                if let Some(d) = self.dests.get_mut(&dest) {
                    d.consecutive_failures = 0;
                    d.down_until = None;
                }
            }
            Ctrl::ConnectFailed { dest, error } => self.on_connect_failed(dest, error).await,
            Ctrl::WorkerExit { dest } => {
                self.release_worker(&dest);
                self.pump(&dest);
                self.pump_starved();
            }
            Ctrl::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Ctrl::Operator(cmd) => self.on_operator(cmd).await,
        }
        self.update_gauges();
    }

    async fn accept_jobs(&mut self, jobs: Vec<Job>) {
        let mut touched: Vec<Arc<str>> = Vec::new();
        for job in jobs {
            let domain = job.domain().to_string();
            match self.routes.get_mut(&domain) {
                Some(Route::Routed(key)) => {
                    let key = key.clone();
                    if let Some(d) = self.dests.get_mut(&key) {
                        self.queued += 1;
                        d.ready.push_back(job);
                        if touched.last() != Some(&key) {
                            touched.push(key);
                        }
                    }
                }
                Some(Route::Resolving(waiting)) | Some(Route::RetryDns { jobs: waiting, .. }) => {
                    self.queued += 1;
                    waiting.push(job)
                }
                Some(Route::Dead { reply, .. }) => {
                    let reply = reply.clone();
                    self.finish(job, RcptOutcome::Failed(reply)).await;
                }
                None => {
                    self.queued += 1;
                    self.routes
                        .insert(domain.clone(), Route::Resolving(vec![job]));
                    self.spawn_resolve(domain);
                }
            }
        }
        touched.dedup();
        for key in touched {
            self.pump(&key);
        }
        self.update_gauges();
    }

    fn spawn_resolve(&self, domain: String) {
        let resolver = self.ctx.resolver.clone();
        let ctrl = self.ctx.ctrl.clone();
        let permits = self.resolve_permits.clone();
        tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            let result = resolver.resolve(&domain).await;
            let _ = ctrl.send(Ctrl::Resolved { domain, result }).await;
        });
    }

    async fn on_resolved(&mut self, domain: String, result: Result<Vec<MxHost>, ResolveError>) {
        let jobs = match self.routes.remove(&domain) {
            Some(Route::Resolving(jobs)) | Some(Route::RetryDns { jobs, .. }) => jobs,
            Some(other) => {
                self.routes.insert(domain, other);
                return;
            }
            None => Vec::new(),
        };
        match result {
            Ok(hosts) => {
                let key = destination_key(&hosts);
                let hosts = Arc::new(hosts);
                let d = self
                    .dests
                    .entry(key.clone())
                    .or_insert_with(|| Destination::new(key.clone(), hosts));
                d.ready.extend(jobs);
                self.routes.insert(domain, Route::Routed(key.clone()));
                self.pump(&key);
            }
            Err(e) if e.is_permanent() => {
                let reply = e.synthetic_reply();
                self.queued -= jobs.len();
                for job in jobs {
                    self.finish(job, RcptOutcome::Failed(reply.clone())).await;
                }
                let until = Instant::now() + Duration::from_secs(self.cfg.dns_negative_cache_secs);
                self.routes.insert(domain, Route::Dead { until, reply });
            }
            Err(e) => {
                let reply = e.synthetic_reply();
                let mut keep = Vec::with_capacity(jobs.len());
                for mut job in jobs {
                    job.tries += 1;
                    self.report_deferred(&job, &reply).await;
                    if job.expired(herald_types::unix_ms_now()) {
                        self.queued -= 1;
                        self.finish(job, expired_reply()).await;
                    } else {
                        keep.push(job);
                    }
                }
                let until = Instant::now() + Duration::from_secs(self.cfg.retry_initial_secs);
                self.routes
                    .insert(domain, Route::RetryDns { until, jobs: keep });
            }
        }
    }

    fn on_need_work(&mut self, dest: Arc<str>, reply: oneshot::Sender<Vec<Job>>) {
        let (batch_max, batch_bytes, idle) = (
            self.cfg.max_copies_per_batch,
            self.cfg.batch_bytes,
            Duration::from_millis(self.cfg.idle_connection_ms),
        );
        let Some(d) = self.dests.get_mut(&dest) else {
            let _ = reply.send(Vec::new());
            return;
        };
        if self.shutting_down {
            let _ = reply.send(Vec::new());
            return;
        }
        if d.ready.is_empty() {
            d.parked.push(Parked {
                until: Instant::now() + idle,
                reply,
            });
            return;
        }
        let batch = d.take_batch(batch_max, batch_bytes);
        self.queued -= batch.len();
        if let Err(batch) = reply.send(batch) {
            // The worker is gone; its copies go back to the front of the queue.
            self.queued += batch.len();
            for job in batch.into_iter().rev() {
                d.ready.push_front(job);
            }
        }
    }

    async fn on_requeue(&mut self, dest: &Arc<str>, jobs: Vec<Job>) {
        let now_ms = herald_types::unix_ms_now();
        for mut job in jobs {
            if job.expired(now_ms) {
                self.finish(job, expired_reply()).await;
                continue;
            }
            let delay = retry_delay(
                job.tries,
                Duration::from_secs(self.cfg.retry_initial_secs),
                Duration::from_secs(self.cfg.retry_max_secs),
                self.cfg.retry_jitter,
                rand::random::<f64>(),
            );
            let at = Instant::now() + delay;
            job.not_before = Some(at);
            self.push_waiting(dest, job, at);
        }
    }

    fn push_waiting(&mut self, dest: &Arc<str>, job: Job, at: Instant) {
        self.seq += 1;
        let seq = self.seq;
        match self.dests.get_mut(dest) {
            Some(d) => {
                self.queued += 1;
                d.waiting.push(Waiting { at, seq, job });
            }
            None => tracing::error!(%dest, "requeue for an unknown destination"),
        }
    }

    async fn on_connect_failed(&mut self, dest: Arc<str>, error: String) {
        self.release_worker(&dest);
        let now = Instant::now();
        let (initial, max) = (
            Duration::from_secs(self.cfg.destination_backoff_secs),
            Duration::from_secs(self.cfg.destination_backoff_max_secs),
        );
        let Some(d) = self.dests.get_mut(&dest) else {
            return;
        };
        d.consecutive_failures += 1;
        let down_for = retry_delay(d.consecutive_failures, initial, max, 0.0, 0.5);
        let until = d
            .down_until
            .map_or(now + down_for, |t| t.max(now + down_for));
        d.down_until = Some(until);
        tracing::info!(%dest, failures = d.consecutive_failures, down_secs = down_for.as_secs(), %error, "destination marked down");
        d.last_error = Some(error.clone());
        // Every copy that was ready for this destination now waits for it to come back.
        let ready: Vec<Job> = d.ready.drain(..).collect();
        self.queued -= ready.len();
        let reply = Reply::new(451, Some(EnhancedStatus::new(4, 4, 1)), error);
        for mut job in ready {
            job.tries += 1;
            self.report_deferred(&job, &reply).await;
            if job.expired(herald_types::unix_ms_now()) {
                self.finish(job, expired_reply()).await;
            } else {
                self.push_waiting(&dest, job, until);
            }
        }
        self.pump_starved();
    }

    fn release_worker(&mut self, dest: &Arc<str>) {
        self.connections = self.connections.saturating_sub(1);
        if let Some(d) = self.dests.get_mut(dest) {
            d.workers = d.workers.saturating_sub(1);
        }
    }

    /// Gives ready work to parked workers and starts connections the destination can use.
    fn pump(&mut self, key: &Arc<str>) {
        if self.shutting_down {
            return;
        }
        let now = Instant::now();
        let cfg = self.cfg.clone();
        let Some(d) = self.dests.get_mut(key) else {
            return;
        };
        while !d.ready.is_empty() {
            let Some(p) = d.parked.pop() else { break };
            let batch = d.take_batch(cfg.max_copies_per_batch, cfg.batch_bytes);
            self.queued -= batch.len();
            if let Err(batch) = p.reply.send(batch) {
                self.queued += batch.len();
                for job in batch.into_iter().rev() {
                    d.ready.push_front(job);
                }
            }
        }
        if d.ready.is_empty() || d.is_down(now) {
            return;
        }
        let mut want = d.wanted_workers(
            cfg.max_copies_per_batch,
            cfg.max_connections_per_destination,
        );
        if d.consecutive_failures > 0 {
            want = want.min(1); // a destination that just failed gets one probe connection
        }
        while d.workers < want {
            if self.connections >= cfg.max_connections {
                if !self.starved.contains(key) {
                    self.starved.push_back(key.clone());
                }
                return;
            }
            d.workers += 1;
            self.connections += 1;
            tokio::spawn(worker::run(key.clone(), d.hosts.clone(), self.ctx.clone()));
        }
    }

    fn pump_starved(&mut self) {
        while self.connections < self.cfg.max_connections {
            let Some(key) = self.starved.pop_front() else {
                break;
            };
            self.pump(&key);
        }
    }

    async fn on_tick(&mut self) {
        let now = Instant::now();
        let mut due_keys = Vec::new();
        for (key, d) in self.dests.iter_mut() {
            if !d.is_down(now) && d.promote_due(now) > 0 {
                due_keys.push(key.clone());
            }
            if !d.ready.is_empty() && d.workers == 0 && !d.is_down(now) {
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
        due_keys.dedup();
        for key in due_keys {
            self.pump(&key);
        }
        self.pump_starved();
        self.retry_routes(now);
        self.update_gauges();
    }

    fn retry_routes(&mut self, now: Instant) {
        let mut redo = Vec::new();
        self.routes.retain(|domain, route| match route {
            Route::RetryDns { until, .. } if *until <= now => {
                redo.push(domain.clone());
                true
            }
            Route::Dead { until, .. } => *until > now,
            _ => true,
        });
        for domain in redo {
            if let Some(Route::RetryDns { jobs, .. }) = self.routes.remove(&domain) {
                self.routes.insert(domain.clone(), Route::Resolving(jobs));
                self.spawn_resolve(domain);
            }
        }
    }

    async fn report_deferred(&self, job: &Job, reply: &Reply) {
        let report =
            OutcomeReport::new(job, RcptOutcome::Deferred(reply.clone()), "none".into(), 0);
        let _ = self
            .ctx
            .reports
            .send(Report::Outcome(Box::new(report)))
            .await;
    }

    /// Reports a final outcome decided by the scheduler itself (DNS failure, expiry). The caller
    /// has already taken the job out of the `queued` count.
    async fn finish(&mut self, job: Job, outcome: RcptOutcome) {
        let report = OutcomeReport::new(&job, outcome, "none".into(), 0);
        let _ = self
            .ctx
            .reports
            .send(Report::Outcome(Box::new(report)))
            .await;
    }

    fn snapshot(&self) -> QueueSnapshot {
        let now = Instant::now();
        let mut destinations: Vec<_> = self.dests.values().map(|d| d.view(now)).collect();
        destinations.sort_by(|a, b| {
            (b.ready + b.waiting)
                .cmp(&(a.ready + a.waiting))
                .then_with(|| a.destination.cmp(&b.destination))
        });
        let resolving = self
            .routes
            .values()
            .map(|r| match r {
                Route::Resolving(j) | Route::RetryDns { jobs: j, .. } => j.len(),
                _ => 0,
            })
            .sum();
        QueueSnapshot {
            queued: self.queued,
            resolving,
            connections: self.connections,
            destinations,
        }
    }

    fn update_gauges(&self) {
        let g = self.ctx.telemetry.gauges();
        g.queued_recipients.store(self.queued as i64, Relaxed);
        g.destinations_active.store(
            self.dests.values().filter(|d| d.queued() > 0).count() as i64,
            Relaxed,
        );
    }
}

fn expired_reply() -> RcptOutcome {
    RcptOutcome::Failed(Reply::new(
        550,
        Some(EnhancedStatus::new(5, 4, 7)),
        "delivery time expired: gave up after the list's maximum age",
    ))
}
