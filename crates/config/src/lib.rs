//! Herald's configuration: one TOML file, checked once at start. Every key has a default (so no
//! file at all is a valid configuration), unknown keys are refused, and every error names its
//! key. `herald.example.toml` at the repository root documents each key with its default.
//!
//! Each stage owns its section (type, defaults, checks) beside its code; this file only
//! assembles them, holds the keys shared by several stages (`data_dir`, `hostname`, `secret`,
//! `[listen]`) and makes the checks that span sections.

pub mod reload;

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use herald_api::HttpConfig;
pub use herald_auth::dkim::{DkimDomainConfig, DkimKeyConfig};
pub use herald_enqueue::AuthSection;
pub use herald_inbound::{SmtpInConfig, TlsSection};
pub use herald_lists::{ListsConfig, PostmasterSection, MAX_POSTMASTER_FORWARD};
pub use herald_routing::ResolverConfig;
pub use herald_scheduler::SchedulerConfig;
pub use herald_smtp_client::ClientConfig;
pub use herald_spool::SpoolSection;
pub use herald_telemetry::{LogConfig, StatsSection};

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the database, the spool and the logs live.
    pub data_dir: PathBuf,
    /// This server's name: HELO/EHLO greeting, Received headers.
    pub hostname: String,
    /// Secret for unsubscribe tokens (HMAC). Empty: a random one is generated on first start and
    /// kept in `<data_dir>/secret`, so links stay valid across restarts. On a PostgreSQL store
    /// the cluster's secret in the store is used; a set one must equal it (`secret::shared`).
    pub secret: String,
    pub listen: ListenConfig,
    pub http: HttpConfig,
    pub dns: ResolverConfig,
    pub smtp_in: SmtpInConfig,
    pub delivery: ClientConfig,
    pub scheduler: SchedulerConfig,
    pub spool: SpoolSection,
    pub log: LogConfig,
    /// List housekeeping: duplicate suppression, requests, confirmations, moderation.
    pub lists: ListsConfig,
    /// DKIM keys by list domain (`[dkim."lists.example.org"]`): every copy of a list whose
    /// domain has a key is signed with it.
    pub dkim: BTreeMap<String, DkimDomainConfig>,
    /// Delivery statistics for reports and the dashboard.
    pub stats: StatsSection,
    /// Inbound TLS: the certificate for STARTTLS and the implicit-TLS submission listener.
    pub tls: TlsSection,
    /// Authentication of arriving posts (SPF, DKIM, ARC, DMARC).
    pub auth: AuthSection,
    /// Mail to postmaster (RFC 5321 §4.5.1): where it is forwarded, how long and how much of
    /// it is kept.
    pub postmaster: PostmasterSection,
    /// Who the server runs as once its listeners are bound (`[server] user`, `allow_root`).
    pub server: ServerSection,
    /// The list archive: on by default, lists private until an administrator
    /// publishes them.
    pub archive: herald_archive::ArchiveSection,
    /// Limits on mail sent on others' behalf: confirmations, held-post, request-reply,
    /// rejection and bounce-disabled notices.
    pub notice_limits: herald_guard::NoticeLimits,
    /// The file this config was loaded from (`Config::load`): SIGHUP reads it again.
    #[serde(skip)]
    pub source: Option<PathBuf>,
    /// List digests: built from the archive for digest members.
    pub digest: herald_digest::DigestConfig,
    /// The complaints address for feedback-loop reports (off by default).
    pub complaints: herald_enqueue::ComplaintsSection,
    /// TLS reporting (RFC 8460): daily reports to domains that ask for them.
    pub tls_report: herald_tlsrpt::TlsReportConfig,
    /// The content-filter hook (off by default): list posts checked by rspamd.
    pub content_filter: herald_content_filter::ContentFilterConfig,
    /// The archive over IMAP, read-only (off unless a listener is set).
    pub imap: herald_imap::ImapSection,
    /// Web accounts, sessions, sign-in throttling and the audit log.
    pub accounts: herald_accounts::AccountsConfig,
    /// Where the directory lives: SQLite in the data directory (default) or a
    /// shared PostgreSQL database.
    pub store: herald_directory::StoreConfig,
    /// This node in a cluster sharing the store: id, address, heartbeats.
    pub cluster: herald_cluster::ClusterConfig,
    /// Acknowledged posts waiting for their hand-off to the next stage.
    pub intake: herald_enqueue::IntakeSection,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./herald-data"),
            hostname: "herald.localhost".into(),
            secret: String::new(),
            listen: ListenConfig::default(),
            http: HttpConfig::default(),
            dns: ResolverConfig::default(),
            smtp_in: SmtpInConfig::default(),
            delivery: ClientConfig::default(),
            scheduler: SchedulerConfig::default(),
            spool: SpoolSection::default(),
            log: LogConfig::default(),
            lists: ListsConfig::default(),
            dkim: BTreeMap::new(),
            stats: StatsSection::default(),
            tls: TlsSection::default(),
            auth: AuthSection::default(),
            postmaster: PostmasterSection::default(),
            server: ServerSection::default(),
            archive: herald_archive::ArchiveSection::default(),
            notice_limits: herald_guard::NoticeLimits::default(),
            source: None,
            digest: herald_digest::DigestConfig::default(),
            complaints: Default::default(),
            tls_report: Default::default(),
            content_filter: Default::default(),
            imap: Default::default(),
            accounts: Default::default(),
            store: Default::default(),
            cluster: Default::default(),
            intake: Default::default(),
        }
    }
}

