//! The scheduler: turns spooled posts into delivered copies.
//!
//! ```text
//! submit(post) ─► expansion (render once; members in pages) ─► jobs (bounded) ─► actor
//!   actor: domain → MX route → destination queue ─► workers (one SMTP connection each)
//!   workers ─► reports (bounded) ─► outcomes: spool journal + telemetry + completion + bounces
//! ```
//!
//! A folder per stage it runs, and where each loop is:
//! - `expansion/mod.rs` — [`expansion::expand`]: one task per post, members read in pages,
//!   blocking on the post's window and the bounded job channel;
//! - `actor/mod.rs` — [`actor::Actor::run`]: the scheduling actor's loop (its concerns are the
//!   other files of `actor/`: routes, dispatch, outcome, snapshot, operator, health, shaping,
//!   queue, stragglers, backoff);
//! - `workers/mod.rs` — [`workers::run`]: one task per SMTP connection, over the
//!   [`workers::Connector`] seam (`workers/smtp.rs` is the real one);
//! - `outcomes/mod.rs` — [`outcomes::run`]: the report loop (journal, telemetry, completion,
//!   failed copies to the bounce stage).
//!
//! What they send each other is in `messages/` (jobs, the actor's inbox `Ctrl`, reports, queue
//! views); `config.rs`, `clock.rs` and `classify.rs` are leaves. No stage imports another's
//! module except the actor, which starts workers: the `crate::` graph is acyclic (checked by
//! `tests/architecture.rs`). This file is the handle other crates hold ([`Scheduler`]).
//!
//! Limits (all in [`SchedulerConfig`]): connections in all, in the slow lane and per destination
//! (shaping budgets), copies and bytes per batch, copies per connection, the window of queued
//! copies in all and per post (which bound memory and keep big posts from starving small ones),
//! DNS lookups in flight, hosts tracked by host health. The window holds only copies that may be
//! tried now: copies waiting for a retry time or a down host are parked in the deferred queue
//! on disk (`actor/deferred.rs`, `actor/parking.rs`), so dead destinations never fill it.
//!
//! Resilience: host health per (MX name, address) with down marking and one probe
//! ([`actor::health`]); two lanes — first attempts with short timeouts, retries with RFC 5321
//! timeouts on a bounded share of connections ([`actor::queue`]); stragglers coalesced per
//! destination and indexed per recipient ([`actor::stragglers`]); destinations served fastest
//! first when connections are scarce; AIMD shaping by MX suffix ([`actor::shaping`]); throttling
//! and greylisting told apart from failures ([`classify`]); expiry after the list's maximum age.
//! Time comes from tokio's clock and a [`Clock`] (wall time), so all of it runs under a paused
//! clock in tests.

pub mod actor;
pub mod classify;
pub mod clock;
pub mod config;
pub mod expansion;
pub mod messages;
pub mod outcomes;
pub mod workers;

pub use clock::Clock;
pub use config::{ConfigError, SchedulerConfig, ShapingRule};
pub use messages::{
    Action, DestinationView, HostView, QueueSnapshot, Selector, SnapshotRequest, StragglerView,
};
pub use outcomes::{FinalSink, FAILED_COPY_CAPACITY};

use herald_directory::Directory;
use herald_fanout::ListContext;
use herald_routing::{Dane, MtaSts, MxResolver};
use herald_smtp_client::ClientConfig;
use herald_spool::{PostKind, RecoveredPost, Spool, SpooledPost};
use herald_telemetry::{Event, Telemetry};
use messages::Ctrl;
use serde::Serialize;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Everything the scheduler works with.
pub struct SchedulerDeps {
    pub directory: Directory,
    pub spool: Spool,
    pub telemetry: Telemetry,
    pub resolver: Arc<MxResolver>,
    pub client: ClientConfig,
    pub list_ctx: ListContext,
    /// Where permanent failures go for bounce scoring (`None`: not scored).
    pub failures: Option<mpsc::Sender<herald_types::FailedCopy>>,
    /// Cross-post suppression at expansion (`None`: off).
    pub dedup: Option<herald_spool::DedupStore>,
    /// Where host health is kept across restarts (`None`: not persisted).
    pub health_path: Option<std::path::PathBuf>,
    /// Where the deferred queue keeps parked copies (`actor/deferred.rs`; `None`: in memory).
    pub deferred_dir: Option<std::path::PathBuf>,
    /// Where MTA-STS policies are cached across restarts (`None`: memory only).
    pub mta_sts_path: Option<std::path::PathBuf>,
    /// Where each session's TLS result goes for TLS reporting (RFC 8460; `None`: off).
    pub tls_sessions: Option<mpsc::Sender<herald_types::TlsSessionRecord>>,
    /// Egress pools (`None`: not configured, the system picks source addresses).
    /// Its warm-up ledger is written about once a second while it changes, and when the
    /// scheduler stops.
    pub egress: Option<herald_egress::Egress>,
    /// Told of every final outcome and completed post (the shared fan-out's reporter, which
    /// reports a shard's progress to the store; `None`: nobody).
    pub finals: Option<Arc<dyn outcomes::FinalSink>>,
}

