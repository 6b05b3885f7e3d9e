//! The scheduler: turns spooled posts into delivered copies.
//!
//! ```text
//! submit(post) ─► expand (render once; members in pages) ─► jobs (bounded) ─► actor
//!   actor: domain → MX route → destination queue ─► workers (one SMTP connection each)
//!   workers ─► reports (bounded) ─► report loop: spool journal + telemetry + completion
//! ```
//!
//! Limits (all in [`SchedulerConfig`]): connections in all, in the slow lane and per destination
//! (shaping budgets), copies and bytes per batch, copies per connection, the window of queued
//! copies in all and per post (which bound memory and keep big posts from starving small ones),
//! DNS lookups in flight, hosts tracked by host health.
//!
//! Resilience (issue 4): host health per (MX name, address) with down marking and one probe
//! ([`health`]); two lanes — first attempts with short timeouts, retries with RFC 5321 timeouts
//! on a bounded share of connections ([`queue`], [`dispatch`]); stragglers coalesced per
//! destination and indexed per recipient ([`stragglers`]); destinations served fastest first
//! when connections are scarce; AIMD shaping by MX suffix ([`shaping`]); throttling and
//! greylisting told apart from failures ([`classify`]); expiry after the list's maximum age.

pub mod actor;
pub mod backoff;
pub mod channels;
pub mod classify;
pub mod dispatch;
pub mod expand;
pub mod health;
pub mod job;
pub mod outcome;
pub mod queue;
pub mod report;
pub mod shaping;
pub mod snapshot;
pub mod stragglers;
pub mod worker;

pub use actor::operator::{Action, Selector};
pub use channels::ChannelView;
pub use queue::{DestinationView, HostView, QueueSnapshot, SnapshotRequest, StragglerView};
pub use report::FAILED_COPY_CAPACITY;
pub use shaping::ShapingRule;

use herald_directory::Directory;
use herald_fanout::ListContext;
use herald_routing::{Dane, MtaSts, MxResolver};
use herald_smtp_client::ClientConfig;
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
    /// A routed domain is resolved again this often (its MX hosts, its MTA-STS policy and its
    /// DANE TLSA answers, which also make the route expire no later than the policy or the
    /// answers do), so changes reach the queue.
    pub route_refresh_secs: u64,
    /// Scheduler housekeeping interval (retry promotion, idle connections).
    pub tick_ms: u64,
    /// Copies of one post queued at most: a huge post leaves room for the others (fairness).
    pub max_queued_copies_per_post: usize,
    /// Connections of the slow lane (retries) at most, within `max_connections`: stragglers never
    /// take the connections first attempts need.
    pub slow_lane_max_connections: usize,
    /// Slow-lane timeouts (RFC 5321 §4.5.3.2: 5 min for the greeting and commands, 10 min for
    /// the end of DATA). Connect is not in the RFC; a minute is generous.
    pub slow_connect_timeout_secs: u64,
    pub slow_banner_timeout_secs: u64,
    pub slow_command_timeout_secs: u64,
    pub slow_data_timeout_secs: u64,
    /// A host (MX name and address) is marked down after this many consecutive failed
    /// connections; it stays down `destination_backoff_secs` (doubling on each failed probe up to
    /// `destination_backoff_max_secs`), then one probe connection tests it.
    pub host_down_after_failures: u32,
    /// Hosts tracked by host health at most.
    pub host_health_max_hosts: usize,
    /// Host health is written to `<data_dir>/host-health.json` this often (and at shutdown).
    pub host_health_persist_secs: u64,
    /// A greylisted copy is retried after the interval the server names, or this long.
    pub greylist_retry_secs: u64,
    /// A throttled copy is retried after this long (its destination's budget is cut meanwhile).
    pub throttle_retry_secs: u64,
    /// Throttling signals within this long of a cut count once (parallel connections all see
    /// the same 421).
    pub throttle_cooldown_ms: u64,
    /// Shaping rules by MX host suffix; see herald.example.toml for the provider presets.
    pub shaping: Vec<ShapingRule>,
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
            route_refresh_secs: 3600,
            tick_ms: 200,
            max_queued_copies_per_post: 50_000,
            slow_lane_max_connections: 100,
            slow_connect_timeout_secs: 60,
            slow_banner_timeout_secs: 300,
            slow_command_timeout_secs: 300,
            slow_data_timeout_secs: 600,
            host_down_after_failures: 2,
            host_health_max_hosts: 100_000,
            host_health_persist_secs: 30,
            greylist_retry_secs: 300,
            throttle_retry_secs: 30,
            throttle_cooldown_ms: 1000,
            shaping: Vec::new(),
        }
    }
}