/// `[server]`: who the server runs as.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// The user to become after binding when started as root (e.g. "herald"). Empty: none.
    pub user: String,
    /// Its group; empty: the user's primary group.
    pub group: String,
    /// Keep running as root when no user is set (containers that isolate otherwise).
    pub allow_root: bool,
    /// Threads for blocking work (SQLite and PostgreSQL queries, file I/O); 0: twice the
    /// cores, at least 4 ([`ServerSection::blocking_pool`]). Each query handed to an idle pool
    /// thread wakes it, and with a pool as large as the burst (tokio's default is 512) every
    /// query does: on 2 cores, 4 threads took an SMTP intake burst from 4,237 to 5,196 posts/s
    /// (BENCHMARKS.md). A small pool queues queries instead, so a slow one (a PostgreSQL
    /// outage's connect timeout) delays those behind it; nothing long-lived runs on it (the
    /// backup and mbox downloads have threads of their own).
    pub blocking_threads: usize,
    /// MiB kept free in the data directory as a file (`disk-reserve`) and given back when the
    /// disk is full, so a start and a stop never block on it (`herald-host`'s `reserve.rs`); 0: none. It must
    /// hold what opening the stores and journaling the outcomes in flight need.
    pub disk_reserve_mib: u64,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            user: String::new(),
            group: String::new(),
            allow_root: false,
            blocking_threads: 0,
            disk_reserve_mib: 16,
        }
    }
}

impl ServerSection {
    /// The blocking pool's size: `blocking_threads`, or twice the cores and at least 4.
    pub fn blocking_pool(&self) -> usize {
        if self.blocking_threads > 0 {
            return self.blocking_threads;
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        (2 * cores).max(4)
    }
}

/// The largest `[server] disk_reserve_mib`: a reserve is room for a start and a stop, not a
/// second data disk.
pub const MAX_DISK_RESERVE_MIB: u64 = 1024;

/// Listening addresses. The caller binds them (tests bind port 0). Kept here: the composition
/// root binds every socket, and `[tls]` depends on `submissions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenConfig {
    pub smtp: SocketAddr,
    pub lmtp: SocketAddr,
    pub http: SocketAddr,
    /// Implicit-TLS submission (RFC 8314, "submissions"): TLS first, then SMTP. Off by default;
    /// needs `[tls]`.
    pub submissions: Option<SocketAddr>,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            smtp: SocketAddr::from(([127, 0, 0, 1], 2525)),
            lmtp: SocketAddr::from(([127, 0, 0, 1], 2424)),
            http: SocketAddr::from(([127, 0, 0, 1], 8025)),
            submissions: None,
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// A value that parsed but cannot be used (e.g. a key file), named by its key.
    #[error("{key}: {message}")]
    Unusable { key: String, message: String },
}

