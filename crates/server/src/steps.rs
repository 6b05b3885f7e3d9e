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

use crate::ServerError;
use herald_archive::web::WebArchive;
use herald_config::Config;
use herald_directory::Directory;
use herald_enqueue::Enqueuer;
use herald_lists::Lists;
use herald_scheduler::Scheduler;
use herald_spool::Spool;
use herald_stage::{FanOut, Running, StartCx, Started, StopAt};
use herald_telemetry::Telemetry;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

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
    web_archive: Option<Arc<WebArchive>>,
    /// The signing keys every copy is built with; SIGHUP replaces them in place.
    dkim: herald_auth::DkimKeys,
    /// The digest stage (`[digest] enabled` with the archive on).
    digests: Option<Arc<herald_digest::Digests>>,
    /// TLS reporting (`[tls_report] enabled`).
    tls_reports: Option<Arc<herald_tlsrpt::TlsReporting>>,
    /// Changes when the archive writer stored new posts (IMAP IDLE wakes on it).
    archive_committed: Option<watch::Receiver<u64>>,
    /// Web accounts and the audit log, for the API.
    accounts: herald_accounts::Accounts,
    /// This node's membership, for the API.
    cluster: Arc<herald_cluster::Cluster>,
    /// The shared fan-out (`[cluster] shared_fanout`).
    shards: Option<Arc<herald_shards::Shards>>,
    /// Shared knowledge: on a PostgreSQL store with `[cluster] shared_knowledge`.
    knowledge: Option<Arc<herald_knowledge::Knowledge>>,
    /// The egress pools the scheduler sends through (`[[delivery.egress]]`), for `/metrics`.
    egress: Option<herald_egress::Egress>,
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
    let (tls_sessions, tls_sessions_rx) = config
        .tls_report
        .enabled
        .then(herald_tlsrpt::TlsReporting::channel)
        .unzip();
    let dkim = config.dkim_keys()?;
    let archive_cfg = parts::archive_config(config);
    let wires = parts::Wires {
        resolver: s.resolver,
        dedup: s.dedup.clone(),
        dkim: dkim.clone(),
        failures: failures_tx,
        tls_sessions,
    };

    // The rows, in start order.
    let handoff = run.add(herald_enqueue::start(&config.intake));
    let handed = handoff.handed;
    // Shared fan-out: the scheduler tells the tracker every final outcome; the node's own
    // recovered list posts go to the shared store instead of its scheduler.
    let mut recovered = cx.recovered_posts().to_vec();
    let shared = herald_shards::prepare(config.cluster.shared_fanout, &mut recovered);
    let finals = shared.as_ref().map(|p| p.tracker.clone() as _);
    let deps = parts::scheduler_deps(config, &cx, wires, &archive_cfg, finals)?;
    let egress = deps.egress.clone();
    let delivery = herald_scheduler::start(config.scheduler.clone(), deps, recovered);
    // Stages stopped with delivery (a child of its token) but waited for at their own place.
    let with_delivery = delivery.stop.clone();
    let scheduler = run.add(delivery);
    let shards = shared.map(|prepared| {
        let deps = parts::shards_deps(config, &cx, &scheduler, &s.cluster, &prepared);
        run.add(herald_shards::start(
            deps,
            prepared,
            with_delivery.child_token(),
        ))
    });
    let enqueuer = parts::enqueuer(config, &cx, handoff.backlog, &shards, &s.cluster, &s.dedup)?;
    let lists = parts::lists(config, &cx, &enqueuer);
    run.add(herald_bounce::stage::start(
        &cx,
        handed.bounces,
        failures_rx,
        disabled_tx,
    ));
    let lists = run.add(herald_lists::start(&cx, lists, handed.lists, disabled_rx));
    run.add(parts::dedup_flusher(config, s.dedup));
    // Freed heap back to the system (bulk imports left it resident).
    run.add(Started::spawn(
        "memory",
        StopAt::Stages,
        herald_host::memory::run,
    ));
    // Fan-out (the shared one, or this node's scheduler) first, then the archive's tap.
    let fan_out: Arc<dyn FanOut> = match &shards {
        Some(shards) => shards.clone(),
        None => Arc::new(scheduler.clone()),
    };
    let consumer = (handed.fanout, fan_out, with_delivery.child_token());
    let (web_archive, archive_committed) =
        start_archive(config, &cx, &mut run, archive_cfg, consumer)?;
    let digests = parts::digests(config, &cx, &enqueuer)?.map(|d| run.add(d));
    let tls_reports = match tls_sessions_rx {
        Some(rx) => {
            let reporting = parts::tls_reporting(config, &enqueuer)?;
            Some(run.add(herald_tlsrpt::start(reporting, rx)))
        }
        None => None,
    };
    let deps = parts::knowledge_deps(config, &cx, &scheduler, &s.cluster);
    let knowledge = run.add(herald_knowledge::start(deps, with_delivery.child_token()));
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
        egress,
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

/// What the archive's rows offer: the web archive and the writer's commit counter (IMAP
/// IDLE wakes on it); both `None` with the archive off.
type ArchiveOffers = (Option<Arc<WebArchive>>, Option<watch::Receiver<u64>>);

/// The archive's rows (`[archive] enabled`): the writer, then the one fan-out consumer with
/// the writer as its tap (without the archive, the consumer alone).
fn start_archive(
    config: &Config,
    cx: &StartCx,
    run: &mut Running,
    cfg: herald_archive::stage::StageConfig,
    (posts, fan_out, stop): (
        mpsc::Receiver<herald_spool::SpooledPost>,
        Arc<dyn FanOut>,
        tokio_util::sync::CancellationToken,
    ),
) -> Result<ArchiveOffers, ServerError> {
    let writer = match config.archive.enabled {
        true => Some(run.add(herald_archive::start(cx, cfg.clone())?)),
        false => None,
    };
    let web = match &writer {
        Some(w) => Some(Arc::new(herald_archive::web(cx, &cfg, Some(w))?)),
        None => None,
    };
    let committed = writer.as_ref().map(|w| w.committed());
    let tap = writer.map(|w| Arc::new(w) as Arc<dyn herald_stage::Tap>);
    run.add(herald_stage::fan_out::start(posts, fan_out, tap, stop));
    Ok((web, committed))
}