/// Why new shaping rules were not taken.
#[derive(Debug, thiserror::Error)]
pub enum ReshapeError {
    #[error("{0}")]
    Invalid(ConfigError),
    #[error("the scheduler has stopped")]
    Stopped,
}

/// Why the scheduler refused work.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("the scheduler has stopped")]
    Stopped,
}

/// The handle other stages use: submit posts, look at the queue.
#[derive(Clone)]
pub struct Scheduler {
    expand_ctx: Arc<expansion::ExpandCtx>,
    /// The egress pools, for `/metrics`.
    egress: Option<herald_egress::Egress>,
    ctrl: mpsc::Sender<Ctrl>,
    telemetry: Telemetry,
    shutdown: CancellationToken,
}

/// This node's scheduler as fan-out: the one fan-out consumer (`herald_stage::fan_out`)
/// hands it the posts enqueue hands over.
impl herald_stage::FanOut for Scheduler {
    fn submit(&self, post: SpooledPost) {
        Scheduler::submit(self, post)
    }
}

/// Starts delivery as a row of the running table: the scheduler resumes `recovered` and
/// runs until the drain reaches [`herald_stage::StopAt::Delivery`]; its workers then finish
/// their batch and every reported outcome is journaled before the task ends.
pub fn start(
    cfg: SchedulerConfig,
    deps: SchedulerDeps,
    recovered: Vec<RecoveredPost>,
) -> herald_stage::Started<Scheduler> {
    let stop = CancellationToken::new();
    let (scheduler, task) = Scheduler::start(cfg, deps, recovered, stop.clone());
    herald_stage::Started::new("scheduler", herald_stage::StopAt::Delivery, stop, scheduler)
        .with_task(task)
}