impl From<herald_auth::dkim::DkimConfigError> for ConfigError {
    fn from(e: herald_auth::dkim::DkimConfigError) -> Self {
        ConfigError::Unusable {
            key: e.key,
            message: e.message,
        }
    }
}

impl Config {
    /// Reads and checks a TOML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = Config::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        })?;
        config.source = Some(path.to_path_buf());
        Ok(config)
    }

    /// Parses TOML text; the error message names the offending key.
    pub fn parse(text: &str) -> Result<Config, String> {
        let cfg: Config = toml::from_str(text).map_err(|e| e.to_string().trim().to_string())?;
        cfg.check()?;
        Ok(cfg)
    }

    /// Each section's own checks, in the order they have always run (the first error is the
    /// one reported), and the hostname, which spans sections.
    fn check(&self) -> Result<(), String> {
        if self.hostname.is_empty() || self.hostname.contains(char::is_whitespace) {
            return Err("hostname: must be a host name without spaces".into());
        }
        if self.server.disk_reserve_mib > MAX_DISK_RESERVE_MIB {
            return Err(format!(
                "server.disk_reserve_mib: must be 0 to {}",
                MAX_DISK_RESERVE_MIB
            ));
        }
        self.postmaster.check(&self.hostname)?;
        self.auth.check()?;
        self.smtp_in.check()?;
        self.scheduler.check()?;
        self.lists.check()?;
        self.scheduler.validate().map_err(|e| e.to_string())?;
        self.delivery.validate().map_err(|e| e.to_string())?;
        self.stats.check()?;
        self.log.check()?;
        self.notice_limits.check()?;
        self.content_filter.check()?;
        self.check_imap()?;
        self.accounts.check()?;
        self.cluster.check()?;
        self.intake.check()?;
        self.store.location(&self.data_dir).map_err(|e| match e {
            herald_directory::DirectoryError::InvalidInput { field, reason } => {
                format!("{field}: {reason}")
            }
            other => other.to_string(),
        })?;
        // Shared fan-out shares posts through the store: SQLite is one node's.
        if self.cluster.shared_fanout && self.store.url.is_none() {
            return Err(
                "cluster.shared_fanout: needs a PostgreSQL store shared by the nodes ([store] url)"
                    .into(),
            );
        }
        self.http.check()
    }

    /// `[imap]` spans sections: it serves the archive and uses the `[tls]` certificate.
    fn check_imap(&self) -> Result<(), String> {
        if !self.imap.enabled() {
            return Ok(());
        }
        if !self.archive.enabled {
            return Err(
                "imap: serves the archive, which is off ([archive] enabled = false)".into(),
            );
        }
        let tls = self.tls.cert_file.is_some() && self.tls.key_file.is_some();
        self.imap
            .check(tls)
            .map_err(|(key, message)| format!("{key}: {message}"))
    }

    /// Loads every `[dkim]` key. An unreadable or unusable key stops the start: sending
    /// unsigned copies from a domain that publishes DKIM would fail DMARC at receivers.
    pub fn dkim_keys(&self) -> Result<herald_auth::DkimKeys, ConfigError> {
        let mut signers = Vec::with_capacity(self.dkim.len());
        for (domain, d) in &self.dkim {
            signers.push(d.signer(domain)?);
            // Says at start which domains sign, so an operator reading the log need not
            // open a copy to learn whether the key was picked up.
            tracing::info!(domain = %domain, selector = %d.key.selector,
                algorithm = d.key.algorithm.tag(),
                second = ?d.second.as_ref().map(|s| (&s.selector, s.algorithm.tag())),
                arc = d.arc, "copies will be DKIM-signed");
        }
        Ok(herald_auth::DkimKeys::new(signers))
    }

    /// The API listener's TLS configuration: its own certificate (`http.tls_cert_file`), the
    /// `[tls]` one (`http.tls_from_inbound`), or `None` for plain HTTP.
    pub fn http_tls(&self) -> Result<Option<herald_inbound::ServedCert>, ConfigError> {
        let unusable = |key: &str, message: String| ConfigError::Unusable {
            key: key.into(),
            message,
        };
        self.http.check().map_err(|m| {
            let (key, message) = m.split_once(": ").unwrap_or(("http", m.as_str()));
            unusable(key, message.to_string())
        })?;
        if let (Some(cert), Some(key)) = (&self.http.tls_cert_file, &self.http.tls_key_file) {
            return herald_inbound::load_server_config(cert, key)
                .map(Some)
                .map_err(|e| unusable("http.tls_cert_file", e.to_string()));
        }
        if !self.http.tls_from_inbound {
            return Ok(None);
        }
        match (&self.tls.cert_file, &self.tls.key_file) {
            (Some(cert), Some(key)) => herald_inbound::load_server_config(cert, key)
                .map(Some)
                .map_err(|e| unusable("tls", e.to_string())),
            _ => Err(unusable(
                "http.tls_from_inbound",
                "needs tls.cert_file and tls.key_file".into(),
            )),
        }
    }

    /// Loads the `[tls]` certificate: `None` when TLS is not configured. Half a configuration,
    /// an unusable certificate or a submissions listener without one stops the start. Here,
    /// not in the inbound crate: it spans `[tls]` and `[listen]`.
    pub fn inbound_tls(&self) -> Result<Option<herald_inbound::ServedCert>, ConfigError> {
        let unusable = |key: &str, message: String| ConfigError::Unusable {
            key: key.into(),
            message,
        };
        match (&self.tls.cert_file, &self.tls.key_file) {
            (Some(cert), Some(key)) => herald_inbound::load_server_config(cert, key)
                .map(Some)
                .map_err(|e| unusable("tls", e.to_string())),
            (None, None) if self.listen.submissions.is_some() => Err(unusable(
                "listen.submissions",
                "implicit TLS needs tls.cert_file and tls.key_file".into(),
            )),
            (None, None) => Ok(None),
            (Some(_), None) => Err(unusable(
                "tls.key_file",
                "missing (cert_file is set)".into(),
            )),
            (None, Some(_)) => Err(unusable(
                "tls.cert_file",
                "missing (key_file is set)".into(),
            )),
        }
    }

    /// The base URL for unsubscribe links.
    pub fn public_base_url(&self) -> String {
        self.http.public_base_url(self.listen.http)
    }

    /// The outbound client settings, with the HELO name defaulting to `hostname`.
    pub fn client_config(&self) -> ClientConfig {
        let mut c = self.delivery.clone();
        if c.helo_name.is_empty() || c.helo_name == "localhost" {
            c.helo_name = self.hostname.clone();
        }
        c
    }

    pub fn spool_config(&self) -> herald_spool::SpoolConfig {
        self.spool.spool_config(self.data_dir.join("spool"))
    }

    /// The key and certificate files this config names, by role: what a backup carries and
    /// where a restore on this machine puts them (`herald backup`/`restore`).
    pub fn key_files(&self) -> Vec<herald_backup::KeyFile> {
        let mut keys = Vec::new();
        let mut add = |role: String, path: &Option<PathBuf>| {
            if let Some(path) = path {
                keys.push(herald_backup::KeyFile {
                    role,
                    path: path.clone(),
                });
            }
        };
        for (domain, d) in &self.dkim {
            for key in std::iter::once(&d.key).chain(&d.second) {
                add(
                    format!("dkim:{domain}:{}", key.selector),
                    &Some(key.key_file.clone()),
                );
            }
        }
        add("tls:cert".into(), &self.tls.cert_file);
        add("tls:key".into(), &self.tls.key_file);
        add("http:cert".into(), &self.http.tls_cert_file);
        add("http:key".into(), &self.http.tls_key_file);
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_all_defaults() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.listen.smtp.port(), 2525);
        assert_eq!(c.listen.lmtp.port(), 2424);
        assert_eq!(c.listen.http.port(), 8025);
        assert_eq!(c.data_dir, PathBuf::from("./herald-data"));
        assert_eq!(c.public_base_url(), "http://127.0.0.1:8025");
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let e = Config::parse("[scheduler]\nmax_conections = 5\n").unwrap_err();
        assert!(e.contains("max_conections"), "{e}");
        let e = Config::parse("[listen]\nsmtp = \"not an address\"\n").unwrap_err();
        assert!(e.contains("smtp"), "{e}");
        let e = Config::parse("[scheduler]\nretry_jitter = 3.0\n").unwrap_err();
        assert!(e.contains("retry_jitter"), "{e}");
        let e = Config::parse("hostname = \"a b\"\n").unwrap_err();
        assert!(e.contains("hostname"), "{e}");
        let e = Config::parse("[delivery.mta_sts]\nenable = true\n").unwrap_err();
        assert!(e.contains("enable"), "unknown MTA-STS key refused: {e}");
        let e = Config::parse("[delivery.mta_sts]\nhttps_port = 0\n").unwrap_err();
        assert!(e.contains("delivery.mta_sts.https_port"), "{e}");
        let e = Config::parse("[delivery.dane]\nenable = true\n").unwrap_err();
        assert!(e.contains("enable"), "unknown DANE key refused: {e}");
        let e = Config::parse("[delivery.dane]\ncache_max_hosts = 0\n").unwrap_err();
        assert!(e.contains("delivery.dane.cache_max_hosts"), "{e}");
        let e = Config::parse("[delivery.dane]\nenabled = \"yes\"\n").unwrap_err();
        assert!(e.contains("enabled"), "{e}");
        let c = Config::parse("[delivery.dane]\nenabled = true\n").expect("valid");
        assert!(c.delivery.dane.enabled);
        let dkim = "[dkim.\"l.test\"]\nselector = \"r\"\nkey_file = \"/k\"\n";
        let c = Config::parse(&format!(
            "{dkim}[dkim.\"l.test\".second]\nselector = \"e\"\nkey_file = \"/e\"\nalgorithm = \"ed25519\"\n"
        ))
        .expect("valid");
        let d = &c.dkim["l.test"];
        assert_eq!((d.key.selector.as_str(), d.arc), ("r", true));
        let second = d.second.as_ref().expect("second");
        assert_eq!(second.algorithm, herald_auth::DkimAlgorithm::Ed25519);
        for bad in [
            "bogus = 1\n",
            "[dkim.\"l.test\".second]\nselector = \"e\"\n",
        ] {
            let e = Config::parse(&format!("{dkim}{bad}")).unwrap_err();
            assert!(e.contains("dkim") || e.contains("bogus"), "{bad}: {e}");
        }
        for bad in ["\"10.0.0.0/33\"", "\"mx.example\"", "\"\""] {
            let e = Config::parse(&format!("[auth]\ninternal_relays = [\"::1\", {bad}]\n"))
                .unwrap_err();
            assert!(e.contains("auth.internal_relays[1]"), "{bad}: {e}");
        }
        let c = Config::parse("[auth]\ninternal_relays = [\"10.1.0.0/16\"]\n").expect("valid");
        assert!(matches!(
            c.auth.lmtp_clients(),
            Ok(herald_enqueue::LmtpClients::FromReceived(b)) if b.len() == 1
        ));
        let c = Config::parse("[auth]\nlmtp_client_from_received = false\n").expect("valid");
        assert!(matches!(
            c.auth.lmtp_clients(),
            Ok(herald_enqueue::LmtpClients::Unknown)
        ));
    }

    #[test]
    fn inbound_limit_keys_are_checked_and_named() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.smtp_in.max_sessions_per_client, 20);
        assert_eq!(c.smtp_in.max_buffered_octets, 256 << 20);
        assert_eq!(c.smtp_in.limits.data_deadline_secs, 1800);
        for (text, key) in [
            (
                "[smtp_in]\nmax_buffered_octets = 1000\n",
                "smtp_in.max_buffered_octets",
            ),
            (
                "[smtp_in]\nmax_buffered_octets = 0\n",
                "smtp_in.max_buffered_octets",
            ),
            (
                "[smtp_in]\nmax_buffered_octets = -1\n",
                "max_buffered_octets",
            ),
            (
                "[smtp_in]\nmax_sessions_per_client = -1\n",
                "max_sessions_per_client",
            ),
            (
                "[smtp_in]\nmax_sessions_per_client = \"many\"\n",
                "max_sessions_per_client",
            ),
            (
                "[smtp_in.limits]\ndata_deadline_secs = 0\n",
                "smtp_in.limits.data_deadline_secs",
            ),
            (
                "[smtp_in.limits]\ndata_deadline_secs = 60\n",
                "smtp_in.limits.data_deadline_secs",
            ),
            (
                "[smtp_in.limits]\ncommand_timeout_secs = 0\n",
                "smtp_in.limits.command_timeout_secs",
            ),
            (
                "[smtp_in]\nmax_sessions_per_network = 3\n",
                "smtp_in.max_sessions_per_network",
            ),
            (
                "[smtp_in]\nstress_threshold_percent = 101\n",
                "smtp_in.stress_threshold_percent",
            ),
            (
                "[smtp_in]\nstress_threshold_percent = 1000\n",
                "stress_threshold_percent",
            ),
            (
                "[smtp_in]\nstress_command_timeout_secs = 0\n",
                "smtp_in.stress_command_timeout_secs",
            ),
            (
                "[smtp_in]\nshed_idle_sessions = \"yes\"\n",
                "shed_idle_sessions",
            ),
            ("[smtp_in]\nshed_idle = true\n", "shed_idle"),
        ] {
            let e = Config::parse(text).unwrap_err();
            assert!(e.contains(key), "{text:?}: {e}");
        }
        let c = Config::parse(
            "[smtp_in]\nmax_sessions_per_client = 0\nmax_buffered_octets = 26214400\n",
        )
        .expect("0 = no per-client limit; a budget of one largest message is allowed");
        assert_eq!(
            c.smtp_in
                .inbound_config("mx.example")
                .max_sessions_per_client,
            0
        );
    }

    #[test]
    fn the_example_config_parses_and_matches_the_defaults() {
        let text = include_str!("../../../herald.example.toml");
        let c = Config::parse(text).expect("herald.example.toml must parse");
        let d = Config::default();
        assert_eq!(c.store, d.store);
        assert_eq!(c.listen.smtp, d.listen.smtp);
        assert_eq!(c.scheduler.max_connections, d.scheduler.max_connections);
        assert_eq!(c.spool.commit_interval_ms, d.spool.commit_interval_ms);
        assert_eq!(c.smtp_in.limits, d.smtp_in.limits);
        assert_eq!(
            c.smtp_in.max_sessions_per_client,
            d.smtp_in.max_sessions_per_client
        );
        assert_eq!(c.smtp_in.max_buffered_octets, d.smtp_in.max_buffered_octets);
        assert_eq!(
            c.smtp_in.max_sessions_per_network,
            d.smtp_in.max_sessions_per_network
        );
        assert_eq!(
            c.smtp_in.stress_threshold_percent,
            d.smtp_in.stress_threshold_percent
        );
        assert_eq!(
            c.smtp_in.stress_command_timeout_secs,
            d.smtp_in.stress_command_timeout_secs
        );
        assert_eq!(c.smtp_in.shed_idle_sessions, d.smtp_in.shed_idle_sessions);
        assert_eq!(c.delivery.connect_timeout, d.delivery.connect_timeout);
        assert_eq!(c.dns.timeout_ms, d.dns.timeout_ms);
        assert_eq!(c.scheduler.retry_max_secs, d.scheduler.retry_max_secs);
        assert_eq!(c.client_config().helo_name, "herald.localhost");
        assert!(c.tls.cert_file.is_none() && c.listen.submissions.is_none());
        assert_eq!(c.delivery.mta_sts, d.delivery.mta_sts);
        assert_eq!(c.delivery.dane, d.delivery.dane);
        assert!(!c.delivery.dane.enabled, "DANE is opt-in");
        assert_eq!(c.content_filter, d.content_filter);
        assert!(!c.content_filter.enabled, "the content filter is opt-in");
        assert_eq!(
            c.scheduler.route_refresh_secs,
            d.scheduler.route_refresh_secs
        );
        assert!(c.inbound_tls().expect("no TLS is fine").is_none());
        assert_eq!(c.auth.verify_arrivals, d.auth.verify_arrivals);
        assert_eq!(c.auth.arrival_timeout_secs, d.auth.arrival_timeout_secs);
        assert_eq!(c.postmaster.forward, d.postmaster.forward);
        assert_eq!(c.postmaster.retention_days, d.postmaster.retention_days);
        assert_eq!(c.postmaster.max_stored, d.postmaster.max_stored);
    }

    #[test]
    fn postmaster_forward_addresses_are_checked_and_errors_name_the_key() {
        let c =
            Config::parse("[postmaster]\nforward = [\"ops@example.org\", \"<noc@Example.NET>\"]\n")
                .expect("valid forward addresses");
        let f = c.postmaster.forward_addresses();
        assert_eq!(f.len(), 2);
        assert_eq!(f[1].to_string(), "noc@example.net");
        for (bad, key) in [
            (
                "forward = [\"ops@example.org\", \"not an address\"]",
                "postmaster.forward[1]",
            ),
            ("forward = [\"ops@\"]", "postmaster.forward[0]"),
            (
                "forward = [\"a\\r\\nBcc: x@y.test\"]",
                "postmaster.forward[0]",
            ),
            (
                "forward = [\"Postmaster@herald.localhost\"]",
                "own postmaster",
            ),
            ("forward = \"ops@example.org\"", "forward"),
            ("retention_days = 0", "postmaster.retention_days"),
            ("max_stored = 0", "postmaster.max_stored"),
            ("forwards = []", "forwards"),
        ] {
            let e = Config::parse(&format!("[postmaster]\n{bad}\n")).expect_err(bad);
            assert!(e.contains(key), "{bad}: {e}");
        }
        let many: Vec<String> = (0..11).map(|i| format!("\"o{i}@example.org\"")).collect();
        let e = Config::parse(&format!("[postmaster]\nforward = [{}]\n", many.join(",")))
            .expect_err("too many");
        assert!(e.contains("postmaster.forward: at most 10"), "{e}");
    }

    #[test]
    fn inbound_tls_needs_both_files_and_a_usable_certificate() {
        let half = Config::parse("[tls]\ncert_file = \"/nonexistent/cert.pem\"\n").expect("parses");
        let e = half.inbound_tls().expect_err("half a config");
        assert!(e.to_string().contains("tls.key_file"), "{e}");
        let sub = Config::parse("[listen]\nsubmissions = \"127.0.0.1:4650\"\n").expect("parses");
        let e = sub.inbound_tls().expect_err("submissions without a cert");
        assert!(e.to_string().contains("listen.submissions"), "{e}");
        let missing = Config::parse(
            "[tls]\ncert_file = \"/nonexistent/c.pem\"\nkey_file = \"/nonexistent/k.pem\"\n",
        )
        .expect("parses");
        let e = missing.inbound_tls().expect_err("unreadable files");
        assert!(e.to_string().contains("/nonexistent/c.pem"), "{e}");
        assert!(
            Config::parse("[tls]\ncert = \"x\"\n").is_err(),
            "unknown keys refused"
        );
    }

    #[test]
    fn a_second_dkim_key_loads_beside_the_first_under_another_selector() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, alg) in [("r.pem", "rsa"), ("e.pem", "ed25519")] {
            let algorithm = if alg == "rsa" {
                herald_auth::DkimAlgorithm::Rsa
            } else {
                herald_auth::DkimAlgorithm::Ed25519
            };
            let k = herald_auth::dkim::generate(algorithm).expect("key");
            std::fs::write(dir.path().join(name), k.private_pem).expect("write");
        }
        let config = |second_selector: &str| {
            Config::parse(&format!(
                "[dkim.\"l.test\"]\nselector = \"r\"\nkey_file = \"{}\"\n\
                 [dkim.\"l.test\".second]\nselector = \"{second_selector}\"\nkey_file = \"{}\"\nalgorithm = \"ed25519\"\n",
                dir.path().join("r.pem").display(),
                dir.path().join("e.pem").display(),
            ))
            .expect("parses")
        };
        let keys = config("e").dkim_keys().expect("loads");
        let signer = keys.get("l.test").expect("signer");
        let second = signer.second().expect("second");
        assert_eq!(
            (second.selector(), second.algorithm().tag()),
            ("e", "ed25519-sha256")
        );
        let e = config("r").dkim_keys().unwrap_err().to_string();
        assert!(e.contains("dkim.\"l.test\".second.selector"), "{e}");
    }

    /// `[imap]`: off in the example (as by default); a bad key or value names its key.
    #[test]
    fn imap_section_is_off_by_default_and_checked() {
        let text = include_str!("../../../herald.example.toml");
        let c = Config::parse(text).expect("herald.example.toml must parse");
        assert_eq!(c.imap, herald_imap::ImapSection::default());
        assert!(!c.imap.enabled());
        let on = Config::parse("[imap]\nlisten = \"127.0.0.1:1143\"\n").expect("plain IMAP");
        assert!(on.imap.enabled());
        for (toml, key) in [
            (
                "[imap]\ntls_listen = \"127.0.0.1:1993\"\n",
                "imap.tls_listen",
            ),
            (
                "[imap]\nlisten = \"127.0.0.1:1143\"\nidle_timeout_secs = 60\n",
                "imap.idle_timeout_secs",
            ),
            (
                "[imap]\nlisten = \"127.0.0.1:1143\"\nmax_connections = 0\n",
                "imap.max_connections",
            ),
            (
                "[imap]\nlisten = \"127.0.0.1:1143\"\n[archive]\nenabled = false\n",
                "imap:",
            ),
            ("[imap]\nlisten = \"127.0.0.1:1143\"\nbogus = 1\n", "bogus"),
        ] {
            let err = Config::parse(toml).expect_err(toml);
            assert!(err.contains(key), "{toml}: {err}");
        }
    }

    /// Shared fan-out is off in the example and needs a shared store: on
    /// with the SQLite default it is refused by its key; bad shard keys name theirs.
    #[test]
    fn shared_fanout_needs_postgresql_and_checks_its_keys() {
        let text = include_str!("../../../herald.example.toml");
        let c = Config::parse(text).expect("herald.example.toml must parse");
        assert!(!c.cluster.shared_fanout);
        let on =
            "[store]\nurl = \"postgres://h@127.0.0.1:5432/d\"\n[cluster]\nshared_fanout = true\n";
        assert!(
            Config::parse(on)
                .expect("on with postgresql")
                .cluster
                .shared_fanout
        );
        for (toml, key) in [
            ("[cluster]\nshared_fanout = true\n", "cluster.shared_fanout"),
            ("[cluster]\nlease_secs = 0\n", "cluster.lease_secs"),
            ("[cluster]\nshard_members = 0\n", "cluster.shard_members"),
            (
                "[cluster]\nlease_secs = 2\nshard_report_ms = 1500\n",
                "cluster.shard_report_ms",
            ),
        ] {
            let err = Config::parse(toml).expect_err(toml);
            assert!(err.contains(key), "{toml}: {err}");
        }
    }
}
