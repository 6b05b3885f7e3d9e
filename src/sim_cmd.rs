//! `herald sim`: the simulated Internet as a command of its own, for operators and benchmarks.
//!
//! - `herald sim run [--config world.toml | generator flags]` starts a DNS server and scripted
//!   SMTP receivers on 127.0.0.0/8 only, prints where they listen, writes a run directory
//!   (`herald_sim::export`: world.toml, endpoint.json, members.csv, events.jsonl, status.json)
//!   and runs until SIGINT/SIGTERM or `--duration`.
//! - `herald sim report <run-dir>` prints delivered / missing / duplicates / failed and the time
//!   to first / 50 % / 95 % / 100 % of deliverable recipients, and writes the cumulative
//!   delivery curve as `curve.png` and `curve.svg` in the run directory.
//!
//! The world runs in this process on its own runtime; the events are written by a background
//! thread so the receivers never wait on the disk.
//!
//! SECURITY: every address the world binds is checked to be loopback by `herald_sim`; a world
//! file is operator input and its errors name the key.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use herald_sim::export::{self, Endpoint, Exporter};
use herald_sim::{
    Expectation, GenSpec, ProfileFractions, ReceiverSettings, Report, World, WorldConfig,
};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the recorder is drained to events.jsonl and status.json rewritten.
const EXPORT_INTERVAL: Duration = Duration::from_millis(200);

#[derive(Subcommand)]
pub enum SimCommand {
    /// Start a simulated Internet (DNS + SMTP receivers on 127.0.0.0/8) and record what it
    /// receives into a run directory. The world is `--config world.toml`, or generated.
    Run(RunArgs),
    /// Report on a run directory: counts, t50/t95/t100, and curve.png / curve.svg.
    Report(ReportArgs),
}

#[derive(Args)]
pub struct RunArgs {
    /// Where to write world.toml, endpoint.json, members.csv, events.jsonl and status.json.
    #[arg(long, default_value = "./herald-data/sim-run")]
    run_dir: PathBuf,
    /// Stop after this many seconds (default: at SIGINT/SIGTERM).
    #[arg(long)]
    duration: Option<u64>,
    /// Port of every receiver (overrides the world file; 0 picks a free one).
    #[arg(long)]
    smtp_port: Option<u16>,
    /// Address of the DNS server (overrides the world file), e.g. 127.0.0.53:53.
    #[arg(long)]
    dns_addr: Option<SocketAddr>,
    /// Generate a member list of N addresses spread over the world's domains by weight
    /// (written to <run-dir>/members.csv, the file `herald member import` reads).
    #[arg(long)]
    members: Option<usize>,
    /// Also write the generated member list here.
    #[arg(long, requires = "members")]
    members_out: Option<PathBuf>,
    /// Fully MIME-check 1 in N messages (the rest are line-checked); 0 = no checks.
    #[arg(long)]
    check_mime_every: Option<u32>,
    /// STARTTLS hosts present a certificate for their own name issued by the world's CA
    /// (written to <run-dir>/ca.pem) instead of one self-signed certificate.
    #[arg(long)]
    tls_ca: bool,
    #[command(flatten)]
    gen: GenArgs,
}

