//! The TLS reporting stage: takes each session's record from the scheduler, adds it up in
//! memory per (day, domain, policy, MX address, result), flushes the sums to the ledger every
//! few seconds and at shutdown, and once an hour sends the reports of the finished UTC days that
//! have none yet: the domain's `_smtp._tls` record is looked up, the report built, and sent to
//! each `mailto:` destination through the one enqueue path (server mail from the null sender,
//! DKIM-signed with the submitter domain's key like every copy) and POSTed to each `https:` one.
//!
//! What is counted is a session *per recipient domain it carried mail for* (RFC 8460 reports
//! per policy domain); a failed connection attempt counts for every domain routed to its MX
//! hosts (see the scheduler's `report_tls_failures`).
//!
//! SECURITY: report destinations come from the recipient domain's DNS (see `record`); only
//! Herald's own report is sent there, at most once per destination per domain per day. The HTTPS
//! client verifies the server with the same trust anchors as MTA-STS, follows no redirect, uses
//! no proxy and is bounded by a timeout.

use crate::ledger::{Ledger, LedgerError, Outcome, Row};
use crate::record::{self, Rua};
use crate::report::{self, Submitter};
use herald_enqueue::{Enqueuer, Submission};
use herald_types::{Address, TlsSessionRecord};
use hickory_resolver::TokioResolver;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Records queued from the scheduler at most (a full channel drops records, never blocks
/// delivery).
pub const CHANNEL_CAPACITY: usize = 8192;
/// Days a report can still be sent after its day ended; older counts are forgotten.
pub const KEEP_DAYS: i64 = 7;

/// `[tls_report]`: TLS reporting (RFC 8460). On by default: a domain that publishes a
/// `_smtp._tls` record asks every sender for it.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsReportConfig {
    pub enabled: bool,
    /// `organization-name` (empty: the server's hostname).
    pub organization: String,
    /// `contact-info` (empty: `postmaster@<domain>`).
    pub contact: String,
    /// The submitter domain: the report's `TLS-Report-Submitter`, its sender
    /// (`postmaster@<domain>`) and the DKIM key it is signed with. Empty: the first domain with
    /// a `[dkim]` key, else the hostname (the report then goes out unsigned, which receivers may
    /// discard: RFC 8460 §5.3 asks for a signature).
    pub domain: String,
    /// How often finished days are looked for, seconds.
    pub check_interval_secs: u64,
    /// How often counts are written to the ledger, seconds.
    pub flush_interval_secs: u64,
    /// Bound on one HTTPS upload, seconds.
    pub https_timeout_secs: u64,
}

impl Default for TlsReportConfig {
    fn default() -> Self {
        TlsReportConfig {
            enabled: true,
            organization: String::new(),
            contact: String::new(),
            domain: String::new(),
            check_interval_secs: 3600,
            flush_interval_secs: 10,
            https_timeout_secs: 30,
        }
    }
}

/// Why TLS reporting failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsReportError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("the TLS report ledger lock was poisoned by a panic")]
    Poisoned,
    #[error("a TLS report task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("not a day (YYYY-MM-DD): {0}")]
    BadDay(String),
    #[error("cannot send TLS reports from {0}: not a usable address")]
    BadSender(String),
}

/// What became of one domain's report, for the operator.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentReport {
    pub day: String,
    pub domain: String,
    pub report_id: String,
    /// `sent`, `no-record` or `failed`.
    pub state: String,
    pub detail: String,
    /// Sessions with TLS as required / failed, summed over the report's policies.
    pub successful: u64,
    pub failed: u64,
}

/// (day, domain, row): a row of the ledger.
type Key = (String, String, Row);

/// The stage's handle (shared by its loop and the API).
pub struct TlsReporting {
    ledger: Arc<Mutex<Ledger>>,
    /// Sessions since the last flush: by (day, domain, row without count or reason), the count
    /// and the latest reason.
    counts: Mutex<HashMap<Key, (u64, String)>>,
    submitter: Submitter,
    from: Address,
    enqueuer: Arc<Enqueuer>,
    resolver: TokioResolver,
    http: Result<reqwest::Client, String>,
    cfg: TlsReportConfig,
}