impl Scheduler {
    /// Starts the actor and the report loop, and resumes every recovered post. The returned task
    /// ends after `shutdown` is cancelled and in-flight work is reported and journaled.
    pub fn start(
        cfg: SchedulerConfig,
        deps: SchedulerDeps,
        recovered: Vec<RecoveredPost>,
        shutdown: CancellationToken,
    ) -> (Scheduler, JoinHandle<()>) {
        let cfg = Arc::new(cfg);
        let (jobs_tx, jobs_rx) = mpsc::channel(64);
        let (ctrl_tx, ctrl_rx) = mpsc::channel(4096);
        let (report_tx, report_rx) = mpsc::channel(16_384);
        let mta_sts = deps.client.mta_sts.enabled.then(|| {
            Arc::new(MtaSts::new(
                &deps.client.mta_sts,
                &deps.resolver,
                deps.client.tls_ca_file.as_deref(),
                deps.mta_sts_path,
            ))
        });
        // DANE looks up TLSA records for the delivery port (`_25._tcp` on the Internet).
        let dane = deps
            .client
            .dane
            .enabled
            .then(|| Dane::new(&deps.client.dane, &deps.resolver, deps.client.port));
        let connector = workers::smtp::SmtpConnector {
            slow_client: Arc::new(cfg.slow_client(&deps.client)),
            client: Arc::new(deps.client.clone()),
            egress: deps.egress.clone(),
        };
        let worker_ctx = Arc::new(workers::WorkerCtx {
            connector: Arc::new(connector),
            port: deps.client.port,
            ctrl: ctrl_tx.clone(),
            reports: report_tx.clone(),
            spool: deps.spool.clone(),
            window: cfg.max_copies_per_batch.max(1),
            telemetry: deps.telemetry.clone(),
            shutdown: shutdown.clone(),
            tls_sessions: deps.tls_sessions,
            egress: deps.egress.clone(),
            copy_budget: workers::budget::CopyBudget::new(
                cfg.max_copy_bytes,
                deps.telemetry.clone(),
            ),
            signing: workers::signing::start(deps.client.signing_threads),
        });
        let resolvers = actor::routes::Resolvers {
            resolver: deps.resolver,
            mta_sts,
            dane,
        };
        let bound = cfg
            .max_connections
            .saturating_mul(cfg.max_copies_per_batch.max(1));
        deps.telemetry
            .gauges()
            .unjournaled_copies_bound
            .set(i64::try_from(bound).unwrap_or(i64::MAX));
        let mut actor = actor::Actor::new(
            cfg.clone(),
            worker_ctx,
            resolvers,
            deps.health_path,
            Clock::system(),
        );
        if let Some(dir) = deps.deferred_dir {
            actor = actor.with_deferred_dir(dir);
        }
        let expand_ctx = Arc::new(expansion::ExpandCtx {
            directory: deps.directory,
            list_ctx: deps.list_ctx,
            jobs: jobs_tx,
            reports: report_tx,
            page_size: cfg.expansion_page.max(1),
            dedup: deps.dedup,
            post_window: expansion::window::WindowRule::from_config(&cfg),
            telemetry: deps.telemetry.clone(),
        });
        let scheduler = Scheduler {
            egress: deps.egress.clone(),
            expand_ctx,
            ctrl: ctrl_tx,
            telemetry: deps.telemetry.clone(),
            shutdown: shutdown.clone(),
        };
        let actor_done = CancellationToken::new();
        let reports = tokio::spawn(outcomes::run(
            report_rx,
            deps.spool,
            deps.telemetry,
            deps.failures,
            deps.finals,
            actor_done.clone(),
        ));
        let actor_task = tokio::spawn(actor.run(jobs_rx, ctrl_rx, shutdown));
        for post in recovered {
            scheduler.resume(post);
        }
        let ledger = deps
            .egress
            .map(|e| tokio::spawn(flush_egress(e, actor_done.clone())));
        let handle = tokio::spawn(async move {
            let _ = actor_task.await;
            // Workers have finished their batches: let the report loop drain and flush.
            actor_done.cancel();
            let _ = reports.await;
            if let Some(ledger) = ledger {
                let _ = ledger.await;
            }
        });
        (scheduler, handle)
    }

    /// The egress pools' sources as `/metrics` shows them: connections open, copies
    /// sent today and today's warm-up cap per source address.
    pub fn egress_sources(&self) -> Vec<herald_egress::SourceView> {
        self.egress
            .as_ref()
            .map(|e| e.sources(herald_egress::utc_day(herald_types::unix_ms_now())))
            .unwrap_or_default()
    }

    /// Fans out a freshly spooled post. List posts go to the members, generated mail to its
    /// explicit recipients; held posts, bounces and requests stay in the spool for their own
    /// stages.
    pub fn submit(&self, post: SpooledPost) {
        if !matches!(post.meta.kind, PostKind::ListPost | PostKind::Generated) {
            return;
        }
        self.spawn_expand(post.id, post.meta, post.body, None);
    }

    /// Fans out one shard of a post shared between nodes: `post` was
    /// spooled here with its `member_range`; `done` holds the members other nodes (or this
    /// node's previous lease) already finished.
    pub fn submit_shard(&self, post: SpooledPost, done: herald_spool::DoneSet) {
        self.spawn_expand(post.id, post.meta, post.body, Some(done));
    }

    fn resume(&self, post: RecoveredPost) {
        if !matches!(post.meta.kind, PostKind::ListPost | PostKind::Generated) {
            return;
        }
        self.telemetry.emit(Event::PostAccepted {
            post: post.id,
            list: post.meta.list_address.clone(),
            size: post.body.len(),
            received_at_ms: post.meta.received_at_ms,
            recovered: true,
        });
        self.spawn_expand(post.id, post.meta, post.body, Some(post.done));
    }