/// The generator, used when no world file is given.
#[derive(Args)]
pub struct GenArgs {
    /// Number of domains (Zipf-sized).
    #[arg(long, default_value_t = 300)]
    domains: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Zipf exponent (1 = classic; 0 = all domains equal).
    #[arg(long, default_value_t = 1.0)]
    zipf: f64,
    /// Share of members whose domain is hung (accepts TCP, never answers).
    #[arg(long, default_value_t = 0.0)]
    hung: f64,
    /// Share of members whose domain refuses connections.
    #[arg(long, default_value_t = 0.0)]
    refused: f64,
    /// Share of members whose domain greylists.
    #[arg(long, default_value_t = 0.0)]
    greylist: f64,
    /// Share of members whose domain is slow.
    #[arg(long, default_value_t = 0.0)]
    slow: f64,
    /// Share of members that get 550 5.1.1.
    #[arg(long, default_value_t = 0.0)]
    unknown_users: f64,
    /// Share of members on throttling hosts (the biggest domains first).
    #[arg(long, default_value_t = 0.0)]
    throttle: f64,
    /// Share of members whose hosts drop connections mid-DATA.
    #[arg(long, default_value_t = 0.0)]
    drop_mid_data: f64,
    /// Share of members at one large provider whose MX hosts share one rate limit (451 4.7.28
    /// past `--rate-limit-per-sec`, 421 4.7.28 after `--rate-limit-per-conn` per connection).
    #[arg(long, default_value_t = 0.0)]
    rate_limited: f64,
    /// Messages per second the rate-limited provider accepts over all its MX hosts.
    #[arg(long, default_value_t = 300)]
    rate_limit_per_sec: u32,
    /// Messages per connection the rate-limited provider accepts.
    #[arg(long, default_value_t = 100)]
    rate_limit_per_conn: u32,
    /// Share of members whose hosts drop each recipient's first attempt mid-DATA.
    #[arg(long, default_value_t = 0.0)]
    drop_first_attempt: f64,
    /// Share of members whose hosts offer STARTTLS.
    #[arg(long, default_value_t = 0.0)]
    starttls: f64,
    /// Share of members whose hosts are tarpits (every reply one byte at a time).
    #[arg(long, default_value_t = 0.0)]
    tarpit: f64,
    /// Delay of tarpit hosts before each byte of a reply.
    #[arg(long, default_value_t = 100)]
    tarpit_byte_delay_ms: u64,
    /// Sessions a tarpit host serves at once (more get 421 4.3.2).
    #[arg(long, default_value_t = 4)]
    tarpit_max_sessions: u32,
    /// Share of members whose domain's primary MX is hung, with a working secondary.
    #[arg(long, default_value_t = 0.0)]
    hung_primary: f64,
    /// Share of members whose MX name has three addresses: refused, hung, working.
    #[arg(long, default_value_t = 0.0)]
    dead_addrs: f64,
    /// Delay of slow hosts before each reply.
    #[arg(long, default_value_t = 500)]
    slow_delay_ms: u64,
    /// Greylisting interval.
    #[arg(long, default_value_t = 60.0)]
    greylist_secs: f64,
    /// Messages per connection a throttling host accepts before 421 4.7.28.
    #[arg(long, default_value_t = 100)]
    throttle_per_conn: u32,
}

#[derive(Args)]
pub struct ReportArgs {
    /// The run directory `herald sim run` wrote.
    run_dir: PathBuf,
    /// The member list (default: <run-dir>/members.csv).
    #[arg(long)]
    members: Option<PathBuf>,
    /// Print the report as JSON (curve included) instead of text.
    #[arg(long)]
    json: bool,
    /// Do not write curve.png / curve.svg.
    #[arg(long)]
    no_chart: bool,
    /// Only the members whose domain's primary MX has this profile kind (e.g. `tarpit`).
    #[arg(long)]
    profile: Option<String>,
    /// Title of the chart (default: the run directory's name).
    #[arg(long)]
    title: Option<String>,
}

/// Runs a `herald sim` command. `world_file` is the global `--config`, which for `sim run`
/// names a world file.
pub async fn run(cmd: SimCommand, world_file: Option<PathBuf>) -> Result<()> {
    match cmd {
        SimCommand::Run(args) => run_world(args, world_file).await,
        SimCommand::Report(args) => report(args),
    }
}

fn world_config(args: &RunArgs, world_file: Option<&Path>) -> Result<WorldConfig> {
    let mut cfg = match world_file {
        Some(path) => WorldConfig::from_file(path)?,
        None => {
            let g = &args.gen;
            let spec = GenSpec {
                domains: g.domains,
                seed: g.seed,
                zipf_exponent: g.zipf,
                fractions: ProfileFractions {
                    hung: g.hung,
                    refused: g.refused,
                    greylist: g.greylist,
                    slow: g.slow,
                    unknown_users: g.unknown_users,
                    throttle: g.throttle,
                    drop_mid_data: g.drop_mid_data,
                    rate_limited: g.rate_limited,
                    drop_first_attempt: g.drop_first_attempt,
                    starttls: g.starttls,
                    tarpit: g.tarpit,
                    hung_primary: g.hung_primary,
                    dead_addrs: g.dead_addrs,
                },
                tarpit_byte_delay_ms: g.tarpit_byte_delay_ms,
                tarpit_max_sessions: g.tarpit_max_sessions,
                rate_limit_msgs_per_sec: g.rate_limit_per_sec,
                rate_limit_max_msgs_per_conn: g.rate_limit_per_conn,
                slow_delay_ms: g.slow_delay_ms,
                greylist_retry_after_secs: g.greylist_secs,
                throttle_max_msgs_per_conn: g.throttle_per_conn,
                smtp_port: herald_sim::config::DEFAULT_SMTP_PORT,
                receiver: ReceiverSettings::default(),
                ..GenSpec::default()
            };
            WorldConfig::generate(&spec)?
        }
    };
    if let Some(port) = args.smtp_port {
        cfg.smtp_port = port;
    }
    if let Some(addr) = args.dns_addr {
        cfg.dns_addr = addr;
    }
    if let Some(n) = args.check_mime_every {
        cfg.receiver.check_mime_every = n;
    }
    if args.tls_ca {
        cfg.receiver.tls_ca = true;
    }
    cfg.validate()?;
    Ok(cfg)
}