impl TlsReporting {
    /// Opens the ledger at `path`. `hostname` and `dkim_domains` supply the defaults of the
    /// organization and the submitter domain.
    pub fn open(
        cfg: TlsReportConfig,
        path: &Path,
        hostname: &str,
        dkim_domains: &[String],
        enqueuer: Arc<Enqueuer>,
        resolver: TokioResolver,
        ca_file: Option<&Path>,
    ) -> Result<Arc<TlsReporting>, TlsReportError> {
        let ledger = Ledger::open(path)?;
        let domain = match (cfg.domain.as_str(), dkim_domains.first()) {
            ("", Some(d)) => d.clone(),
            ("", None) => hostname.to_string(),
            (d, _) => d.to_string(),
        }
        .to_ascii_lowercase();
        let from_text = format!("postmaster@{domain}");
        let from =
            Address::parse(&from_text).map_err(|_| TlsReportError::BadSender(from_text.clone()))?;
        let submitter = Submitter {
            organization: match cfg.organization.as_str() {
                "" => hostname.to_string(),
                o => o.to_string(),
            },
            contact: match cfg.contact.as_str() {
                "" => from_text,
                c => c.to_string(),
            },
            domain,
        };
        let http = https_client(
            &resolver,
            ca_file,
            Duration::from_secs(cfg.https_timeout_secs.max(1)),
        );
        Ok(Arc::new(TlsReporting {
            ledger: Arc::new(Mutex::new(ledger)),
            counts: Mutex::new(HashMap::new()),
            submitter,
            from,
            enqueuer,
            resolver,
            http,
            cfg,
        }))
    }

    /// The channel the scheduler reports sessions on.
    pub fn channel() -> (
        mpsc::Sender<TlsSessionRecord>,
        mpsc::Receiver<TlsSessionRecord>,
    ) {
        mpsc::channel(CHANNEL_CAPACITY)
    }

    /// The stage's loop: counts records, flushes, sends finished days; flushes once more when
    /// `stop` is cancelled.
    pub async fn run(
        self: Arc<Self>,
        mut rx: mpsc::Receiver<TlsSessionRecord>,
        stop: CancellationToken,
    ) {
        let mut flush =
            tokio::time::interval(Duration::from_secs(self.cfg.flush_interval_secs.max(1)));
        let mut check =
            tokio::time::interval(Duration::from_secs(self.cfg.check_interval_secs.max(1)));
        loop {
            tokio::select! {
                record = rx.recv() => match record {
                    Some(r) => self.count(r),
                    None => break,
                },
                _ = flush.tick() => self.flush_logged().await,
                _ = check.tick() => {
                    self.flush_logged().await;
                    if let Err(e) = self.send_finished_days().await {
                        tracing::warn!(error = %e, "TLS reports: sending finished days failed");
                    }
                }
                _ = stop.cancelled() => break,
            }
        }
        while let Ok(r) = rx.try_recv() {
            self.count(r);
        }
        self.flush_logged().await;
    }

    fn count(&self, r: TlsSessionRecord) {
        let (result, info) = match r.failure {
            Some((t, why)) => (Some(t), truncate(&why, 200)),
            None => (None, String::new()),
        };
        let row = Row {
            policy: r.policy.kind,
            policy_strings: r.policy.strings.to_vec(),
            mx_host: r.mx_host.to_ascii_lowercase(),
            receiving_ip: r.receiving_ip.to_string(),
            result,
            // The reason is not part of the key (it varies); the latest one is kept beside it.
            info: String::new(),
            count: 0,
        };
        let Ok(mut counts) = self.counts.lock() else {
            return;
        };
        let entry = counts.entry((today(), r.policy_domain, row)).or_default();
        entry.0 += 1;
        if !info.is_empty() {
            entry.1 = info;
        }
    }

