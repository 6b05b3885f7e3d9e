//! The composition root: `run(config, listeners, shutdown)` opens the stores, starts every stage
//! and wires them together; nothing else in Herald knows how the pieces fit. The caller binds the
//! sockets (tests bind port 0) and owns the shutdown token.
//!
//! Shutdown order keeps the "no loss" promise: the listeners stop first (no new posts; sessions
//! finish their transaction), then the scheduler (workers finish their batch, every reported
//! outcome is journaled), then the spool is flushed and the delivery log written out.

mod arrival;
pub mod config;
mod confirm;
mod enqueue;
mod handler;
mod lists;
mod policy;
mod postmaster;
mod requests;

pub use config::{Config, ConfigError};
pub use enqueue::{EnqueueError, Enqueuer, Origin};

use herald_directory::Directory;
use herald_fanout::ListContext;
use herald_routing::MxResolver;
use herald_scheduler::{Scheduler, SchedulerDeps};
use herald_spool::Spool;
use herald_telemetry::{Telemetry, TelemetryConfig};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The three listening sockets, bound by the caller.
pub struct Listeners {
    pub smtp: TcpListener,
    pub lmtp: TcpListener,
    pub http: TcpListener,
}

impl Listeners {
    /// Binds the addresses from the configuration.
    pub async fn bind(cfg: &Config) -> Result<Listeners, ServerError> {
        let bind = |addr: SocketAddr, what: &'static str| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Bind { what, addr, source })
        };
        Ok(Listeners {
            smtp: bind(cfg.listen.smtp, "SMTP").await?,
            lmtp: bind(cfg.listen.lmtp, "LMTP").await?,
            http: bind(cfg.listen.http, "HTTP").await?,
        })
    }

    /// Binds all three on 127.0.0.1 with ports chosen by the system (tests, the demo).
    pub async fn bind_ephemeral() -> Result<Listeners, ServerError> {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let bind = |what: &'static str| async move {
            TcpListener::bind(any)
                .await
                .map_err(|source| ServerError::Bind {
                    what,
                    addr: any,
                    source,
                })
        };
        Ok(Listeners {
            smtp: bind("SMTP").await?,
            lmtp: bind("LMTP").await?,
            http: bind("HTTP").await?,
        })
    }

    /// (smtp, lmtp, http) local addresses.
    pub fn addrs(&self) -> std::io::Result<(SocketAddr, SocketAddr, SocketAddr)> {
        Ok((
            self.smtp.local_addr()?,
            self.lmtp.local_addr()?,
            self.http.local_addr()?,
        ))
    }
}

