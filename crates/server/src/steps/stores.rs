//! Step 1 of `server::run`: the data directory and everything stored in it — the directory
//! (SQLite or PostgreSQL), the cluster secret and this node's membership, the spool with the
//! posts it recovered, telemetry, the resolver, the dedup store and the accounts.

use crate::ServerError;
use herald_config::Config;
use herald_directory::Directory;
use herald_enqueue::{DedupConfig, DedupStore};
use herald_routing::MxResolver;
use herald_spool::{RecoveredPost, Spool};
use herald_telemetry::Telemetry;
use std::sync::Arc;

/// What step 1 opens.
pub(crate) struct Stores {
    pub(super) secret: Vec<u8>,
    pub(super) directory: Directory,
    pub(super) spool: Spool,
    pub(super) recovered: Vec<RecoveredPost>,
    pub(super) telemetry: Telemetry,
    pub(super) resolver: Arc<MxResolver>,
    pub(super) dedup: DedupStore,
    /// Web accounts and the audit log (`accounts.db`).
    pub(super) accounts: herald_accounts::Accounts,
    /// This node's membership of the cluster: joined in `open_stores`.
    pub(super) cluster: Arc<herald_cluster::Cluster>,
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
            tokio::task::spawn_blocking(move || herald_host::secret::shared(&c, &d))
                .await
                .map_err(|e| ServerError::Task {
                    what: "read the cluster secret",
                    message: e.to_string(),
                })??
        }
        herald_directory::StoreKind::Sqlite => {
            herald_host::secret::load_or_create(config).map_err(data_err)?
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
