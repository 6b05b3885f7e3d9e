//! The four steps of `server::run`: open the stores, start the stages, serve, drain. Wiring
//! only: each stage's loop runs in its own crate (enqueue, lists, bounce, scheduler, inbound,
//! api); this file creates the bounded channels between them and keeps the tasks to stop.
//!
//! The channels: enqueue ─► fan-out (the scheduler), enqueue ─► bounce stage, enqueue ─► lists
//! stage ([`herald_enqueue::Handoff`]); scheduler ─► bounce stage (failed copies); bounce
//! stage ─► lists stage (disabled members). All bounded; a full one makes its sender wait.

use crate::config::{Config, ConfigError};
use crate::listeners::{self, InboundTls, ListenerTask, Listeners};
use crate::ServerError;
use herald_directory::Directory;
use herald_enqueue::{
    ArrivalCheck, ArrivalSetupError, DedupConfig, DedupStore, Enqueuer, Handoff, ListHandler,
    PostmasterPolicy, HANDOFF_CAPACITY,
};
use herald_fanout::ListContext;
use herald_lists::Lists;
use herald_routing::MxResolver;
use herald_scheduler::{Scheduler, SchedulerDeps};
use herald_spool::{PostKind, RecoveredPost, Spool, SpooledPost};
use herald_telemetry::Telemetry;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

mod drain;
pub(crate) use drain::{drain, STOP_LIMIT};

/// What step 1 opens.
pub(crate) struct Stores {
    secret: Vec<u8>,
    directory: Directory,
    spool: Spool,
    recovered: Vec<RecoveredPost>,
    telemetry: Telemetry,
    resolver: Arc<MxResolver>,
    dedup: DedupStore,
    /// Web accounts and the audit log (`accounts.db`).
    accounts: herald_accounts::Accounts,
    /// This node's membership of the cluster: joined in `open_stores`.
    cluster: Arc<herald_cluster::Cluster>,
}

/// The running stages (step 2), with what step 3 needs and step 4 stops.
pub(crate) struct Stages {
    directory: Directory,
    spool: Spool,
    pub(crate) telemetry: Telemetry,
    secret: Vec<u8>,
    scheduler: Scheduler,
    scheduler_task: JoinHandle<()>,
    scheduler_stop: CancellationToken,
    enqueuer: Arc<Enqueuer>,
    lists: Arc<Lists>,
    /// Bounce and lists stages, the dedup flusher and the hand-over to fan-out.
    tasks: Vec<JoinHandle<()>>,
    /// The archive writer's thread (`[archive] enabled`): ends once the hand-over task has
    /// stopped and dropped its sender, after storing what was queued.
    archive_writer: Option<std::thread::JoinHandle<()>>,
    /// The web archive's read connection (`[archive] enabled`).
    web_archive: Option<Arc<herald_archive::web::WebArchive>>,
    /// The signing keys every copy is built with; SIGHUP replaces them in place.
    dkim: herald_auth::DkimKeys,
    /// The digest stage (`[digest] enabled` with the archive on).
    digests: Option<Arc<herald_digest::Digests>>,
    /// TLS reporting (`[tls_report] enabled`).
    tls_reports: Option<Arc<herald_tlsrpt::TlsReporting>>,
    /// Changes when the archive writer stored new posts (IMAP IDLE wakes on it).
    archive_committed: Option<tokio::sync::watch::Receiver<u64>>,
    /// Web accounts and the audit log, for the API.
    accounts: herald_accounts::Accounts,
    stages_stop: CancellationToken,
    /// This node's membership, for the API and the drain.
    cluster: Arc<herald_cluster::Cluster>,
    /// The heartbeat task (it marks the node left when stopped) and its stop.
    heartbeat: (JoinHandle<()>, CancellationToken),
    /// The shared fan-out (`[cluster] shared_fanout`).
    shards: Option<Arc<herald_shards::Shards>>,
    /// Shared knowledge: on a PostgreSQL store with `[cluster]
    /// shared_knowledge`.
    knowledge: Option<Arc<herald_knowledge::Knowledge>>,
    /// The hand-off task (acknowledged posts to their stage, `herald_enqueue::backlog::run`)
    /// and its stop: the first thing stopped after the listeners, so a backlog of accepted
    /// posts is left in the spool for the next start instead of holding up the stop.
    handoff: (JoinHandle<()>, CancellationToken),
}