    async fn flush_logged(&self) {
        if let Err(e) = self.flush().await {
            tracing::warn!(error = %e, "TLS reports: counts not written; kept for the next flush");
        }
    }

    /// Writes the counts gathered since the last flush to the ledger; on failure they are put
    /// back for the next flush.
    pub async fn flush(&self) -> Result<(), TlsReportError> {
        let taken: Vec<Key> = {
            let mut counts = self.counts.lock().map_err(|_| TlsReportError::Poisoned)?;
            counts
                .drain()
                .map(|((day, domain, mut row), (n, info))| {
                    row.count = n;
                    row.info = info;
                    (day, domain, row)
                })
                .collect()
        };
        if taken.is_empty() {
            return Ok(());
        }
        let ledger = self.ledger.clone();
        let (result, taken) = tokio::task::spawn_blocking(move || {
            let result = match ledger.lock() {
                Ok(mut l) => l.add(&taken).map_err(TlsReportError::from),
                Err(_) => Err(TlsReportError::Poisoned),
            };
            (result, taken)
        })
        .await?;
        if result.is_err() {
            let mut counts = self.counts.lock().map_err(|_| TlsReportError::Poisoned)?;
            for (day, domain, mut row) in taken {
                let (n, info) = (row.count, std::mem::take(&mut row.info));
                row.count = 0;
                let entry = counts.entry((day, domain, row)).or_default();
                entry.0 += n;
                if entry.1.is_empty() {
                    entry.1 = info;
                }
            }
        }
        result
    }

    /// Sends the reports of every finished day (within [`KEEP_DAYS`]) that has none yet, and
    /// forgets older days.
    pub async fn send_finished_days(&self) -> Result<Vec<SentReport>, TlsReportError> {
        let today = today();
        let ledger = self.ledger.clone();
        let t = today.clone();
        let pending = tokio::task::spawn_blocking(move || {
            let l = ledger.lock().map_err(|_| TlsReportError::Poisoned)?;
            l.purge_before(&days_before(&t, KEEP_DAYS))?;
            Ok::<_, TlsReportError>(l.pending(&t)?)
        })
        .await??;
        let mut sent = Vec::new();
        for (day, domain) in pending {
            if let Some(r) = self.send_one(&day, &domain).await? {
                sent.push(r);
            }
        }
        Ok(sent)
    }

    /// Sends (again) the reports of `day` for every domain with sessions that day — today's
    /// too, as far as it has gone: an operator's `herald tls-report send`.
    pub async fn send_day(&self, day: &str) -> Result<Vec<SentReport>, TlsReportError> {
        day.parse::<jiff::civil::Date>()
            .map_err(|_| TlsReportError::BadDay(day.to_string()))?;
        self.flush().await?;
        let ledger = self.ledger.clone();
        let d = day.to_string();
        let domains = tokio::task::spawn_blocking(move || {
            let l = ledger.lock().map_err(|_| TlsReportError::Poisoned)?;
            Ok::<_, TlsReportError>(l.domains(&d)?)
        })
        .await??;
        let mut sent = Vec::new();
        for domain in domains {
            if let Some(r) = self.send_one(day, &domain).await? {
                sent.push(r);
            }
        }
        Ok(sent)
    }