    fn spawn_expand(
        &self,
        id: herald_types::PostId,
        meta: herald_spool::PostMeta,
        body: bytes::Bytes,
        done: Option<herald_spool::DoneSet>,
    ) {
        let ctx = self.expand_ctx.clone();
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                r = async {
                    if meta.kind == PostKind::Generated {
                        expansion::expand_generated(ctx, id, meta, body, done).await
                    } else {
                        expansion::expand(ctx, id, meta, body, done).await
                    }
                } => match r {
                    Ok(n) => tracing::info!(post = %id, copies = n, "post expanded"),
                    Err(e) => tracing::error!(post = %id, error = %e, "post not expanded; it stays in the spool"),
                }
            }
        });
    }

    /// The queue by destination, for `herald queue` and the status API.
    pub async fn queue_snapshot(&self) -> Result<QueueSnapshot, SchedulerError> {
        self.queue_snapshot_with(SnapshotRequest::default()).await
    }

    /// The queue with a row limit, optionally with the stragglers (`herald queue --stragglers`).
    pub async fn queue_snapshot_with(
        &self,
        req: SnapshotRequest,
    ) -> Result<QueueSnapshot, SchedulerError> {
        let (tx, rx) = oneshot::channel();
        self.ctrl
            .send(Ctrl::Snapshot(req, tx))
            .await
            .map_err(|_| SchedulerError::Stopped)?;
        rx.await.map_err(|_| SchedulerError::Stopped)
    }
}

// The handle's channel views and operator commands (formerly `channels.rs`).

/// One channel's fill level (read without locking; a momentary value).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChannelView {
    pub channel: &'static str,
    pub depth: usize,
    pub capacity: usize,
}

fn view<T>(channel: &'static str, tx: &mpsc::Sender<T>) -> ChannelView {
    ChannelView {
        channel,
        depth: tx.max_capacity() - tx.capacity(),
        capacity: tx.max_capacity(),
    }
}

impl Scheduler {
    /// Depths of the scheduler's bounded channels.
    pub fn channels(&self) -> Vec<ChannelView> {
        vec![
            view("jobs", &self.expand_ctx.jobs),
            view("control", &self.ctrl),
            view("reports", &self.expand_ctx.reports),
        ]
    }

    /// Replaces the shaping rules (SIGHUP): destinations move to the budgets the new rules give
    /// them; rules whose limits changed apply from the next connection. The rules are checked
    /// like at start; Err names the first bad one and nothing changes.
    pub async fn reshape(&self, rules: Vec<ShapingRule>) -> Result<(), ReshapeError> {
        let probe = SchedulerConfig {
            shaping: rules.clone(),
            ..SchedulerConfig::default()
        };
        probe.validate().map_err(ReshapeError::Invalid)?;
        self.ctrl
            .send(Ctrl::Reshape(rules))
            .await
            .map_err(|_| ReshapeError::Stopped)
    }

    /// Applies the cluster's shared knowledge (provider shares, hosts down at
    /// other nodes) and returns what this node learned since the last exchange.
    pub async fn exchange_knowledge(
        &self,
        knowledge: messages::knowledge::ClusterKnowledge,
    ) -> Result<messages::knowledge::LocalKnowledge, SchedulerError> {
        let (reply, rx) = oneshot::channel();
        self.ctrl
            .send(Ctrl::Knowledge(knowledge, reply))
            .await
            .map_err(|_| SchedulerError::Stopped)?;
        rx.await.map_err(|_| SchedulerError::Stopped)
    }

    /// Retries now, or gives up, every queued copy the selector matches; returns how many.
    pub async fn operate(&self, selector: Selector, action: Action) -> Result<u64, SchedulerError> {
        let (reply, rx) = oneshot::channel();
        self.ctrl
            .send(Ctrl::Operator(messages::Command {
                selector,
                action,
                reply,
            }))
            .await
            .map_err(|_| SchedulerError::Stopped)?;
        rx.await.map_err(|_| SchedulerError::Stopped)
    }
}

/// Writes the egress warm-up ledger about once a second while counts change, and a last time
/// when the scheduler's workers are done (blocking writes, off the async threads).
async fn flush_egress(egress: herald_egress::Egress, done: CancellationToken) {
    loop {
        let stop = tokio::select! {
            _ = done.cancelled() => true,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => false,
        };
        let e = egress.clone();
        match tokio::task::spawn_blocking(move || e.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(error = %err, "egress warm-up ledger not written"),
            Err(err) => tracing::warn!(error = %err, "egress ledger task failed"),
        }
        if stop {
            return;
        }
    }
}
