//! The four steps of `server::run`: open the stores (`stores.rs`), start the stages (here),
//! serve (`serve.rs`), drain (`drain.rs`). Wiring only: each stage's loop and its start-up
//! policy live in its own crate, behind one `start` that returns a
//! [`herald_stage::Started`] row.
//!
//! [`start_stages`] is the table: the stages in start order, one row each, added to a
//! [`Running`] that the drain walks in stop order (listeners, hand-off, delivery, reports,
//! stages, writers, stores, leaving the cluster) — as Postfix's `master.cf` lists its daemons.
//! A new stage is its crate plus one row.
//!
//! The channels, all bounded (a full one makes its sender wait): enqueue ─► fan-out, bounce
//! stage, lists stage ([`herald_enqueue::Handoff`]); scheduler ─► bounce stage (failed copies)
//! and ─► TLS reports (sessions); bounce stage ─► lists stage (disabled members).

use crate::config::Config;
use crate::ServerError;
use herald_directory::Directory;
use herald_enqueue::Enqueuer;
use herald_fanout::ListContext;
use herald_lists::Lists;
use herald_scheduler::{Scheduler, SchedulerDeps};
use herald_spool::Spool;
use herald_stage::{FanOut, Running, StartCx, Started, StopAt};
use herald_telemetry::Telemetry;
use std::sync::Arc;
use tokio::sync::mpsc;

mod drain;
mod parts;
mod serve;
mod stores;
pub(crate) use drain::{drain, STOP_LIMIT};
pub(crate) use serve::{bind_imap, serve, serve_imap, with_imap, Served};
pub(crate) use stores::{open_stores, Stores};

/// The running stages (step 2): the table the drain stops, and what step 3 serves from.
pub(crate) struct Stages {
    running: Running,
    directory: Directory,
    spool: Spool,
    pub(crate) telemetry: Telemetry,
    secret: Vec<u8>,
    scheduler: Scheduler,
    enqueuer: Arc<Enqueuer>,
    lists: Arc<Lists>,
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
    /// This node's membership, for the API.
    cluster: Arc<herald_cluster::Cluster>,
    /// The shared fan-out (`[cluster] shared_fanout`).
    shards: Option<Arc<herald_shards::Shards>>,
    /// Shared knowledge: on a PostgreSQL store with `[cluster] shared_knowledge`.
    knowledge: Option<Arc<herald_knowledge::Knowledge>>,
}

impl Stages {
    pub(crate) fn spool(&self) -> &Spool {
        &self.spool
    }
}