    /// Builds and sends `domain`'s report for `day`. `None`: the record could not be looked up
    /// now (a DNS failure): tried again at the next check.
    async fn send_one(
        &self,
        day: &str,
        domain: &str,
    ) -> Result<Option<SentReport>, TlsReportError> {
        let ledger = self.ledger.clone();
        let (d, dom) = (day.to_string(), domain.to_string());
        let rows = tokio::task::spawn_blocking(move || {
            let l = ledger.lock().map_err(|_| TlsReportError::Poisoned)?;
            Ok::<_, TlsReportError>(l.rows(&d, &dom)?)
        })
        .await??;
        let report_id = format!("{}.{:016x}", day.replace('-', ""), rand::random::<u64>());
        let built = report::build(&self.submitter, domain, day, &report_id, &rows);
        let (successful, failed) = built.policies.iter().fold((0, 0), |(o, f), p| {
            (
                o + p.summary.total_successful_session_count,
                f + p.summary.total_failure_session_count,
            )
        });
        let outcome = match self.destinations(domain).await {
            Lookup::Failed(why) => {
                tracing::info!(%domain, %day, reason = %why, "TLS report: record lookup failed; will try again");
                return Ok(None);
            }
            Lookup::None(why) => Outcome {
                report_id,
                state: "no-record".into(),
                detail: why,
            },
            Lookup::Found(ruas) => self.deliver(day, domain, &built, ruas).await,
        };
        tracing::info!(%domain, %day, state = %outcome.state, detail = %outcome.detail, successful, failed, "TLS report");
        let ledger = self.ledger.clone();
        let (d, dom, o) = (day.to_string(), domain.to_string(), outcome.clone());
        tokio::task::spawn_blocking(move || {
            let l = ledger.lock().map_err(|_| TlsReportError::Poisoned)?;
            Ok::<_, TlsReportError>(l.record(&d, &dom, &o, herald_types::unix_ms_now() as i64)?)
        })
        .await??;
        Ok(Some(SentReport {
            day: day.to_string(),
            domain: domain.to_string(),
            report_id: outcome.report_id,
            state: outcome.state,
            detail: outcome.detail,
            successful,
            failed,
        }))
    }

    /// The domain's report destinations from its `_smtp._tls` record.
    async fn destinations(&self, domain: &str) -> Lookup {
        let name = format!("_smtp._tls.{}.", domain.trim_end_matches('.'));
        match self.resolver.txt_lookup(name).await {
            Ok(answer) => {
                let texts: Vec<String> = answer
                    .iter()
                    .map(|txt| {
                        let bytes: Vec<u8> = txt
                            .txt_data()
                            .iter()
                            .flat_map(|c| c.iter().copied())
                            .collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    })
                    .collect();
                match record::select(texts.iter().map(String::as_str)) {
                    None => Lookup::None("no single v=TLSRPTv1 record".into()),
                    Some(r) => match record::parse(r) {
                        Ok(ruas) => Lookup::Found(ruas),
                        Err(e) => Lookup::None(format!("unusable record: {e}")),
                    },
                }
            }
            Err(e) if e.is_no_records_found() || e.is_nx_domain() => {
                Lookup::None("no _smtp._tls record".into())
            }
            Err(e) => Lookup::Failed(e.to_string()),
        }
    }

    /// Sends the report to each destination; `sent` when one took it.
    async fn deliver(
        &self,
        day: &str,
        domain: &str,
        built: &report::Report,
        ruas: Vec<Rua>,
    ) -> Outcome {
        let gz = report::gzip(built);
        let begin = day_start(day).unwrap_or(0);
        let file = report::file_name(
            &self.submitter.domain,
            domain,
            begin,
            begin + 86_399,
            &built.report_id,
        );
        let mut notes = Vec::new();
        let mut ok = false;
        let mailto: Vec<Address> = ruas
            .iter()
            .filter_map(|r| match r {
                Rua::Mailto(a) => Some(a.clone()),
                Rua::Https(_) => None,
            })
            .collect();
        if !mailto.is_empty() {
            let to: Vec<String> = mailto.iter().map(|a| a.to_string()).collect();
            let now = (herald_types::unix_ms_now() / 1000) as i64;
            let body = report::mail(
                &self.submitter,
                &self.from.to_string(),
                &to,
                domain,
                built,
                &gz,
                &file,
                now,
            );
            let submission = Submission::Server {
                from: self.from.clone(),
                to: mailto,
                // Herald originates the report: no DSN request of anyone's to relay.
                dsn: None,
                body: body.into(),
            };
            match self.enqueuer.enqueue(submission).await {
                Ok(id) => {
                    ok = true;
                    notes.push(format!("mailto {} queued as post {id}", to.join(",")));
                }
                Err(e) => notes.push(format!("mailto {}: {e}", to.join(","))),
            }
        }
        for rua in &ruas {
            let Rua::Https(url) = rua else { continue };
            match self.post(url, &gz).await {
                Ok(status) => {
                    ok = true;
                    notes.push(format!("{url}: HTTP {status}"));
                }
                Err(why) => notes.push(format!("{url}: {why}")),
            }
        }
        Outcome {
            report_id: built.report_id.clone(),
            state: if ok { "sent" } else { "failed" }.into(),
            detail: notes.join("; "),
        }
    }

