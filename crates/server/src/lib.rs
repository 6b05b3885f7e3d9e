//! The composition root: `run(config, listeners, shutdown)` opens the stores, starts every stage
//! and wires them together; nothing else in Herald knows how the pieces fit, and nothing here
//! handles mail itself. The caller binds the sockets (tests bind port 0) and owns the shutdown
//! token.
//!
//! `run` is four named steps (`steps.rs`): `open_stores` (data directory, secret, directory,
//! spool with its recovered posts, telemetry, resolver, dedup store), `start_stages` (scheduler,
//! bounce and lists stages, the enqueue path and the channels between them), `serve` (SMTP/LMTP
//! listeners and the HTTP API) and `drain`.
//!
//! Shutdown order keeps the "no loss" promise: the listeners stop first (no new posts; sessions
//! finish their transaction), then the hand-off of accepted posts (what it still holds stays
//! in the spool for the next start, so a backlog never holds up the stop), then the scheduler (workers finish their batch, every reported
//! outcome is journaled), then the bounce and lists stages (the scheduler's report loop has
//! handed them every failure), then the spool is flushed and the delivery log written out.

mod listeners;
mod steps;

pub use herald_config as config;
pub use herald_config::{Config, ConfigError};
pub use herald_host::secret::write_private;
pub use herald_host::{descriptors, memory, privileges, reserve};
pub use listeners::Listeners;

use std::net::SocketAddr;
use tokio_util::sync::CancellationToken;

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
    #[error("{0}")]
    Privileges(#[from] privileges::PrivilegeError),
    #[error("archive: {0}")]
    Archive(#[from] herald_archive::ArchiveError),
    #[error("accounts: {0}")]
    Accounts(#[from] herald_accounts::AccountsError),
    /// The egress pools could not be set up (configuration, warm-up ledger).
    #[error("egress: {0}")]
    Egress(#[from] herald_egress::EgressError),
    /// This node may not join the cluster (schema version, duplicate id) or its store failed.
    #[error("{0}")]
    Cluster(#[from] herald_cluster::ClusterError),
    /// This node has no secret it may use (the cluster's differs from the configured one).
    #[error("{0}")]
    Secret(#[from] herald_host::secret::SecretError),
    /// A blocking start-up task (opening the directory) panicked or was cancelled.
    #[error("{what} task failed: {message}")]
    Task { what: &'static str, message: String },
    #[error("{what} listener failed: {message}")]
    Listener { what: &'static str, message: String },
}

/// Runs Herald until `shutdown` is cancelled, then drains and returns.
pub async fn run(
    config: Config,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    // Descriptors first: the soft limit up to the hard one, and a configuration that cannot
    // fit under it refused before anything is opened.
    let open_files = descriptors::raise_open_files_limit();
    let budget = descriptors::check(&config, open_files)?;
    tracing::info!(
        descriptors = budget,
        open_files,
        "descriptor budget: listeners, outbound connections and stores fit the limit"
    );
    // TLS first: a bad certificate or an unbindable submissions port stops the start early.
    let inbound_tls = listeners::bind_tls(&config).await?;
    let imap_sockets = steps::bind_imap(&config).await?;
    let imap_tls = inbound_tls.as_ref().map(|(cert, _)| cert.config.clone());
    // Checked again here (not only at load): a Config built in code skips `check`, and a bad
    // entry must stop the start rather than fall back to a different trust rule.
    let local_clients =
        herald_api::auth::LocalClients::parse(&config.http.local_clients).map_err(|message| {
            ConfigError::Unusable {
                key: "http.local_clients".into(),
                message,
            }
        })?;
    let http_tls = config.http_tls()?;
    // Every port is bound and the TLS keys read: root is no longer needed (none of this reads
    // from the network yet).
    match privileges::drop_root(&config.server, &config.data_dir)? {
        privileges::Outcome::Became(user) => tracing::info!(%user, "dropped root"),
        privileges::Outcome::StayedRoot => {
            tracing::warn!("running as root ([server] allow_root = true)")
        }
        privileges::Outcome::NotRoot => {}
    }
    let http_addr = listeners
        .http
        .local_addr()
        .map_err(|source| ServerError::Bind {
            what: "HTTP",
            addr: config.listen.http,
            source,
        })?;
    // Before the stores: on a full disk they cannot even open; the reserve makes room.
    let _ = std::fs::create_dir_all(&config.data_dir);
    let reserve = reserve::DiskReserve::new(&config.data_dir, config.server.disk_reserve_mib)
        .map(std::sync::Arc::new);
    if let Some(r) = &reserve {
        let r = r.clone();
        let _ = tokio::task::spawn_blocking(move || r.at_start()).await;
    }
    let stores = steps::open_stores(&config, http_addr).await?;
    let stages = steps::start_stages(&config, stores)?;
    stages
        .telemetry
        .metrics()
        .descriptors
        .set_open_files_limit(open_files);
    let watch_stop = CancellationToken::new();
    if let Some(r) = &reserve {
        reserve::hold_if_released(r, stages.spool());
        tokio::spawn(reserve::watch(
            r.clone(),
            stages.spool().clone(),
            watch_stop.clone(),
        ));
    }
    let served = steps::serve(
        &config,
        listeners,
        inbound_tls,
        &stages,
        local_clients,
        http_tls,
        &shutdown,
    );
    let imap = steps::serve_imap(&config, imap_sockets, imap_tls, &stages, &shutdown);
    let served = steps::with_imap(served, imap);
    tracing::info!(
        smtp = %config.listen.smtp, lmtp = %config.listen.lmtp, http = %config.listen.http,
        "herald is running"
    );
    shutdown.cancelled().await;
    watch_stop.cancel();
    if let Some(r) = &reserve {
        reserve::on_stop(r, stages.spool());
    }
    steps::drain(stages, served).await
}

/// The longest `herald serve` takes to stop after SIGTERM, whatever the state of the disk,
/// the store and the peers (see `steps/drain.rs`).
pub const STOP_LIMIT: std::time::Duration = steps::STOP_LIMIT;