/// Why the server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen for {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("data directory {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("directory: {0}")]
    Directory(#[from] herald_directory::DirectoryError),
    #[error("spool: {0}")]
    Spool(#[from] herald_spool::SpoolError),
    #[error("telemetry: {0}")]
    Telemetry(#[from] herald_telemetry::TelemetryError),
    #[error("DNS resolver: {0}")]
    Resolver(String),
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("{what} listener failed: {message}")]
    Listener { what: &'static str, message: String },
}

/// Runs Herald until `shutdown` is cancelled, then drains and returns.
pub async fn run(
    config: Config,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    let data_err = |source| ServerError::DataDir {
        path: config.data_dir.display().to_string(),
        source,
    };
    // TLS first: a bad certificate or an unbindable submissions port stops the start early.
    let inbound_tls =
        match config.inbound_tls()? {
            Some(tls) => {
                let submissions =
                    match config.listen.submissions {
                        Some(addr) => Some(TcpListener::bind(addr).await.map_err(|source| {
                            ServerError::Bind {
                                what: "SMTP submissions (implicit TLS)",
                                addr,
                                source,
                            }
                        })?),
                        None => None,
                    };
                Some((tls, submissions))
            }
            None => None,
        };
    std::fs::create_dir_all(&config.data_dir).map_err(data_err)?;
    let secret = load_or_create_secret(&config).map_err(data_err)?;
    let directory = Directory::open(&config.data_dir.join("herald.db"))?;
    let (spool, recovered) = Spool::open(config.spool_config())?;
    let log_path = config
        .log
        .delivery_log
        .then(|| config.data_dir.join("log").join("delivery.log"));
    let stats = config.stats.enabled.then(|| herald_telemetry::StatsConfig {
        path: config.data_dir.join("stats.db"),
        flush_secs: config.stats.flush_secs,
    });
    let telemetry = Telemetry::new(&TelemetryConfig { log_path, stats })?;
    let resolver =
        Arc::new(MxResolver::new(&config.dns).map_err(|e| ServerError::Resolver(e.to_string()))?);
    if !recovered.is_empty() {
        tracing::info!(
            posts = recovered.len(),
            "resuming unfinished posts from the spool"
        );
    }

    // Issue 5: dedup store, bounce and lists stages, and the channels between them.
    let dedup = herald_fanout::DedupStore::open(
        herald_fanout::DedupConfig {
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
    let mut side_posts: Vec<herald_spool::SpooledPost> = recovered
        .iter()
        .filter(|p| {
            matches!(
                p.meta.kind,
                herald_spool::PostKind::Bounce | herald_spool::PostKind::Request
            )
        })
        .map(|p| herald_spool::SpooledPost {
            id: p.id,
            meta: p.meta.clone(),
            body: p.body.clone(),
        })
        .collect();
    // Postmaster mail stored but not yet forwarded (or kept) when the server stopped.
    side_posts.extend(postmaster::unhandled(&recovered));
    let postmaster = Arc::new(postmaster::Postmaster::new(&config));
    let (failures_tx, failures_rx) =
        tokio::sync::mpsc::channel(herald_scheduler::FAILED_COPY_CAPACITY);
    let (side_tx, side_rx) = tokio::sync::mpsc::channel(lists::SIDE_QUEUE_CAPACITY);
    let (bounce_tx, bounce_rx) =
        tokio::sync::mpsc::channel(herald_bounce::stage::BOUNCE_QUEUE_CAPACITY);
    let stages_stop = CancellationToken::new();

    let scheduler_stop = CancellationToken::new();
    let archive_url = Some(config.http.archive_url.clone()).filter(|u| !u.is_empty());
    let deps = SchedulerDeps {
        directory: directory.clone(),
        spool: spool.clone(),
        telemetry: telemetry.clone(),
        resolver,
        client: config.client_config(),
        list_ctx: ListContext {
            unsubscribe_base_url: config.public_base_url(),
            archive_url,
            secret: secret.clone(),
            dkim: config.dkim_keys()?,
            authserv_id: config.hostname.clone(),
        },
        failures: Some(failures_tx),
        dedup: Some(dedup.clone()),
        health_path: Some(config.data_dir.join("host-health.json")),
        mta_sts_path: Some(config.data_dir.join("mta-sts.json")),
    };
    let (scheduler, scheduler_task) = Scheduler::start(
        config.scheduler.clone(),
        deps,
        recovered,
        scheduler_stop.clone(),
    );

    let enqueuer = Arc::new(Enqueuer {
        directory: directory.clone(),
        spool: spool.clone(),
        scheduler: scheduler.clone(),
        telemetry: telemetry.clone(),
        max_message_bytes: config.smtp_in.limits.max_message_octets,
        dedup: Some(dedup.clone()),
        side: Some(side_tx),
        arrival: arrival_check(&config)?,
    });
    let lists = Arc::new(lists::Lists {
        enqueuer: enqueuer.clone(),
        postmaster: postmaster.clone(),
        secret: secret.clone(),
        hostname: config.hostname.clone(),
        public_base_url: config.public_base_url(),
        cfg: config.lists.clone(),
    });
    let (disabled_tx, disabled_rx) = tokio::sync::mpsc::channel(lists::SIDE_QUEUE_CAPACITY);
    let bounce_stage = herald_bounce::stage::BounceStage {
        directory: directory.clone(),
        spool: spool.clone(),
        disabled: Some(disabled_tx),
    };
    let bounce_recovered = side_posts
        .iter()
        .filter(|p| p.meta.kind == herald_spool::PostKind::Bounce)
        .cloned()
        .collect();
    let stage_tasks = vec![
        tokio::spawn(bounce_stage.run(
            bounce_recovered,
            bounce_rx,
            failures_rx,
            stages_stop.clone(),
        )),
        tokio::spawn(
            lists
                .clone()
                .run(side_posts, side_rx, bounce_tx, stages_stop.clone()),
        ),
        tokio::spawn(lists::notify_disabled(
            lists.clone(),
            disabled_rx,
            stages_stop.clone(),
        )),
        tokio::spawn(lists::flush_dedup(
            dedup,
            std::time::Duration::from_millis(config.lists.dedup_flush_ms),
            stages_stop.clone(),
        )),
    ];
    let handler = Arc::new(handler::ListHandler::new(
        enqueuer.clone(),
        directory.clone(),
        postmaster,
    ));
    let inbound_tasks = handler::spawn_listeners(
        &config,
        listeners.smtp,
        listeners.lmtp,
        inbound_tls,
        handler,
        &shutdown,
    );
    let api_state = Arc::new(herald_api::ApiState {
        directory,
        spool: spool.clone(),
        telemetry: telemetry.clone(),
        scheduler,
        injector: enqueuer,
        secret,
        lists,
        started: Instant::now(),
        admin_token: config.http.admin_token(),
    });
    if api_state.admin_token.is_none() {
        tracing::warn!(http = %config.listen.http, "no http.admin_token: the admin API and dashboard answer loopback clients only");
    }
    let api_task = tokio::spawn(herald_api::serve(
        listeners.http,
        api_state,
        shutdown.clone(),
    ));
    tracing::info!(
        smtp = %config.listen.smtp, lmtp = %config.listen.lmtp, http = %config.listen.http,
        "herald is running"
    );

    shutdown.cancelled().await;
    for (what, task) in inbound_tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(what, error = %e, "listener ended with an error"),
            Err(e) => tracing::error!(what, error = %e, "listener task failed"),
        }
    }
    if let Ok(Err(e)) = api_task.await {
        tracing::error!(error = %e, "HTTP listener ended with an error");
    }
    scheduler_stop.cancel();
    let _ = scheduler_task.await;
    // After the scheduler: its report loop has handed every failure to the bounce stage.
    stages_stop.cancel();
    for task in stage_tasks {
        let _ = task.await;
    }
    spool.flush().await?;
    telemetry.flush_log();
    let t = telemetry.clone();
    let _ = tokio::task::spawn_blocking(move || t.flush_stats()).await;
    tracing::info!("herald stopped");
    Ok(())
}

/// The unsubscribe-token secret: from the config, else `<data_dir>/secret`, created with 32
/// random bytes (mode 0600) on first start so links survive restarts.
/// The arrival check with its own resolver (mail-auth's, through the same `[dns]` servers).
fn arrival_check(config: &Config) -> Result<arrival::ArrivalCheck, ServerError> {
    let auth = if config.auth.verify_arrivals {
        let d = &config.dns;
        let auth = herald_auth::Authenticator::new(
            &d.nameservers,
            std::time::Duration::from_millis(d.timeout_ms),
            d.attempts,
            &config.hostname,
        )
        .map_err(|e| ServerError::Resolver(e.to_string()))?;
        Some(auth)
    } else {
        None
    };
    Ok(arrival::ArrivalCheck::new(
        auth,
        &config.hostname,
        std::time::Duration::from_secs(config.auth.arrival_timeout_secs),
        config
            .auth
            .lmtp_clients()
            .map_err(|message| ConfigError::Unusable {
                key: "auth".into(),
                message,
            })?,
    ))
}

fn load_or_create_secret(cfg: &Config) -> std::io::Result<Vec<u8>> {
    if !cfg.secret.is_empty() {
        return Ok(cfg.secret.as_bytes().to_vec());
    }
    let path = cfg.data_dir.join("secret");
    match std::fs::read(&path) {
        Ok(bytes) if bytes.len() >= 16 => return Ok(bytes),
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is shorter than 16 bytes", path.display()),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let secret: [u8; 32] = rand::random();
    write_private(&path, &secret)?;
    Ok(secret.to_vec())
}

/// Creates `path` (it must not exist) readable by its owner only (0600), writes `bytes` and
/// syncs: for secrets and private keys.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
