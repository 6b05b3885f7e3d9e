//! What the rows of the stage table (`steps.rs`) are built from: each stage's settings and
//! handles read out of the server's configuration, with the configuration key to blame when
//! one cannot be set up.

use crate::ServerError;
use herald_config::{Config, ConfigError};
use herald_enqueue::{ArrivalCheck, ArrivalSetupError, Enqueuer};
use herald_fanout::ListContext;
use herald_lists::Lists;
use herald_scheduler::{Scheduler, SchedulerDeps};
use herald_stage::StartCx;
use std::sync::Arc;
use std::time::Duration;

/// A stage that cannot be set up from its `[key]` section.
pub(super) fn unusable(key: &str, e: impl std::fmt::Display) -> ServerError {
    ServerError::Config(ConfigError::Unusable {
        key: key.into(),
        message: e.to_string(),
    })
}

/// The egress pools (`[[delivery.egress]]`), with their warm-up ledger in the data
/// directory; `None` when no source is configured.
pub(super) fn open_egress(config: &Config) -> Result<Option<herald_egress::Egress>, ServerError> {
    let cfg = config.delivery.egress_config();
    if cfg.sources.is_empty() {
        return Ok(None);
    }
    let today = herald_egress::utc_day(herald_types::unix_ms_now());
    let ledger = Some(config.data_dir.join("egress-warmup.json"));
    let egress = herald_egress::Egress::open(&cfg, ledger, today)?;
    tracing::info!(
        sources = cfg.sources.len(),
        pools = cfg.pools.len(),
        "egress pools configured"
    );
    Ok(Some(egress))
}

/// The arrival check with its own resolver (mail-auth's, through the same `[dns]` servers).
pub(super) fn arrival_check(config: &Config) -> Result<ArrivalCheck, ServerError> {
    let d = &config.dns;
    let timeout = Duration::from_millis(d.timeout_ms);
    config
        .auth
        .arrival_check(&d.nameservers, timeout, d.attempts, &config.hostname)
        .map_err(|e| match e {
            ArrivalSetupError::Resolver(e) => ServerError::Resolver(e.to_string()),
            ArrivalSetupError::Relays(message) => ServerError::Config(ConfigError::Unusable {
                key: "auth".into(),
                message,
            }),
        })
}

/// The rspamd client `[content_filter]` asks for (`None`: off).
pub(super) fn content_filter(
    config: &Config,
) -> Result<Option<herald_content_filter::ContentFilter>, ServerError> {
    herald_content_filter::ContentFilter::new(&config.content_filter).map_err(|e| {
        ServerError::Config(ConfigError::Unusable {
            key: "content_filter".into(),
            message: e.to_string(),
        })
    })
}

/// Message-IDs shared by the nodes: with shared knowledge, on PostgreSQL.
pub(super) fn cluster_dedup(
    config: &Config,
    cx: &StartCx,
    cluster: &herald_cluster::Cluster,
) -> Option<herald_enqueue::ClusterDedup> {
    config
        .cluster
        .shares_knowledge(&cx.directory)
        .then(|| herald_enqueue::ClusterDedup {
            directory: cx.directory.clone(),
            node: cluster.node_id().to_string(),
            window_ms: config.lists.dedup_window_secs.saturating_mul(1000),
        })
}

/// The archive writer's settings (`[archive]`).
pub(super) fn archive_config(config: &Config) -> herald_archive::stage::StageConfig {
    let a = &config.archive;
    herald_archive::stage::StageConfig {
        path: config.data_dir.join("archive.db"),
        default_privacy: a.default_privacy,
        capacity: a.queue_capacity,
        batch_max: a.batch_max,
        max_message_bytes: a.max_message_bytes,
        // Archived-At names the web archive's page (served for public lists).
        public_base_url: Some(config.public_base_url()),
    }
}

/// TLS reporting (RFC 8460), opened: reports are signed with the first `[dkim]` domain's key
/// unless `[tls_report] domain` names another.
pub(super) fn tls_reporting(
    config: &Config,
    enqueuer: &Arc<Enqueuer>,
) -> Result<Arc<herald_tlsrpt::TlsReporting>, ServerError> {
    let (resolver, _, _) =
        herald_routing::build_resolver(&config.dns).map_err(|e| unusable("tls_report", e))?;
    let dkim_domains: Vec<String> = config.dkim.keys().cloned().collect();
    herald_tlsrpt::TlsReporting::open(
        config.tls_report.clone(),
        &config.data_dir.join("tlsrpt.db"),
        &config.hostname,
        &dkim_domains,
        enqueuer.clone(),
        resolver,
        config.delivery.tls_ca_file.as_deref(),
    )
    .map_err(|e| unusable("tls_report", e))
}

/// The dedup store's flusher, stopped with the other stages.
pub(super) fn dedup_flusher(
    config: &Config,
    dedup: herald_enqueue::DedupStore,
) -> herald_stage::Started {
    let every = Duration::from_millis(config.lists.dedup_flush_ms);
    herald_stage::Started::spawn("dedup flusher", herald_stage::StopAt::Stages, move |stop| {
        herald_enqueue::dedup::run_flusher(dedup, every, stop)
    })
}

