//! The scheduler: turns spooled posts into delivered copies.
//!
//! ```text
//! submit(post) ─► expand (render once; members in pages) ─► jobs (bounded) ─► actor
//!   actor: domain → MX route → destination queue ─► workers (one SMTP connection each)
//!   workers ─► reports (bounded) ─► report loop: spool journal + telemetry + completion
//! ```
//!
//! Limits (all in [`SchedulerConfig`]): connections in all and per destination, copies and bytes
//! per batch, copies per connection, the window of queued copies (which bounds memory), DNS
//! lookups in flight. Retries are exponential with jitter; a destination whose connections fail
//! is marked down with a growing backoff and then probed with a single connection.

pub mod actor;
pub mod backoff;
pub mod expand;
pub mod job;
pub mod queue;
pub mod report;
pub mod worker;

pub use queue::{DestinationView, QueueSnapshot};

use herald_delivery::{ClientConfig, MxResolver};
use herald_directory::Directory;
use herald_fanout::ListContext;
use herald_spool::{PostKind, RecoveredPost, Spool, SpooledPost};
use herald_telemetry::{Event, Telemetry};
use serde::Deserialize;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Scheduler limits and schedules. Every field has a default; unknown keys are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Outbound SMTP connections open at once, over all destinations.
    pub max_connections: usize,
    /// Connections open at once to one destination (MX host set).
    pub max_connections_per_destination: usize,
    /// Copies handed to a connection at a time (they are pipelined together).
    pub max_copies_per_batch: usize,
    /// Spliced bytes per batch: big posts get smaller batches (bounded memory per worker).
    /// Each worker keeps its batch's splice buffers while its connection lives, so this times
    /// `max_connections` bounds that memory: 64 KiB x 1000 = 64 MB. 512 KiB made a 1,000-domain
    /// fan-out peak at ~460 MB with no gain in copies/s (BENCHMARKS.md).
    pub batch_bytes: usize,
    /// After this many copies a connection is closed and a fresh one opened.
    pub max_messages_per_connection: usize,
    /// How long an idle connection waits for more copies before it quits.
    pub idle_connection_ms: u64,
    /// Retry schedule for deferred copies: first delay, cap, jitter (0–1).
    pub retry_initial_secs: u64,
    pub retry_max_secs: u64,
    pub retry_jitter: f64,
    /// A destination whose connections fail is not tried again for this long (doubling).
    pub destination_backoff_secs: u64,
    pub destination_backoff_max_secs: u64,
    /// Copies queued in memory at most; expansion waits beyond it.
    pub max_queued_copies: usize,
    /// Members read from the directory per page.
    pub expansion_page: usize,
    /// DNS lookups in flight at once.
    pub resolve_concurrency: usize,
    /// A domain that does not exist is remembered this long.
    pub dns_negative_cache_secs: u64,
    /// Scheduler housekeeping interval (retry promotion, idle connections).
    pub tick_ms: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_connections: 1000,
            max_connections_per_destination: 20,
            max_copies_per_batch: 16,
            batch_bytes: 64 * 1024,
            max_messages_per_connection: 1000,
            idle_connection_ms: 2000,
            retry_initial_secs: 60,
            retry_max_secs: 3600,
            retry_jitter: 0.2,
            destination_backoff_secs: 30,
            destination_backoff_max_secs: 1800,
            max_queued_copies: 200_000,
            expansion_page: 2000,
            resolve_concurrency: 64,
            dns_negative_cache_secs: 600,
            tick_ms: 200,
        }
    }
}

/// Everything the scheduler works with.
pub struct SchedulerDeps {
    pub directory: Directory,
    pub spool: Spool,
    pub telemetry: Telemetry,
    pub resolver: Arc<MxResolver>,
    pub client: ClientConfig,
    pub list_ctx: ListContext,
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
    expand_ctx: Arc<expand::ExpandCtx>,
    ctrl: mpsc::Sender<actor::Ctrl>,
    telemetry: Telemetry,
    shutdown: CancellationToken,
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
        let worker_ctx = Arc::new(worker::WorkerCtx {
            client: deps.client,
            resolver: deps.resolver,
            ctrl: ctrl_tx.clone(),
            reports: report_tx.clone(),
            telemetry: deps.telemetry.clone(),
            max_messages_per_connection: cfg.max_messages_per_connection,
        });
        let actor = actor::Actor::new(cfg.clone(), worker_ctx);
        let expand_ctx = Arc::new(expand::ExpandCtx {
            directory: deps.directory,
            list_ctx: deps.list_ctx,
            jobs: jobs_tx,
            reports: report_tx,
            page_size: cfg.expansion_page.max(1),
        });
        let scheduler = Scheduler {
            expand_ctx,
            ctrl: ctrl_tx,
            telemetry: deps.telemetry.clone(),
            shutdown: shutdown.clone(),
        };
        let actor_done = CancellationToken::new();
        let reports = tokio::spawn(report::run(
            report_rx,
            deps.spool,
            deps.telemetry,
            actor_done.clone(),
        ));
        let actor_task = tokio::spawn(actor.run(jobs_rx, ctrl_rx, shutdown));
        for post in recovered {
            scheduler.resume(post);
        }
        let handle = tokio::spawn(async move {
            let _ = actor_task.await;
            // Workers have finished their batches: let the report loop drain and flush.
            actor_done.cancel();
            let _ = reports.await;
        });
        (scheduler, handle)
    }

    /// Fans out a freshly spooled post. Only list posts are fanned out; held posts, bounces and
    /// requests stay in the spool for their own stages.
    pub fn submit(&self, post: SpooledPost) {
        if post.meta.kind != PostKind::ListPost {
            return;
        }
        self.spawn_expand(post.id, post.meta, post.body, None);
    }

    fn resume(&self, post: RecoveredPost) {
        if post.meta.kind != PostKind::ListPost {
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
                r = expand::expand(ctx, id, meta, body, done) => match r {
                    Ok(n) => tracing::info!(post = %id, copies = n, "post expanded"),
                    Err(e) => tracing::error!(post = %id, error = %e, "post not expanded; it stays in the spool"),
                }
            }
        });
    }

    /// The queue by destination, for `herald queue` and the status API.
    pub async fn queue_snapshot(&self) -> Result<QueueSnapshot, SchedulerError> {
        let (tx, rx) = oneshot::channel();
        self.ctrl
            .send(actor::Ctrl::Snapshot(tx))
            .await
            .map_err(|_| SchedulerError::Stopped)?;
        rx.await.map_err(|_| SchedulerError::Stopped)
    }
}