/// Step 2: the stages, in start order.
pub(crate) fn start_stages(config: &Config, s: Stores) -> Result<Stages, ServerError> {
    let cx = StartCx::new(s.directory, s.spool, s.telemetry, s.secret, s.recovered);
    let mut run = Running::default();
    let (failures_tx, failures_rx) = mpsc::channel(herald_scheduler::FAILED_COPY_CAPACITY);
    let (disabled_tx, disabled_rx) = mpsc::channel(herald_lists::DISABLED_QUEUE_CAPACITY);
    let (tls_sessions, tls_sessions_rx) = match config.tls_report.enabled {
        true => {
            let (tx, rx) = herald_tlsrpt::TlsReporting::channel();
            (Some(tx), Some(rx))
        }
        false => (None, None),
    };
    let handoff = run.add(herald_enqueue::start(&config.intake));
    let handed = handoff.handed;
    // Shared fan-out: the scheduler tells the tracker every final outcome; the node's own
    // recovered list posts go to the shared store instead of its scheduler.
    let mut recovered = cx.recovered_posts().to_vec();
    let shared = herald_shards::prepare(config.cluster.shared_fanout, &mut recovered);
    let dkim = config.dkim_keys()?;
    let archive_cfg = parts::archive_config(config);
    let deps = SchedulerDeps {
        directory: cx.directory.clone(),
        spool: cx.spool.clone(),
        telemetry: cx.telemetry.clone(),
        resolver: s.resolver,
        client: config.client_config(),
        list_ctx: ListContext {
            unsubscribe_base_url: config.public_base_url(),
            archive_url: config.http.archive_url(),
            archived_at: match config.archive.enabled {
                true => Some(herald_archive::archived_at(&archive_cfg)?),
                false => None,
            },
            secret: cx.secret.clone(),
            dkim: dkim.clone(),
            authserv_id: config.hostname.clone(),
        },
        failures: Some(failures_tx),
        dedup: Some(s.dedup.clone()),
        health_path: Some(config.data_dir.join("host-health.json")),
        deferred_dir: Some(config.data_dir.join("deferred")),
        mta_sts_path: Some(config.data_dir.join("mta-sts.json")),
        tls_sessions,
        egress: parts::open_egress(config)?,
        finals: shared.as_ref().map(|p| p.tracker.clone() as _),
    };
    let delivery = herald_scheduler::start(config.scheduler.clone(), deps, recovered);
    // Stages stopped with delivery (a child of its token) but waited for at their own place.
    let with_delivery = delivery.stop.clone();
    let scheduler = run.add(delivery);
    let shards = shared.map(|prepared| {
        let deps = herald_shards::ShardsDeps {
            directory: cx.directory.clone(),
            spool: cx.spool.clone(),
            telemetry: cx.telemetry.clone(),
            scheduler: scheduler.clone(),
            tracker: prepared.tracker.clone(),
            node: s.cluster.node_id().to_string(),
            cfg: config.cluster.clone(),
        };
        run.add(herald_shards::start(
            deps,
            prepared,
            with_delivery.child_token(),
        ))
    });
    let enqueuer = Arc::new(Enqueuer {
        directory: cx.directory.clone(),
        spool: cx.spool.clone(),
        telemetry: cx.telemetry.clone(),
        max_message_bytes: config.smtp_in.limits.max_message_octets,
        dedup: Some(s.dedup.clone()),
        arrival: parts::arrival_check(config)?,
        backlog: handoff.backlog,
        post_rate: Default::default(),
        content_filter: parts::content_filter(config)?,
        shared: shards
            .clone()
            .map(|s| s as Arc<dyn herald_enqueue::SharedIntake>),
        cluster_dedup: parts::cluster_dedup(config, &cx, &s.cluster),
    });
    let lists = Arc::new(Lists {
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
    });
    run.add(herald_bounce::stage::start(
        &cx,
        handed.bounces,
        failures_rx,
        disabled_tx,
    ));
    let lists = run.add(herald_lists::start(&cx, lists, handed.lists, disabled_rx));
    run.add(parts::dedup_flusher(config, s.dedup));
    // Freed heap back to the system (bulk imports left it resident).
    run.add(Started::spawn("memory", StopAt::Stages, crate::memory::run));
    let archive = match config.archive.enabled {
        true => Some(run.add(herald_archive::start(&cx, archive_cfg.clone())?)),
        false => None,
    };
    let web_archive = match &archive {
        Some(writer) => Some(Arc::new(herald_archive::web(
            &cx,
            &archive_cfg,
            Some(writer),
        )?)),
        None => None,
    };
    let archive_committed = archive.as_ref().map(|a| a.committed());
    // Fan-out (the shared one, or this node's scheduler) first, then the archive's tap.
    let fan_out: Arc<dyn FanOut> = match &shards {
        Some(shards) => shards.clone(),
        None => Arc::new(scheduler.clone()),
    };
    let tap = archive.map(|sender| Arc::new(sender) as Arc<dyn herald_stage::Tap>);
    run.add(herald_stage::fan_out::start(
        handed.fanout,
        fan_out,
        tap,
        with_delivery.child_token(),
    ));
    let digests = match config.digest.enabled && config.archive.enabled {
        true => {
            let paths = herald_digest::DigestPaths {
                archive: &config.data_dir.join("archive.db"),
                ledger: &config.data_dir.join("digest.db"),
            };
            let started = herald_digest::start(
                &cx,
                enqueuer.clone(),
                paths,
                config.digest.clone(),
                config.hostname.clone(),
            )
            .map_err(|e| parts::unusable("digest", e))?;
            Some(run.add(started))
        }
        false => None,
    };
    let tls_reports = match tls_sessions_rx {
        Some(rx) => Some(run.add(herald_tlsrpt::start(
            parts::tls_reporting(config, &enqueuer)?,
            rx,
        ))),
        None => None,
    };
    let knowledge = run.add(herald_knowledge::start(
        herald_knowledge::KnowledgeDeps {
            directory: cx.directory.clone(),
            scheduler: scheduler.clone(),
            node: s.cluster.node_id().to_string(),
            cfg: config.cluster.clone(),
        },
        with_delivery.child_token(),
    ));
    run.add(drain::stores(&cx.spool, &cx.telemetry));
    run.add(herald_cluster::start(s.cluster.clone()));
    tracing::debug!(stages = ?run.names(), "stages started");
    Ok(Stages {
        running: run,
        directory: cx.directory.clone(),
        spool: cx.spool.clone(),
        telemetry: cx.telemetry.clone(),
        secret: cx.secret.clone(),
        cluster: s.cluster,
        shards,
        knowledge,
        accounts: s.accounts,
        scheduler,
        enqueuer,
        lists,
        web_archive,
        dkim,
        digests,
        tls_reports,
        archive_committed,
    })
}
