//! What the rows of the stage table (`steps.rs`) are built from: each stage's settings and
//! handles read out of the server's configuration, with the configuration key to blame when
//! one cannot be set up.

use crate::config::{Config, ConfigError};
use crate::ServerError;
use herald_enqueue::{ArrivalCheck, ArrivalSetupError, Enqueuer};
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

/// `Archived-At` for fan-out (RFC 5064): a read connection of its own to the archive, asked once
/// per post whether the list's archive is public (a primary-key read; privacy can change while
/// the server runs, `herald archive privacy`). `None` with the archive off.
pub(super) fn archived_at(
    config: &Config,
) -> Result<Option<herald_fanout::ArchivedAt>, ServerError> {
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

/// The web archive's read connection (`[archive] enabled`), with who may read a `members`
/// archive and the language of its pages.
pub(super) fn web_archive(
    config: &Config,
    cx: &StartCx,
    writer_stats: Option<Arc<herald_archive::metrics::WriterStats>>,
) -> Result<Option<Arc<herald_archive::web::WebArchive>>, ServerError> {
    if !config.archive.enabled {
        return Ok(None);
    }
    let web = herald_archive::web::WebArchive::new(
        herald_archive::Archive::open(&config.data_dir.join("archive.db"))?
            .with_default_privacy(config.archive.default_privacy),
    );
    // Members read a `members` archive with the key on their subscriptions page,
    // while the directory says they are still enabled members.
    let dir = cx.directory.clone();
    let web = web.with_member_keys(herald_archive::web::MemberKeys {
        secret: cx.secret.clone(),
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
    let dir = cx.directory.clone();
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
    Ok(Some(Arc::new(match writer_stats {
        Some(stats) => web.with_writer_stats(stats),
        None => web,
    })))
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