impl Stages {
    pub(crate) fn spool(&self) -> &Spool {
        &self.spool
    }
}

/// The listeners and the HTTP API (step 3).
pub(crate) struct Served {
    inbound: Vec<ListenerTask>,
    api: JoinHandle<std::io::Result<()>>,
    /// The IMAP listeners (`[imap]`), each ending after its sessions.
    imap: Vec<JoinHandle<()>>,
}

/// Step 1: the data directory and everything stored in it.
pub(crate) async fn open_stores(
    config: &Config,
    http: std::net::SocketAddr,
) -> Result<Stores, ServerError> {
    let data_err = |source| ServerError::DataDir {
        path: config.data_dir.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&config.data_dir).map_err(data_err)?;
    herald_backup::take::remove_stale_staging(&[&config.data_dir, &config.spool_config().dir]);
    // Blocking, off the runtime's threads: the PostgreSQL client runs its own runtime and
    // must not be driven from a tokio worker (SQLite only touches the disk).
    let (store, data_dir) = (config.store.clone(), config.data_dir.clone());
    // A shared store is not migrated under live nodes of another version: alive
    // means what `herald status` means, by this node's `[cluster]` settings.
    let guard = herald_directory::MigrationGuard {
        node_id: Some(config.cluster.resolve_node_id(&config.hostname)),
        live_window: config.cluster.dead_after(),
    };
    let directory = tokio::task::spawn_blocking(move || store.open_guarded(&data_dir, &guard))
        .await
        .map_err(|e| ServerError::Task {
            what: "open the directory",
            message: e.to_string(),
        })??;
    tracing::info!(store = %config.store.describe(&config.data_dir), "directory opened");
    // A cluster has one secret, in the shared store: a link from one node works on all.
    let secret = match directory.store_kind() {
        herald_directory::StoreKind::Postgres => {
            let (c, d) = (config.clone(), directory.clone());
            tokio::task::spawn_blocking(move || crate::secret::shared(&c, &d))
                .await
                .map_err(|e| ServerError::Task {
                    what: "read the cluster secret",
                    message: e.to_string(),
                })??
        }
        herald_directory::StoreKind::Sqlite => {
            crate::secret::load_or_create(config).map_err(data_err)?
        }
    };
    let cluster = join_cluster(config, &directory, http).await?;
    let (spool, recovered) = Spool::open(config.spool_config())?;
    let telemetry = Telemetry::new(&herald_telemetry::telemetry_config(
        &config.data_dir,
        &config.log,
        &config.stats,
    ))?;
    let resolver =
        Arc::new(MxResolver::new(&config.dns).map_err(|e| ServerError::Resolver(e.to_string()))?);
    if !recovered.is_empty() {
        tracing::info!(
            posts = recovered.len(),
            "resuming unfinished posts from the spool"
        );
    }
    let dedup = DedupStore::open(
        DedupConfig {
            path: config.data_dir.join("dedup.log"),
            window_ms: config.lists.dedup_window_secs.saturating_mul(1000),
            max_entries: config.lists.dedup_max_entries,
        },
        herald_types::unix_ms_now(),
    )
    .map_err(|e| ServerError::DataDir {
        path: e.path.display().to_string(),
        source: e.source,
    })?;
    let accounts = herald_accounts::Accounts::open(
        &config.data_dir.join("accounts.db"),
        config.accounts.clone(),
    )?;
    Ok(Stores {
        cluster,
        secret,
        directory,
        spool,
        recovered,
        telemetry,
        resolver,
        dedup,
        accounts,
    })
}