/// What step 1 opened, and the channel ends, that the scheduler is started with.
pub(super) struct Wires {
    pub resolver: Arc<herald_routing::MxResolver>,
    pub dedup: herald_enqueue::DedupStore,
    pub dkim: herald_auth::DkimKeys,
    pub failures: tokio::sync::mpsc::Sender<herald_types::FailedCopy>,
    pub tls_sessions: Option<tokio::sync::mpsc::Sender<herald_types::TlsSessionRecord>>,
}

/// The scheduler's dependencies: the stores, the client settings, what every copy is
/// built with, where it reports failures, TLS sessions and (shared fan-out) final outcomes.
pub(super) fn scheduler_deps(
    config: &Config,
    cx: &StartCx,
    wires: Wires,
    archive: &herald_archive::stage::StageConfig,
    finals: Option<Arc<dyn herald_scheduler::FinalSink>>,
) -> Result<SchedulerDeps, ServerError> {
    Ok(SchedulerDeps {
        directory: cx.directory.clone(),
        spool: cx.spool.clone(),
        telemetry: cx.telemetry.clone(),
        resolver: wires.resolver,
        client: config.client_config(),
        list_ctx: ListContext {
            unsubscribe_base_url: config.public_base_url(),
            archive_url: config.http.archive_url(),
            archived_at: match config.archive.enabled {
                true => Some(herald_archive::archived_at(archive)?),
                false => None,
            },
            secret: cx.secret.clone(),
            dkim: wires.dkim,
            authserv_id: config.hostname.clone(),
        },
        failures: Some(wires.failures),
        dedup: Some(wires.dedup),
        health_path: Some(config.data_dir.join("host-health.json")),
        deferred_dir: Some(config.data_dir.join("deferred")),
        mta_sts_path: Some(config.data_dir.join("mta-sts.json")),
        tls_sessions: wires.tls_sessions,
        egress: open_egress(config)?,
        finals,
    })
}

/// The shared fan-out's dependencies (`[cluster] shared_fanout`).
pub(super) fn shards_deps(
    config: &Config,
    cx: &StartCx,
    scheduler: &Scheduler,
    cluster: &herald_cluster::Cluster,
    prepared: &herald_shards::Prepared,
) -> herald_shards::ShardsDeps {
    herald_shards::ShardsDeps {
        directory: cx.directory.clone(),
        spool: cx.spool.clone(),
        telemetry: cx.telemetry.clone(),
        scheduler: scheduler.clone(),
        tracker: prepared.tracker.clone(),
        node: cluster.node_id().to_string(),
        cfg: config.cluster.clone(),
    }
}

/// The one enqueue path, filling the hand-off's `backlog`.
pub(super) fn enqueuer(
    config: &Config,
    cx: &StartCx,
    backlog: herald_enqueue::Backlog,
    shards: &Option<Arc<herald_shards::Shards>>,
    cluster: &herald_cluster::Cluster,
    dedup: &herald_enqueue::DedupStore,
) -> Result<Arc<Enqueuer>, ServerError> {
    Ok(Arc::new(Enqueuer {
        directory: cx.directory.clone(),
        spool: cx.spool.clone(),
        telemetry: cx.telemetry.clone(),
        max_message_bytes: config.smtp_in.limits.max_message_octets,
        dedup: Some(dedup.clone()),
        arrival: arrival_check(config)?,
        backlog,
        post_rate: Default::default(),
        content_filter: content_filter(config)?,
        shared: shards
            .clone()
            .map(|s| s as Arc<dyn herald_enqueue::SharedIntake>),
        cluster_dedup: cluster_dedup(config, cx, cluster),
    }))
}

/// The lists stage's handle (requests, moderation, postmaster mail, notices).
pub(super) fn lists(config: &Config, cx: &StartCx, enqueuer: &Arc<Enqueuer>) -> Arc<Lists> {
    Arc::new(Lists {
        enqueuer: enqueuer.clone(),
        postmaster: herald_lists::Postmaster::new(
            &config.hostname,
            config.postmaster.forward_addresses(),
            config.postmaster.retention_days,
        ),
        secret: cx.secret.clone(),
        hostname: config.hostname.clone(),
        public_base_url: config.public_base_url(),
        cfg: config.lists.clone(),
        notice_rate: herald_guard::NoticeRate::new(config.notice_limits.clone()),
    })
}

/// The digest stage's row, when the archive it reads is on (`[digest] enabled`).
pub(super) fn digests(
    config: &Config,
    cx: &StartCx,
    enqueuer: &Arc<Enqueuer>,
) -> Result<Option<herald_stage::Started<Arc<herald_digest::Digests>>>, ServerError> {
    if !(config.digest.enabled && config.archive.enabled) {
        return Ok(None);
    }
    let paths = herald_digest::DigestPaths {
        archive: &config.data_dir.join("archive.db"),
        ledger: &config.data_dir.join("digest.db"),
    };
    herald_digest::start(
        cx,
        enqueuer.clone(),
        paths,
        config.digest.clone(),
        config.hostname.clone(),
    )
    .map(Some)
    .map_err(|e| unusable("digest", e))
}

/// Shared knowledge's dependencies (it runs when the cluster shares knowledge).
pub(super) fn knowledge_deps(
    config: &Config,
    cx: &StartCx,
    scheduler: &Scheduler,
    cluster: &herald_cluster::Cluster,
) -> herald_knowledge::KnowledgeDeps {
    herald_knowledge::KnowledgeDeps {
        directory: cx.directory.clone(),
        scheduler: scheduler.clone(),
        node: cluster.node_id().to_string(),
        cfg: config.cluster.clone(),
    }
}