async fn run_world(args: RunArgs, world_file: Option<PathBuf>) -> Result<()> {
    let cfg = world_config(&args, world_file.as_deref())?;
    let dir = &args.run_dir;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for stale in [
        export::T0_FILE,
        export::MEMBERS_FILE,
        export::STATUS_FILE,
        export::CA_FILE,
    ] {
        let _ = std::fs::remove_file(dir.join(stale));
    }
    let members = args.members.map(|n| cfg.member_addresses(n));
    let world = World::start(cfg)
        .await
        .context("starting the simulated world")?;
    let deliverable = members.as_ref().map(|ms| {
        ms.iter()
            .filter(|m| world.expectation(m) == Expectation::Deliverable)
            .count() as u64
    });
    let exporter = Exporter::start(world.recorder().clone(), dir, EXPORT_INTERVAL, deliverable)?;
    let written = write_run_files(&world, dir, members.as_deref(), args.members_out.as_deref());
    if let Err(e) = written {
        let _ = exporter.finish();
        world.shutdown().await;
        return Err(e);
    }
    outln!("dns {}", world.dns_addr());
    outln!("smtp_port {}", world.smtp_port());
    outln!("domains {}", world.config().domains.len());
    if let (Some(ms), Some(d)) = (&members, deliverable) {
        outln!("members {} (deliverable {d})", ms.len());
    }
    outln!("run_dir {}", dir.display());
    match args.duration {
        Some(secs) => {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(secs)) => {}
                _ = crate::wait_for_signal() => {}
            }
        }
        None => crate::wait_for_signal().await,
    }
    world.shutdown().await;
    let stats = exporter.finish()?;
    outln!(
        "stopped: {} copies and {} rejections recorded in {}",
        stats.copies,
        stats.rejections,
        dir.join(export::EVENTS_FILE).display()
    );
    Ok(())
}

/// world.toml, members.csv, ca.pem, then endpoint.json last: scripts wait for it as the "ready" sign.
fn write_run_files(
    world: &World,
    dir: &Path,
    members: Option<&[String]>,
    members_out: Option<&Path>,
) -> Result<()> {
    let world_path = dir.join(export::WORLD_FILE);
    std::fs::write(&world_path, world.config().to_toml()?)
        .with_context(|| format!("writing {}", world_path.display()))?;
    if let Some(ms) = members {
        export::write_members(&dir.join(export::MEMBERS_FILE), ms)?;
        if let Some(out) = members_out {
            export::write_members(out, ms)?;
        }
    }
    if let Some(pem) = world.tls_ca_pem() {
        let ca_path = dir.join(export::CA_FILE);
        std::fs::write(&ca_path, pem).with_context(|| format!("writing {}", ca_path.display()))?;
    }
    let endpoint = Endpoint {
        dns_addr: world.dns_addr().to_string(),
        smtp_port: world.smtp_port(),
        pid: std::process::id(),
        started_unix_ms: world.recorder().started_unix_ms(),
    };
    export::write_json_atomic(&dir.join(export::ENDPOINT_FILE), &endpoint)?;
    Ok(())
}

fn report(args: ReportArgs) -> Result<()> {
    if !args.run_dir.join(export::WORLD_FILE).exists() {
        bail!(
            "{} is not a run directory (no {}; `herald sim run --run-dir` writes one)",
            args.run_dir.display(),
            export::WORLD_FILE
        );
    }
    let report = Report::from_run_dir_for(
        &args.run_dir,
        args.members.as_deref(),
        args.profile.as_deref(),
    )?;
    if args.json {
        outln!("{}", serde_json::to_string(&report)?);
    } else {
        outln!("{report}");
    }
    if !args.no_chart {
        let title = args.title.unwrap_or_else(|| {
            let name = args
                .run_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            format!("Herald sim run: {}", name.unwrap_or_default())
        });
        let (png, svg) = (
            args.run_dir.join("curve.png"),
            args.run_dir.join("curve.svg"),
        );
        herald_sim::chart::write_charts(&report, &title, &png, &svg)?;
        if !args.json {
            outln!("chart: {} {}", png.display(), svg.display());
        }
    }
    Ok(())
}