/// Joins the cluster as `[cluster] node_id` (default: the host name), at
/// `[cluster] address` (default: the HTTP listener's bound address). Refuses to start on a
/// store at another schema version or with the id alive elsewhere (`herald_cluster::Cluster::join`).
async fn join_cluster(
    config: &Config,
    directory: &Directory,
    http: std::net::SocketAddr,
) -> Result<Arc<herald_cluster::Cluster>, ServerError> {
    let me = herald_cluster::Identity {
        node_id: config.cluster.resolve_node_id(&config.hostname),
        address: config
            .cluster
            .address
            .clone()
            .unwrap_or_else(|| http.to_string()),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let (d, cfg) = (directory.clone(), config.cluster.clone());
    let cluster = tokio::task::spawn_blocking(move || herald_cluster::Cluster::join(d, &cfg, me))
        .await
        .map_err(|e| ServerError::Task {
            what: "join the cluster",
            message: e.to_string(),
        })??;
    Ok(Arc::new(cluster))
}

/// Message-IDs shared by the nodes: with shared knowledge, on PostgreSQL.
fn cluster_dedup(
    config: &Config,
    directory: &Directory,
    cluster: &herald_cluster::Cluster,
) -> Option<herald_enqueue::ClusterDedup> {
    let shared = directory.store_kind() == herald_directory::StoreKind::Postgres;
    (shared && config.cluster.shared_knowledge).then(|| herald_enqueue::ClusterDedup {
        directory: directory.clone(),
        node: cluster.node_id().to_string(),
        window_ms: config.lists.dedup_window_secs.saturating_mul(1000),
    })
}

/// Shared knowledge between nodes: only on a PostgreSQL store (a SQLite
/// node has nobody to tell) with `[cluster] shared_knowledge` on.
fn start_knowledge(
    config: &Config,
    directory: &Directory,
    scheduler: &Scheduler,
    cluster: &herald_cluster::Cluster,
) -> Option<Arc<herald_knowledge::Knowledge>> {
    let shared = directory.store_kind() == herald_directory::StoreKind::Postgres;
    (shared && config.cluster.shared_knowledge).then(|| {
        herald_knowledge::Knowledge::new(herald_knowledge::KnowledgeDeps {
            directory: directory.clone(),
            scheduler: scheduler.clone(),
            node: cluster.node_id().to_string(),
            cfg: config.cluster.clone(),
        })
    })
}

/// The egress pools (`[[delivery.egress]]`), with their warm-up ledger in the data
/// directory; `None` when no source is configured.
fn open_egress(config: &Config) -> Result<Option<herald_egress::Egress>, ServerError> {
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

/// Recovered posts of `kind` as the stages receive them.
fn recovered_of(recovered: &[RecoveredPost], kind: PostKind) -> Vec<SpooledPost> {
    recovered
        .iter()
        .filter(|p| p.meta.kind == kind)
        .map(|p| SpooledPost {
            id: p.id,
            meta: p.meta.clone(),
            body: p.body.clone(),
        })
        .collect()
}

/// Step 2: the scheduler, the enqueue path, the bounce and lists stages, connected.
pub(crate) fn start_stages(config: &Config, s: Stores) -> Result<Stages, ServerError> {
    let bounces_recovered = recovered_of(&s.recovered, PostKind::Bounce);
    let mut lists_recovered = recovered_of(&s.recovered, PostKind::Request);
    // Postmaster mail stored but not yet forwarded (or kept) when the server stopped.
    lists_recovered.extend(herald_lists::unhandled_postmaster_mail(&s.recovered));
    let (failures_tx, failures_rx) = mpsc::channel(herald_scheduler::FAILED_COPY_CAPACITY);
    let (disabled_tx, disabled_rx) = mpsc::channel(herald_lists::DISABLED_QUEUE_CAPACITY);
    let (handoff, handed) = Handoff::channels(HANDOFF_CAPACITY);
    let (backlog, backlog_queue) = herald_enqueue::Backlog::new(&config.intake);
    let handoff_stop = CancellationToken::new();
    let handoff_task = tokio::spawn(herald_enqueue::backlog::run(
        backlog_queue,
        handoff,
        handoff_stop.clone(),
    ));
    let dkim = config.dkim_keys()?;
    let (tls_sessions, tls_sessions_rx) = match config.tls_report.enabled {
        true => {
            let (tx, rx) = herald_tlsrpt::TlsReporting::channel();
            (Some(tx), Some(rx))
        }
        false => (None, None),
    };
    let stages_stop = CancellationToken::new();
    let scheduler_stop = CancellationToken::new();
    let deps = SchedulerDeps {
        directory: s.directory.clone(),
        spool: s.spool.clone(),
        telemetry: s.telemetry.clone(),
        resolver: s.resolver,
        client: config.client_config(),
        list_ctx: ListContext {
            unsubscribe_base_url: config.public_base_url(),
            archive_url: config.http.archive_url(),
            archived_at: archived_at(config)?,
            secret: s.secret.clone(),
            dkim: dkim.clone(),
            authserv_id: config.hostname.clone(),
        },
        failures: Some(failures_tx),
        dedup: Some(s.dedup.clone()),
        health_path: Some(config.data_dir.join("host-health.json")),
        deferred_dir: Some(config.data_dir.join("deferred")),
        mta_sts_path: Some(config.data_dir.join("mta-sts.json")),
        tls_sessions,
        egress: open_egress(config)?,
        finals: None,
    };

    let archive = start_archive(config, &s.recovered)?;
    // Digests the spool holds (recovery delivers them) or completed before the stop: the
    // digest stage must not send them again.
    let live_digests: std::collections::HashSet<String> = s
        .recovered
        .iter()
        .filter(|p| p.meta.kind == PostKind::ListPost && p.meta.audience.is_digest())
        .filter_map(|p| p.meta.message_id.as_deref())
        .chain(
            s.spool
                .completed_digests_at_open()
                .iter()
                .map(String::as_str),
        )
        .map(|m| {
            m.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string()
        })
        .collect();
    // Shared fan-out: the scheduler tells the tracker every final outcome; the node's own
    // list posts (recovered ones too) go to the shared store instead of its scheduler.
    let shared = config.cluster.shared_fanout;
    let tracker = Arc::new(herald_shards::Tracker::default());
    let mut deps = deps;
    let mut recovered = s.recovered;
    let (mut to_publish, mut stale_shards) = (Vec::new(), Vec::new());
    if shared {
        deps.finals = Some(tracker.clone());
        (recovered, to_publish, stale_shards) = herald_shards::split_recovered(recovered);
    }
    let (scheduler, scheduler_task) = Scheduler::start(
        config.scheduler.clone(),
        deps,
        recovered,
        scheduler_stop.clone(),
    );
    let shards = shared.then(|| {
        herald_shards::Shards::new(herald_shards::ShardsDeps {
            directory: s.directory.clone(),
            spool: s.spool.clone(),
            telemetry: s.telemetry.clone(),
            scheduler: scheduler.clone(),
            tracker,
            node: s.cluster.node_id().to_string(),
            cfg: config.cluster.clone(),
        })
    });
    let enqueuer = Arc::new(Enqueuer {
        directory: s.directory.clone(),
        spool: s.spool.clone(),
        telemetry: s.telemetry.clone(),
        max_message_bytes: config.smtp_in.limits.max_message_octets,
        dedup: Some(s.dedup.clone()),
        arrival: arrival_check(config)?,
        backlog,
        post_rate: Default::default(),
        content_filter: content_filter(config)?,
        shared: shards
            .clone()
            .map(|s| s as Arc<dyn herald_enqueue::SharedIntake>),
        cluster_dedup: cluster_dedup(config, &s.directory, &s.cluster),
    });
    let lists = Arc::new(Lists {
        enqueuer: enqueuer.clone(),
        postmaster: herald_lists::Postmaster::new(
            &config.hostname,
            config.postmaster.forward_addresses(),
            config.postmaster.retention_days,
        ),
        secret: s.secret.clone(),
        hostname: config.hostname.clone(),
        public_base_url: config.public_base_url(),
        cfg: config.lists.clone(),
        notice_rate: herald_guard::NoticeRate::new(config.notice_limits.clone()),
    });
    let bounce_stage = herald_bounce::stage::BounceStage {
        directory: s.directory.clone(),
        spool: s.spool.clone(),
        disabled: Some(disabled_tx),
        complaints: Some(herald_bounce::complaint::ComplaintContext {
            secret: s.secret.clone(),
            telemetry: s.telemetry.clone(),
        }),
    };
    let stop = &stages_stop;
    let tasks = vec![
        tokio::spawn(bounce_stage.run(
            bounces_recovered,
            handed.bounces,
            failures_rx,
            stop.clone(),
        )),
        tokio::spawn(
            lists
                .clone()
                .run(lists_recovered, handed.lists, stop.clone()),
        ),
        tokio::spawn(herald_lists::run_disabled_notices(
            lists.clone(),
            disabled_rx,
            stop.clone(),
        )),
        tokio::spawn(herald_enqueue::dedup::run_flusher(
            s.dedup,
            Duration::from_millis(config.lists.dedup_flush_ms),
            stop.clone(),
        )),
        // Freed heap back to the system (bulk imports left it resident).
        tokio::spawn(crate::memory::run(stop.clone())),
    ];
    let mut tasks = tasks;
    let writer_stats = archive.as_ref().map(|(sender, _, _)| sender.stats());
    let web_archive = match config.archive.enabled {
        true => {
            let web = herald_archive::web::WebArchive::new(
                herald_archive::Archive::open(&config.data_dir.join("archive.db"))?
                    .with_default_privacy(config.archive.default_privacy),
            );
            // Members read a `members` archive with the key on their subscriptions page,
            // while the directory says they are still enabled members.
            let dir = s.directory.clone();
            let web = web.with_member_keys(herald_archive::web::MemberKeys {
                secret: s.secret.clone(),
                is_member: Arc::new(move |list, who| match dir.list_by_address(list) {
                    Ok(Some(l)) => {
                        matches!(dir.member(l.id, who), Ok(Some(m)) if m.status.is_enabled())
                    }
                    _ => false,
                }),
            });
            // A list's pages in its language (a member reading with their key: their own)
            // with the list's own texts; a store error falls back to the list's language and
            // the shipped texts, an unknown list to the browser's language.
            let dir = s.directory.clone();
            let web = web.with_words(Arc::new(move |list, who| {
                let l = dir.list_by_address(list).ok()??;
                let lang = match who {
                    Some(who) => dir
                        .language_for(&l, who)
                        .unwrap_or_else(|_| l.settings.language.clone()),
                    None => l.settings.language.clone(),
                };
                let overrides = dir.overrides(l.id).unwrap_or_default();
                Some((lang, overrides))
            }));
            Some(Arc::new(match writer_stats {
                Some(stats) => web.with_writer_stats(stats),
                None => web,
            }))
        }
        false => None,
    };
    let archive_committed = archive.as_ref().map(|(sender, _, _)| sender.committed());
    let archive_writer = match archive {
        // Fan-out first, then the archive: a post's fan-out never waits for the archive.
        Some((sender, writer, recovered)) => {
            let replay = sender.clone();
            tasks.push(tokio::spawn(async move {
                for post in &recovered {
                    replay.archive(post).await;
                }
            }));
            let fan_out = scheduler.clone();
            let shared_out = shards.clone();
            tasks.push(tokio::spawn(herald_archive::stage::intake(
                handed.fanout,
                move |post| match &shared_out {
                    Some(shards) => shards.submit(post),
                    None => fan_out.submit(post),
                },
                sender,
                scheduler_stop.clone(),
            )));
            Some(writer)
        }
        None => {
            tasks.push(match &shards {
                Some(shards) => tokio::spawn(
                    shards
                        .clone()
                        .take_posts(handed.fanout, scheduler_stop.clone()),
                ),
                None => tokio::spawn(
                    scheduler
                        .clone()
                        .take_posts(handed.fanout, scheduler_stop.clone()),
                ),
            });
            None
        }
    };
    if let Some(shards) = &shards {
        // Stopped with the scheduler; `drain` reports and hands back after it.
        tasks.extend(shards.start(to_publish, stale_shards, scheduler_stop.clone()));
    }
    let digests = start_digests(
        config,
        &s.directory,
        &enqueuer,
        live_digests,
        &mut tasks,
        stop,
    )?;
    let tls_reports = match tls_sessions_rx {
        Some(rx) => Some(start_tls_reports(config, &enqueuer, rx, &mut tasks, stop)?),
        None => None,
    };
    let knowledge = start_knowledge(config, &s.directory, &scheduler, &s.cluster);
    if let Some(k) = &knowledge {
        // Ends with the scheduler (its exchanges go through the actor's inbox).
        tasks.push(tokio::spawn(herald_knowledge::run(
            k.clone(),
            scheduler_stop.clone(),
        )));
    }
    let heartbeat_stop = CancellationToken::new();
    let heartbeat = tokio::spawn(herald_cluster::heartbeat::run(
        s.cluster.clone(),
        heartbeat_stop.clone(),
    ));
    Ok(Stages {
        handoff: (handoff_task, handoff_stop),
        heartbeat: (heartbeat, heartbeat_stop),
        cluster: s.cluster,
        shards,
        knowledge,
        accounts: s.accounts,
        directory: s.directory,
        spool: s.spool,
        telemetry: s.telemetry,
        secret: s.secret,
        scheduler,
        scheduler_task,
        scheduler_stop,
        enqueuer,
        lists,
        tasks,
        archive_writer,
        web_archive,
        dkim,
        digests,
        tls_reports,
        archive_committed,
        stages_stop,
    })
}

/// TLS reporting (RFC 8460): counts what the scheduler's sessions report on `rx` and sends the
/// daily reports. Reports are signed with the first `[dkim]` domain's key unless
/// `[tls_report] domain` names another.
fn start_tls_reports(
    config: &Config,
    enqueuer: &Arc<Enqueuer>,
    rx: mpsc::Receiver<herald_types::TlsSessionRecord>,
    tasks: &mut Vec<JoinHandle<()>>,
    stop: &CancellationToken,
) -> Result<Arc<herald_tlsrpt::TlsReporting>, ServerError> {
    let unusable = |message: String| {
        ServerError::Config(ConfigError::Unusable {
            key: "tls_report".into(),
            message,
        })
    };
    let (resolver, _, _) =
        herald_routing::build_resolver(&config.dns).map_err(|e| unusable(e.to_string()))?;
    let dkim_domains: Vec<String> = config.dkim.keys().cloned().collect();
    let reporting = herald_tlsrpt::TlsReporting::open(
        config.tls_report.clone(),
        &config.data_dir.join("tlsrpt.db"),
        &config.hostname,
        &dkim_domains,
        enqueuer.clone(),
        resolver,
        config.delivery.tls_ca_file.as_deref(),
    )
    .map_err(|e| unusable(e.to_string()))?;
    tasks.push(tokio::spawn(reporting.clone().run(rx, stop.clone())));
    Ok(reporting)
}

/// The digest stage, when the archive it reads is on: settles digests a crash interrupted
/// (against `live`, the digests the spool recovered), then checks lists on its timer.
fn start_digests(
    config: &Config,
    directory: &Directory,
    enqueuer: &Arc<Enqueuer>,
    live: std::collections::HashSet<String>,
    tasks: &mut Vec<JoinHandle<()>>,
    stop: &CancellationToken,
) -> Result<Option<Arc<herald_digest::Digests>>, ServerError> {
    if !(config.digest.enabled && config.archive.enabled) {
        return Ok(None);
    }
    let digests = herald_digest::Digests::open(
        directory.clone(),
        enqueuer.clone(),
        &config.data_dir.join("archive.db"),
        &config.data_dir.join("digest.db"),
        config.digest.clone(),
        config.hostname.clone(),
    )
    .map_err(|e| {
        ServerError::Config(ConfigError::Unusable {
            key: "digest".into(),
            message: e.to_string(),
        })
    })?;
    let (d, stop) = (digests.clone(), stop.clone());
    tasks.push(tokio::spawn(async move {
        if let Err(e) = d.recover(&live).await {
            tracing::error!(error = %e, "digest recovery failed");
        }
        d.run(stop).await;
    }));
    Ok(Some(digests))
}

/// The archive writer, with the recovered list posts to offer it again (a post accepted just
/// before a crash may not have been stored; a stored one is a no-op by its Message-ID).
type ArchiveStart = (
    herald_archive::stage::ArchiveSender,
    std::thread::JoinHandle<()>,
    Vec<SpooledPost>,
);

/// `Archived-At` for fan-out (RFC 5064): a read connection of its own to the archive, asked once
/// per post whether the list's archive is public (a primary-key read; privacy can change while
/// the server runs, `herald archive privacy`). `None` with the archive off.
fn archived_at(config: &Config) -> Result<Option<herald_fanout::ArchivedAt>, ServerError> {
    let a = &config.archive;
    if !a.enabled {
        return Ok(None);
    }
    let db = herald_archive::Archive::open(&config.data_dir.join("archive.db"))?
        .with_default_privacy(a.default_privacy);
    let db = std::sync::Mutex::new(db);
    let base = config.public_base_url();
    Ok(Some(Arc::new(
        move |list: &herald_types::Address, mid: &str| {
            let key = list.to_string().to_lowercase();
            let privacy = db
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .privacy(&key);
            match privacy {
                Ok(herald_archive::Privacy::Public) => Some(herald_fanout::ArchivePage {
                    message: herald_archive::stage::message_url(&base, &key, mid),
                    list: herald_archive::stage::list_url(&base, &key),
                }),
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(list = %key, error = %e, "archive privacy unknown: no Archived-At");
                    None
                }
            }
        },
    )))
}

fn start_archive(
    config: &Config,
    recovered: &[RecoveredPost],
) -> Result<Option<ArchiveStart>, ServerError> {
    let a = &config.archive;
    if !a.enabled {
        return Ok(None);
    }
    let (sender, writer) = herald_archive::stage::spawn(herald_archive::stage::StageConfig {
        path: config.data_dir.join("archive.db"),
        default_privacy: a.default_privacy,
        capacity: a.queue_capacity,
        batch_max: a.batch_max,
        max_message_bytes: a.max_message_bytes,
        // Archived-At names the web archive's page (served for public lists).
        public_base_url: Some(config.public_base_url()),
    })?;
    Ok(Some((
        sender,
        writer,
        recovered_of(recovered, PostKind::ListPost),
    )))
}

/// The arrival check with its own resolver (mail-auth's, through the same `[dns]` servers).
fn arrival_check(config: &Config) -> Result<ArrivalCheck, ServerError> {
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
fn content_filter(
    config: &Config,
) -> Result<Option<herald_content_filter::ContentFilter>, ServerError> {
    herald_content_filter::ContentFilter::new(&config.content_filter).map_err(|e| {
        ServerError::Config(ConfigError::Unusable {
            key: "content_filter".into(),
            message: e.to_string(),
        })
    })
}

/// Step 3: the SMTP/LMTP listeners (into the enqueue path) and the HTTP API.
pub(crate) fn serve(
    config: &Config,
    listeners: Listeners,
    tls: InboundTls,
    stages: &Stages,
    local_clients: herald_api::auth::LocalClients,
    http_tls: Option<herald_inbound::ServedCert>,
    shutdown: &CancellationToken,
) -> Served {
    let starttls_cert = tls.as_ref().map(|(cert, _)| cert.clone());
    let http_cert = http_tls.clone();
    let postmaster = PostmasterPolicy {
        hostname: config.hostname.clone(),
        max_stored: config.postmaster.max_stored,
        complaints_local_part: config.complaints.local_part.clone(),
    };
    let handler = Arc::new(
        ListHandler::new(stages.enqueuer.clone(), postmaster)
            .with_backpressure(config.intake.max_unfinished_copies),
    );
    let (inbound, inbound_shared) = listeners::spawn(
        config,
        listeners.smtp,
        listeners.lmtp,
        tls,
        handler,
        shutdown,
    );
    let api_state = Arc::new(herald_api::ApiState {
        intake_backlog: stages.enqueuer.backlog.depth(),
        directory: stages.directory.clone(),
        spool: stages.spool.clone(),
        telemetry: stages.telemetry.clone(),
        scheduler: stages.scheduler.clone(),
        injector: stages.enqueuer.clone(),
        secret: stages.secret.clone(),
        lists: stages.lists.clone(),
        started: Instant::now(),
        admin_token: config.http.admin_token(),
        local_clients,
        archive: stages.web_archive.clone(),
        backup: herald_backup::take::Source {
            data_dir: config.data_dir.clone(),
            spool: stages.spool.clone(),
            spool_dir: config.spool_config().dir,
            keys: config.key_files(),
            hostname: config.hostname.clone(),
        },
        digests: stages.digests.clone(),
        tls_reports: stages.tls_reports.clone(),
        accounts: stages.accounts.clone(),
        secure_cookies: config.http.tls_enabled()
            || config.accounts.cookie_secure
            || config.http.public_base_url.starts_with("https://"),
        public_base_url: config.http.public_base_url(config.listen.http),
        cluster: Some(stages.cluster.clone()),
        webadmin: Default::default(),
        shards: stages.shards.clone(),
        knowledge: stages.knowledge.clone(),
        readiness: readiness(stages, inbound_shared),
    });
    if api_state.admin_token.is_none() {
        tracing::warn!(http = %config.listen.http, "no http.admin_token: the admin API and dashboard answer local (loopback) clients only");
    }
    let api = match http_tls.as_ref() {
        Some(tls) => tokio::spawn(herald_api::serve_tls(
            listeners.http,
            tls.config.clone(),
            api_state,
            config.http.limits(),
            shutdown.clone(),
        )),
        None => tokio::spawn(herald_api::serve(
            listeners.http,
            api_state,
            config.http.limits(),
            shutdown.clone(),
        )),
    };
    let mut certs = Vec::new();
    certs.extend(starttls_cert.map(|c| ("inbound", c)));
    certs.extend(http_cert.map(|c| ("http", c)));
    let (source, running) = match &config.source {
        Some(path) => (
            Some(path.clone()),
            crate::reload::read(path).ok().map(|(_, table)| table),
        ),
        None => (None, None),
    };
    tokio::spawn(crate::reload::on_hangup(
        crate::reload::Reloadable {
            telemetry: stages.telemetry.clone(),
            source,
            running,
            certs,
            dkim: stages.dkim.clone(),
            scheduler: stages.scheduler.clone(),
        },
        shutdown.clone(),
    ));
    Served {
        inbound,
        api,
        imap: Vec::new(),
    }
}

/// What `/readyz` asks: does the spool take posts (a full data disk), did the store take the
/// last heartbeat (PostgreSQL reachable), can the listeners accept.
fn readiness(
    stages: &Stages,
    inbound: Arc<herald_inbound::InboundShared>,
) -> herald_api::ready::Readiness {
    let spool = stages.spool.clone();
    let cluster = stages.cluster.clone();
    herald_api::ready::Readiness::default()
        .with(Box::new(move || {
            spool
                .refusing_posts()
                .map(|why| format!("spool refuses new posts (452 4.3.1): {why}"))
        }))
        .with(Box::new(move || {
            cluster
                .store_failure()
                .map(|why| format!("store did not take the last heartbeat: {why}"))
        }))
        .with(Box::new(move || inbound.accept_failure()))
}

/// The IMAP listening sockets (`[imap] listen`, `tls_listen`), bound with the others before
/// root is dropped.
pub(crate) struct ImapSockets {
    plain: Option<tokio::net::TcpListener>,
    tls: Option<tokio::net::TcpListener>,
}

pub(crate) async fn bind_imap(config: &Config) -> Result<ImapSockets, ServerError> {
    let bind = |addr: std::net::SocketAddr, what: &'static str| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { what, addr, source })
    };
    Ok(ImapSockets {
        plain: match config.imap.listen {
            Some(a) => Some(bind(a, "IMAP").await?),
            None => None,
        },
        tls: match config.imap.tls_listen {
            Some(a) => Some(bind(a, "IMAP (implicit TLS)").await?),
            None => None,
        },
    })
}

/// Step 3, the archive over IMAP: its listeners (when `[imap]` has any and the archive is on),
/// with the `[tls]` configuration for STARTTLS and implicit TLS.
pub(crate) fn serve_imap(
    config: &Config,
    sockets: ImapSockets,
    tls: Option<Arc<rustls::ServerConfig>>,
    stages: &Stages,
    shutdown: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let Some(committed) = stages.archive_committed.clone() else {
        return Vec::new();
    };
    let shared = Arc::new(herald_imap::session::Shared {
        cfg: config.imap.clone(),
        archive_path: config.data_dir.join("archive.db"),
        default_privacy: config.archive.default_privacy,
        auth: herald_imap::access::Authenticator {
            secret: stages.secret.clone(),
            admin_token: config.http.admin_token(),
            directory: stages.directory.clone(),
        },
        metrics: Some(stages.telemetry.metrics().imap.clone()),
        committed,
        tls,
    });
    let slots = herald_imap::listener::Slots::new(
        config.imap.max_connections,
        config.imap.max_connections_per_client,
    );
    let mut tasks = Vec::new();
    for (socket, implicit) in [(sockets.plain, false), (sockets.tls, true)] {
        if let Some(listener) = socket {
            tasks.push(tokio::spawn(herald_imap::listener::serve(
                listener,
                implicit,
                shared.clone(),
                slots.clone(),
                shutdown.clone(),
            )));
        }
    }
    tasks
}

/// Adds the IMAP listeners to what step 4 waits for.
pub(crate) fn with_imap(mut served: Served, imap: Vec<JoinHandle<()>>) -> Served {
    served.imap = imap;
    served
}