/// A scheduler setting that cannot work; names its key.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: scheduler.{key} {reason}")]
pub struct ConfigError {
    pub key: &'static str,
    pub reason: String,
}

impl SchedulerConfig {
    /// Refuses settings that would stall delivery. Called once at start.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key, reason: &str| {
            Err(ConfigError {
                key,
                reason: reason.to_string(),
            })
        };
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1");
        }
        if self.slow_lane_max_connections >= self.max_connections {
            return bad(
                "slow_lane_max_connections",
                "must be below max_connections (first attempts need a share)",
            );
        }
        if self.max_queued_copies_per_post == 0
            || self.max_queued_copies_per_post > self.max_queued_copies
        {
            return bad(
                "max_queued_copies_per_post",
                "must be between 1 and max_queued_copies",
            );
        }
        if self.host_down_after_failures == 0 {
            return bad("host_down_after_failures", "must be at least 1");
        }
        if self.route_refresh_secs == 0 {
            return bad("route_refresh_secs", "must be at least 1");
        }
        for (i, r) in self.shaping.iter().enumerate() {
            if r.mx_suffixes.iter().all(|s| s.trim_matches('.').is_empty()) {
                return Err(ConfigError {
                    key: "shaping",
                    reason: format!("rule {i} ({}) has no mx_suffixes", r.name),
                });
            }
        }
        Ok(())
    }

    /// The client settings of a slow-lane connection: `fast` with the slow-lane timeouts.
    pub fn slow_client(&self, fast: &ClientConfig) -> ClientConfig {
        let s = std::time::Duration::from_secs;
        ClientConfig {
            connect_timeout: s(self.slow_connect_timeout_secs).max(fast.connect_timeout),
            banner_timeout: s(self.slow_banner_timeout_secs).max(fast.banner_timeout),
            command_timeout: s(self.slow_command_timeout_secs).max(fast.command_timeout),
            data_timeout: s(self.slow_data_timeout_secs).max(fast.data_timeout),
            ..fast.clone()
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
    /// Where permanent failures go for bounce scoring (`None`: not scored).
    pub failures: Option<mpsc::Sender<herald_types::FailedCopy>>,
    /// Cross-post suppression at expansion (`None`: off).
    pub dedup: Option<herald_fanout::DedupStore>,
    /// Where host health is kept across restarts (`None`: not persisted).
    pub health_path: Option<std::path::PathBuf>,
    /// Where MTA-STS policies are cached across restarts (`None`: memory only).
    pub mta_sts_path: Option<std::path::PathBuf>,
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
        let worker_ctx = Arc::new(worker::WorkerCtx {
            slow_client: Arc::new(cfg.slow_client(&deps.client)),
            client: Arc::new(deps.client),
            resolver: deps.resolver,
            mta_sts,
            dane,
            ctrl: ctrl_tx.clone(),
            reports: report_tx.clone(),
            spool: deps.spool.clone(),
            window: cfg.max_copies_per_batch.max(1),
            telemetry: deps.telemetry.clone(),
            shutdown: shutdown.clone(),
        });
        let bound = cfg
            .max_connections
            .saturating_mul(cfg.max_copies_per_batch.max(1));
        deps.telemetry.gauges().unjournaled_copies_bound.store(
            i64::try_from(bound).unwrap_or(i64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        let actor = actor::Actor::new(cfg.clone(), worker_ctx, deps.health_path);
        let expand_ctx = Arc::new(expand::ExpandCtx {
            directory: deps.directory,
            list_ctx: deps.list_ctx,
            jobs: jobs_tx,
            reports: report_tx,
            page_size: cfg.expansion_page.max(1),
            dedup: deps.dedup,
            post_window: cfg.max_queued_copies_per_post.max(1),
            telemetry: deps.telemetry.clone(),
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
            deps.failures,
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

    /// Fans out a freshly spooled post. List posts go to the members, generated mail to its
    /// explicit recipients; held posts, bounces and requests stay in the spool for their own
    /// stages.
    pub fn submit(&self, post: SpooledPost) {
        if !matches!(post.meta.kind, PostKind::ListPost | PostKind::Generated) {
            return;
        }
        self.spawn_expand(post.id, post.meta, post.body, None);
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
                        expand::expand_generated(ctx, id, meta, body, done).await
                    } else {
                        expand::expand(ctx, id, meta, body, done).await
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
            .send(actor::Ctrl::Snapshot(req, tx))
            .await
            .map_err(|_| SchedulerError::Stopped)?;
        rx.await.map_err(|_| SchedulerError::Stopped)
    }
}
