//! `herald doctor [<list-domain>…]`: the checks of `herald-doctor`, fed from this machine's
//! config, printed with the records to publish, and the data disk's room and fill rate (each
//! run records a sample in the data directory). Exits with status 1 when anything is an error.

use crate::client::Api;
use anyhow::{Context, Result};
use clap::Args;
use herald_doctor::{DkimExpectation, Finding, Inputs, Severity};
use herald_server::Config;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

#[derive(Args)]
pub struct DoctorArgs {
    /// List domains to check (default: the domains of the running server's lists).
    domains: Vec<String>,
    /// An address copies leave from (repeatable; default: the one this machine's route picks).
    #[arg(long = "ip")]
    ips: Vec<IpAddr>,
    /// The port mail arrives on at the MX hosts.
    #[arg(long, default_value_t = 25)]
    port: u16,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(config: &Config, api: Result<Api>, args: DoctorArgs) -> Result<()> {
    let domains = domains(&args, api).await?;
    let egress = if args.ips.is_empty() {
        // Toward a nameserver the config names, else toward a documentation address: either
        // way no packet is sent, the kernel only picks the source address of its route.
        let toward = config
            .dns
            .nameservers
            .first()
            .copied()
            .unwrap_or_else(|| SocketAddr::from(([198, 51, 100, 1], 53)));
        vec![herald_doctor::source_address(toward)
            .context("cannot tell this machine's sending address: give it with --ip")?]
    } else {
        args.ips.clone()
    };
    let dkim = dkim_expectations(config);
    let inputs = Inputs {
        domains,
        egress,
        helo: config.hostname.clone(),
        dkim,
        tls_cert: config.tls.cert_file.clone(),
        smtp_port: args.port,
        connect_timeout: Duration::from_secs(5),
    };
    let dns = herald_doctor::dns::Dns::new(&config.dns).map_err(anyhow::Error::msg)?;
    let auth = herald_auth::Authenticator::new(
        &config.dns.nameservers,
        Duration::from_millis(config.dns.timeout_ms),
        config.dns.attempts,
        &config.hostname,
    )
    .context("the SPF checker")?;
    let mut findings = herald_doctor::examine(&inputs, &dns, &auth).await;
    findings.extend(store_check(config).await);
    findings.push(disk_check(config).await);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&findings)?);
    } else {
        print_table(&findings);
    }
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    anyhow::ensure!(errors == 0, "{errors} problem(s) to fix (see ERROR lines)");
    Ok(())
}

/// The domains to examine: those given, else the running server's list domains.
async fn domains(args: &DoctorArgs, api: Result<Api>) -> Result<Vec<String>> {
    let mut domains: Vec<String> = args
        .domains
        .iter()
        .map(|d| d.to_ascii_lowercase())
        .collect();
    if domains.is_empty() {
        let api = api.context("no domain given, and no server to ask for its lists")?;
        let lists: Vec<herald_api_types::ListView> = api
            .get("/api/v1/lists")
            .await
            .context("no domain given: asked the running server for its lists")?;
        for l in lists {
            if let Some((_, d)) = l.list.address.rsplit_once('@') {
                let d = d.to_ascii_lowercase();
                if !domains.contains(&d) {
                    domains.push(d);
                }
            }
        }
        anyhow::ensure!(
            !domains.is_empty(),
            "the server has no lists: name a domain"
        );
    }
    Ok(domains)
}

/// The DKIM records the configured keys expect in DNS, per domain; a key file that cannot be
/// read is kept as its error, for the report.
fn dkim_expectations(config: &Config) -> BTreeMap<String, Vec<DkimExpectation>> {
    let mut dkim: BTreeMap<String, Vec<DkimExpectation>> = BTreeMap::new();
    for (domain, d) in &config.dkim {
        for key in std::iter::once(&d.key).chain(&d.second) {
            let record = std::fs::read(&key.key_file)
                .map_err(|e| format!("{}: {e}", key.key_file.display()))
                .and_then(|pem| {
                    herald_auth::DkimSigner::from_pem(domain, &key.selector, key.algorithm, &pem)
                        .map(|s| s.dns_record())
                        .map_err(|e| e.to_string())
                });
            dkim.entry(domain.to_ascii_lowercase())
                .or_default()
                .push(DkimExpectation {
                    selector: key.selector.clone(),
                    record,
                });
        }
    }
    dkim
}

/// The `[store]` check when the directory is in PostgreSQL (a SQLite file needs none): one
/// connection, the schema version read, nothing changed.
async fn store_check(config: &Config) -> Option<Finding> {
    let herald_directory::StoreLocation::Postgres(url) =
        config.store.location(&config.data_dir).ok()?
    else {
        return None;
    };
    let subject = config.store.describe(&config.data_dir);
    // Blocking client: off the runtime's threads.
    let found =
        tokio::task::spawn_blocking(move || herald_directory::Directory::probe_postgres(&url))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
    Some(herald_doctor::store::store_finding(
        &subject,
        found,
        herald_directory::SCHEMA_VERSION,
    ))
}

/// The data disk: room left and days to full at the data directory's growth rate.
async fn disk_check(config: &Config) -> Finding {
    let dir = config.data_dir.clone();
    let now_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Walks the data directory: off the runtime's threads.
    tokio::task::spawn_blocking(move || herald_doctor::disk::check(&dir, now_secs))
        .await
        .unwrap_or_else(|e| herald_doctor::disk::finding_error(&config.data_dir, &e.to_string()))
}

fn print_table(findings: &[Finding]) {
    let width = findings
        .iter()
        .map(|f| f.subject.len())
        .max()
        .unwrap_or(0)
        .min(48);
    for f in findings {
        outln!(
            "{:<5} {:<7} {:<width$} {}",
            f.severity.to_string(),
            f.check,
            f.subject,
            f.message
        );
        if let Some(record) = &f.publish {
            outln!("      publish: {record}");
        }
    }
    let count = |s| findings.iter().filter(|f| f.severity == s).count();
    outln!(
        "\n{} ok, {} warnings, {} errors",
        count(Severity::Ok),
        count(Severity::Warn),
        count(Severity::Error)
    );
}
