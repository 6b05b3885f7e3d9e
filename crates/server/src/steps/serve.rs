//! Step 3 of `server::run`: the SMTP/LMTP listeners (into the enqueue path), the HTTP API
//! with what it reads of the running stages, SIGHUP's reload, and the archive over IMAP.

use super::Stages;
use crate::listeners::{self, InboundTls, ListenerTask, Listeners};
use crate::ServerError;
use herald_config::Config;
use herald_enqueue::{ListHandler, PostmasterPolicy};
use std::sync::Arc;
use std::time::Instant;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The listeners and the HTTP API (step 3).
pub(crate) struct Served {
    pub(super) inbound: Vec<ListenerTask>,
    pub(super) api: JoinHandle<std::io::Result<()>>,
    /// The IMAP listeners (`[imap]`), each ending after its sessions.
    pub(super) imap: Vec<JoinHandle<()>>,
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
        backup: Arc::new(herald_backup::take::Source {
            data_dir: config.data_dir.clone(),
            spool: stages.spool.clone(),
            spool_dir: config.spool_config().dir,
            keys: config.key_files(),
            hostname: config.hostname.clone(),
        }),
        data_dir: config.data_dir.clone(),
        hostname: config.hostname.clone(),
        digests: stages
            .digests
            .clone()
            .map(|d| d as Arc<dyn herald_stage::offers::Digests>),
        metrics: metric_stages(stages),
        tls_reports: stages
            .tls_reports
            .clone()
            .map(|t| t as Arc<dyn herald_stage::offers::TlsReports>),
        accounts: stages.accounts.clone(),
        secure_cookies: config.http.tls_enabled()
            || config.accounts.cookie_secure
            || config.http.public_base_url.starts_with("https://"),
        public_base_url: config.http.public_base_url(config.listen.http),
        cluster: Some(stages.cluster.clone() as Arc<dyn herald_stage::offers::ClusterView>),
        webadmin: Default::default(),
        node_drain: stages
            .shards
            .clone()
            .map(|s| s as Arc<dyn herald_stage::offers::NodeDrain>),
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
            herald_config::reload::read(path)
                .ok()
                .map(|(_, table)| table),
        ),
        None => (None, None),
    };
    tokio::spawn(herald_config::reload::on_hangup(
        herald_config::reload::Reloadable {
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

/// The stages that add series to `/metrics`, in the order the scrape lists them.
fn metric_stages(stages: &Stages) -> Vec<Arc<dyn herald_stage::offers::Metrics>> {
    let mut out: Vec<Arc<dyn herald_stage::offers::Metrics>> = Vec::new();
    if let Some(d) = &stages.digests {
        out.push(d.clone());
    }
    if let Some(e) = &stages.egress {
        out.push(Arc::new(e.clone()));
    }
    out.push(stages.cluster.clone());
    if let Some(s) = &stages.shards {
        out.push(s.clone());
    }
    if let Some(k) = &stages.knowledge {
        out.push(k.clone());
    }
    out
}