    async fn post(&self, url: &str, gz: &[u8]) -> Result<u16, String> {
        let client = self.http.as_ref().map_err(Clone::clone)?;
        let response = client
            .post(url)
            .header("Content-Type", "application/tlsrpt+gzip")
            .body(gz.to_vec())
            .send()
            .await
            .map_err(|e| error_chain(&e))?;
        let status = response.status().as_u16();
        if response.status().is_success() {
            Ok(status)
        } else {
            Err(format!("HTTP {status}"))
        }
    }
}

enum Lookup {
    Found(Vec<Rua>),
    /// The domain asks for no report (the reason).
    None(String),
    /// DNS did not answer: try again later.
    Failed(String),
}

/// The HTTPS client for `https:` destinations.
fn https_client(
    resolver: &TokioResolver,
    ca_file: Option<&Path>,
    timeout: Duration,
) -> Result<reqwest::Client, String> {
    let tls = herald_routing::trust::verifying_config(ca_file)?;
    reqwest::Client::builder()
        .use_preconfigured_tls(rustls::ClientConfig::clone(&tls))
        .dns_resolver(Arc::new(ReportHostResolver(resolver.clone())))
        .https_only(true)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .user_agent("herald")
        .build()
        .map_err(|e| error_chain(&e))
}

/// Resolves report hosts through Herald's own resolver (the configured nameservers), like every
/// other lookup Herald makes. Port 0: the URL's port (or 443) applies.
struct ReportHostResolver(TokioResolver);

impl reqwest::dns::Resolve for ReportHostResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let resolver = self.0.clone();
        let host = format!("{}.", name.as_str().trim_end_matches('.'));
        Box::pin(async move {
            let ips = resolver.lookup_ip(host).await?;
            let addrs: Vec<SocketAddr> = ips
                .iter()
                .take(8)
                .map(|ip| SocketAddr::new(ip, 0))
                .collect();
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}

fn truncate(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect()
}

/// Today's UTC date, `YYYY-MM-DD`.
pub fn today() -> String {
    jiff::tz::Offset::UTC
        .to_datetime(jiff::Timestamp::now())
        .date()
        .to_string()
}

/// Yesterday's UTC date: the last finished day.
pub fn yesterday() -> String {
    days_before(&today(), 1)
}

/// The day `n` days before `day` (itself when it does not parse).
fn days_before(day: &str, n: i64) -> String {
    day.parse::<jiff::civil::Date>()
        .ok()
        .and_then(|d| d.checked_sub(jiff::Span::new().days(n)).ok())
        .map_or_else(|| day.to_string(), |d| d.to_string())
}

/// Unix seconds at the start of `day` (UTC).
fn day_start(day: &str) -> Option<i64> {
    let d = day.parse::<jiff::civil::Date>().ok()?;
    let start = jiff::tz::Offset::UTC
        .to_timestamp(d.to_datetime(jiff::civil::Time::midnight()))
        .ok()?;
    Some(start.as_second())
}

/// Runs `reporting` as a row of the running table: it counts what the scheduler's sessions
/// report on `sessions` and sends the daily reports; stopped with the other stages (it
/// flushes once more then).
pub fn start(
    reporting: Arc<TlsReporting>,
    sessions: mpsc::Receiver<TlsSessionRecord>,
) -> herald_stage::Started<Arc<TlsReporting>> {
    let r = reporting.clone();
    herald_stage::Started::spawn("TLS reports", herald_stage::StopAt::Stages, |stop| {
        r.run(sessions, stop)
    })
    .map_offers(|()| reporting)
}
